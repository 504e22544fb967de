#!lua
-- refund: PAID (nothing redeemed yet) -> REFUNDED; the tickets go back on sale and the buyer's limit
-- usage is returned.
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 2 pools, 3 seatfree, 4 seatidx,
--   5 seatown, 6 usage, 11 outbox, 12 live, 13 order.
-- ARGV: none
-- Returns {code, detail, order fields (flat HGETALL, after the change)}:
--   DONE      ''   refunded
--   INVALID   ''   not PAID, or a pool was already redeemed
--   NOT_FOUND ''

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Reads and checks.
local o = redis.call('HMGET', KEYS[13], 'id', 'state', 'ver', 'qty', 'pools', 'seats', 'redeemed', 'user',
  'phone', 'id_number', 'device', 'txn', 'amt')
if not o[1] then return { 'NOT_FOUND', '' } end
local oid, state, ver, qty = o[1], o[2], tonumber(o[3]), tonumber(o[4])
if state ~= 'PAID' or (o[7] or '') ~= '' then return { 'INVALID', '', redis.call('HGETALL', KEYS[13]) } end

-- Writes: give back sold tickets, seats and limit usage.
for pid in string.gmatch(o[5], '[^,]+') do
  local c = redis.call('HMGET', KEYS[2], pid .. ':sold', pid .. ':slot')
  if c[1] then
    local sold = tonumber(c[1])
    if sold > 0 then redis.call('HINCRBY', KEYS[2], pid .. ':sold', -math.min(qty, sold)) end
    redis.call('HINCRBY', KEYS[2], pid .. ':avail', qty)
    if c[2] then
      for name in string.gmatch(o[6] or '', '[^,]+') do
        local m = pid .. '/' .. name
        local idx = redis.call('HGET', KEYS[4], m)
        if idx and redis.call('HGET', KEYS[5], m) == oid then
          redis.call('HDEL', KEYS[5], m)
          redis.call('ZADD', KEYS[3], tonumber(c[2]) * 1000000 + tonumber(idx), m)
        end
      end
    end
  end
end
local dims = { { 'user', o[8] }, { 'phone', o[9] }, { 'id_number', o[10] }, { 'device', o[11] } }
for _, dv in ipairs(dims) do
  if dv[2] then
    local f = dv[1] .. '\n' .. dv[2]
    local u = redis.call('HGET', KEYS[6], f)
    if u then
      local left = tonumber(u) - math.min(qty, tonumber(u))
      if left == 0 then redis.call('HDEL', KEYS[6], f) else redis.call('HSET', KEYS[6], f, left) end
    end
  end
end
redis.call('SREM', KEYS[12], oid)
redis.call('HSET', KEYS[13], 'state', 'REFUNDED', 'ver', tostring(ver + 1))
local entry = { 'o', oid, 's', 'REFUNDED', 'v', tostring(ver + 1), 'at', tostring(now), 'k', 'refunded' }
if o[12] then entry[#entry + 1] = 'txn'; entry[#entry + 1] = o[12] end
entry[#entry + 1] = 'amt'; entry[#entry + 1] = o[13]
redis.call('XADD', KEYS[11], '*', unpack(entry))
return { 'DONE', '', redis.call('HGETALL', KEYS[13]) }
