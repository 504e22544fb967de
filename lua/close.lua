#!lua
-- close: CREATED -> CLOSED (a cancel, or the sweeper on an expired hold); stock, seats and limit usage
-- go back, so the SKU is on sale again (the stock view's sold-out flag follows from the counters).
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 2 pools, 3 seatfree, 4 seatidx,
--   5 seatown, 6 usage, 9 deadlines, 11 outbox, 12 live, 13 order.
-- ARGV: 1 reason: "cancelled" | "expired"
-- Returns {code, detail, order fields (flat HGETALL, after the change)}:
--   DONE      ''   closed
--   INVALID   ''   the order is not CREATED
--   NOT_DUE   ''   "expired" asked before the deadline by Redis TIME
--   NOT_FOUND ''

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reason = ARGV[1]

-- Reads and checks.
local o = redis.call('HMGET', KEYS[13], 'id', 'state', 'ver', 'qty', 'pools', 'seats', 'exp', 'user',
  'phone', 'id_number', 'device')
if not o[1] then return { 'NOT_FOUND', '' } end
local oid, state, ver, qty = o[1], o[2], tonumber(o[3]), tonumber(o[4])
if state ~= 'CREATED' then return { 'INVALID', '', redis.call('HGETALL', KEYS[13]) } end
if reason == 'expired' and now < tonumber(o[7]) then return { 'NOT_DUE', '', redis.call('HGETALL', KEYS[13]) } end

-- Writes: give back held tickets, seats and limit usage.
for pid in string.gmatch(o[5], '[^,]+') do
  local c = redis.call('HMGET', KEYS[2], pid .. ':held', pid .. ':slot')
  if c[1] then
    local held = tonumber(c[1])
    if held > 0 then redis.call('HINCRBY', KEYS[2], pid .. ':held', -math.min(qty, held)) end
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
redis.call('ZREM', KEYS[9], oid)
redis.call('SREM', KEYS[12], oid)
redis.call('HSET', KEYS[13], 'state', 'CLOSED', 'ver', tostring(ver + 1))
redis.call('XADD', KEYS[11], '*', 'o', oid, 's', 'CLOSED', 'v', tostring(ver + 1), 'at', tostring(now),
  'k', reason)
return { 'DONE', '', redis.call('HGETALL', KEYS[13]) }
