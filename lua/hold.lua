#!lua
-- hold: the sale's one atomic step (DESIGN §5). All reads and checks, then all writes.
--
-- KEYS (all in the event's slot, `wk:{ev:<event>}:...`; see lua/README.md for the layout):
--   1 ev        HASH  event meta (opens, closes, hold, paused, limits, sku:<id>, ...)
--   2 pools     HASH  <pool>:cap/avail/held/sold/slot, #holds/#units (holds ever made, their tickets)
--   3 seatfree  ZSET  free seats, member <pool>/<seat>, score slot*1e6+index
--   4 seatidx   HASH  <pool>/<seat> -> index in the pool's seat list
--   5 seatown   HASH  <pool>/<seat> -> order id holding it
--   6 usage     HASH  <dimension>\n<value> -> tickets counted
--   7 idem      HASH  <user>\n<idempotency key> -> <fingerprint>\n<order id>
--   8 jtis      ZSET  consumed admission-token jtis, score = when they may be forgotten (ms)
--   9 deadlines ZSET  CREATED orders, score = hold deadline (ms)
--  10 txns      HASH  (unused here)
--  11 outbox    STREAM
--  12 live      SET   CREATED/PAID/USED order ids (what the reconciler sums)
--  13 order     HASH  the new order
--  14 wait      HASH  the waitlist: jti -> turn|seen|until|qty|pools (admitted fans who met "sold out" while
--                     unpaid holds could still give tickets back; first come, first served for those), and
--                     `#turn`, the last turn given
-- ARGV:
--   1 order id  2 sku  3 qty  4 user
--   5 phone  6 id_number  7 device   -- "" when absent, "=" .. value when present
--   8 idempotency key  9 fingerprint  10 jti  11 jti expiry (unix ms)
--   12 '1': join the waitlist when told SOLD_OUT with tickets returning, else '0'
--   13.. named seats (none = the first free ones for a seated pool)
-- Returns {code, detail, order fields (flat HGETALL)}:
--   CREATED    ''            the new order
--   REPLAY     <order id>    same key, same fingerprint: the caller reads that order
--   IDEM_CONFLICT ''         same key, other fingerprint
--   NOT_FOUND  ''            no such event
--   NOT_OPEN / PAUSED / TOKEN_REPLAY ''
--   SOLD_OUT   <left>|<returning>|<ahead>|<listed>   left: what this hold may take now (under qty);
--              returning: tickets of the short pools that may still become this fan's — in unpaid holds, or
--              set aside for fans ahead on the waitlist (0: none can); ahead: tickets the waitlist holds for
--              fans who met "sold out" before this one; listed: 1 when this fan has a turn on the waitlist
--   LIMIT      <dimension>
--   SEAT_TAKEN <seat>
--   REJECTED   <message>     the request does not fit the event; nothing written

local function split(s, sep)
  local out = {}
  if s == nil or s == false or s == '' then return out end
  local start = 1
  while true do
    local i = string.find(s, sep, start, true)
    if not i then
      out[#out + 1] = string.sub(s, start)
      return out
    end
    out[#out + 1] = string.sub(s, start, i - 1)
    start = i + 1
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local oid, sku_id, user = ARGV[1], ARGV[2], ARGV[4]
local qty = tonumber(ARGV[3]) or 0
local ident = { phone = ARGV[5], id_number = ARGV[6], device = ARGV[7] }
local idem_field = user .. '\n' .. ARGV[8]
local fp, jti = ARGV[9], ARGV[10]
local jti_exp = tonumber(ARGV[11]) or 0
local want_seats = {}
local wants_wait = ARGV[12] == '1'
for i = 13, #ARGV do want_seats[#want_seats + 1] = ARGV[i] end

-- Reads and checks.
local meta = redis.call('HMGET', KEYS[1], 'opens', 'closes', 'hold', 'paused', 'limits', 'sku:' .. sku_id)
if not meta[1] then return { 'NOT_FOUND', '' } end

local seen = redis.call('HGET', KEYS[7], idem_field)
if seen then
  local nl = string.find(seen, '\n', 1, true)
  local seen_fp, seen_order = string.sub(seen, 1, nl - 1), string.sub(seen, nl + 1)
  if seen_fp ~= fp then return { 'IDEM_CONFLICT', '' } end
  return { 'REPLAY', seen_order }
end

if now < tonumber(meta[1]) or now >= tonumber(meta[2]) then return { 'NOT_OPEN', '' } end
local WAIT_LIVE_MS, WAIT_MAX = 10000, 50
if meta[4] == '1' then
  -- A fan on the waitlist that asks while the event is paused keeps its turn (issue #39): a pause longer
  -- than WAIT_LIVE_MS would otherwise drop every turn and start the list over after it.
  local w = wants_wait and redis.call('HGET', KEYS[14], jti)
  if w then
    local turn, seen, untl, rest = string.match(w, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
    if tonumber(seen) + WAIT_LIVE_MS >= now and tonumber(untl) > now then
      redis.call('HSET', KEYS[14], jti, turn .. '|' .. now .. '|' .. untl .. '|' .. rest)
    end
  end
  return { 'PAUSED', '' }
end

local jti_until = redis.call('ZSCORE', KEYS[8], jti)
if jti_until and tonumber(jti_until) > now then return { 'TOKEN_REPLAY', '' } end

if not meta[6] then return { 'REJECTED', 'unknown sku ' .. sku_id } end
local sku = split(meta[6], '|') -- price | max_qty | pool,pool
local max_qty = tonumber(sku[2])
if qty == 0 or qty > max_qty then return { 'REJECTED', 'qty must be 1..=' .. sku[2] } end
local sku_pools = split(sku[3], ',')

-- The value a hold carries on each dimension (nil when absent).
local function dim_value(d)
  if d == 'user' then return user end
  local v = ident[d]
  if v == nil or v == '' then return nil end
  return string.sub(v, 2)
end

for _, lim in ipairs(split(meta[5], ',')) do
  local c = string.find(lim, ':', 1, true)
  local d, max = string.sub(lim, 1, c - 1), tonumber(string.sub(lim, c + 1))
  local v = dim_value(d)
  if v == nil then
    return { 'REJECTED', 'the event limits ' .. d .. ' but the hold carries none' }
  end
  local used = tonumber(redis.call('HGET', KEYS[6], d .. '\n' .. v) or '0')
  if used + qty > max then return { 'LIMIT', d } end
end

-- The waitlist (issue #39): a fan admitted and told "sold out" while unpaid holds could still give
-- tickets back, that asked to wait (ARGV[12]), stays first for them in the order fans met "sold out" (its
-- turn) while it keeps asking (seen within WAIT_LIVE_MS) and its token lasts. Tickets the live fans ahead
-- of this one wait for are not this hold's. Lapsed entries are dropped here.
local wait_raw = redis.call('HGETALL', KEYS[14])
local wait_n, mine = 0, nil
local w_turn, w_qty, w_pools = {}, {}, {}
for i = 1, #wait_raw, 2 do
  local id = wait_raw[i]
  if id ~= '#turn' then
    local turn, seen, untl, q, pools = string.match(wait_raw[i + 1], '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
    turn, seen, untl = tonumber(turn), tonumber(seen), tonumber(untl)
    if seen + WAIT_LIVE_MS < now or untl <= now then
      redis.call('HDEL', KEYS[14], id)
    else
      wait_n = wait_n + 1
      if id == jti then
        mine = turn
      else
        local k = #w_turn + 1
        w_turn[k], w_qty[k], w_pools[k] = turn, tonumber(q), pools
      end
    end
  end
end
-- Tickets of each of this SKU's pools that the live fans ahead wait for, in one pass.
local ahead_of = {}
for _, pid in ipairs(sku_pools) do ahead_of[pid] = 0 end
for k = 1, #w_turn do
  if mine == nil or w_turn[k] < mine then
    local pools = w_pools[k]
    for _, pid in ipairs(sku_pools) do
      if pools == pid or string.find(',' .. pools .. ',', ',' .. pid .. ',', 1, true) then
        ahead_of[pid] = ahead_of[pid] + w_qty[k]
      end
    end
  end
end
local function ahead_in(pid) return ahead_of[pid] end
-- A hold short of tickets: how many it may take now, how many may come back, and the waitlist's say.
local function sold_out()
  local left, returning, ahead = qty, nil, 0
  for _, pid in ipairs(sku_pools) do
    local p = redis.call('HMGET', KEYS[2], pid .. ':avail', pid .. ':held')
    local a = ahead_in(pid)
    local avail = tonumber(p[1]) or 0
    local free = math.max(0, avail - a)
    if free < left then left = free end
    if free < qty then
      -- What may still become this fan's: unpaid holds, and tickets set aside for fans ahead (who may lapse).
      local h = (tonumber(p[2]) or 0) + math.min(avail, a)
      if returning == nil or h < returning then returning = h end
    end
    if a > ahead then ahead = a end
  end
  returning = returning or 0
  -- A fan on the list keeps its turn while tickets may come back (also when some are left, fewer than it
  -- asked for); one not on it joins when none are left for it.
  local listed = 0
  if wants_wait and returning > 0 and (mine ~= nil or (left == 0 and wait_n < WAIT_MAX)) then
    local turn = mine or redis.call('HINCRBY', KEYS[14], '#turn', 1)
    redis.call('HSET', KEYS[14], jti, table.concat({ turn, now, jti_exp, qty, sku[3] }, '|'))
    listed = 1
  elseif mine ~= nil then
    redis.call('HDEL', KEYS[14], jti)
  end
  return { 'SOLD_OUT', left .. '|' .. returning .. '|' .. ahead .. '|' .. listed }
end

local picks = {}        -- seat members <pool>/<seat> to take
local seated = nil
for _, pid in ipairs(sku_pools) do
  local p = redis.call('HMGET', KEYS[2], pid .. ':avail', pid .. ':slot')
  if not p[1] then return { 'REJECTED', 'sku ' .. sku_id .. ' names a missing pool ' .. pid } end
  if tonumber(p[1]) - ahead_in(pid) < qty then return sold_out() end
  if p[2] then
    seated = pid
    picks = {}
    if #want_seats == 0 then
      local base = tonumber(p[2]) * 1000000
      picks = redis.call('ZRANGEBYSCORE', KEYS[3], base, base + 999999, 'LIMIT', 0, qty)
      if #picks < qty then return sold_out() end
    else
      if #want_seats ~= qty then return { 'REJECTED', 'seats must name exactly qty seats' } end
      local chosen = {}
      for _, name in ipairs(want_seats) do
        local m = pid .. '/' .. name
        if redis.call('HEXISTS', KEYS[4], m) == 0 then return { 'REJECTED', 'unknown seat ' .. name } end
        if chosen[m] or not redis.call('ZSCORE', KEYS[3], m) then return { 'SEAT_TAKEN', name } end
        chosen[m] = true
        picks[#picks + 1] = m
      end
    end
  end
end
if seated == nil and #want_seats > 0 then return { 'REJECTED', 'this sku has no named seats' } end

-- Writes.
for _, pid in ipairs(sku_pools) do
  redis.call('HINCRBY', KEYS[2], pid .. ':avail', -qty)
  redis.call('HINCRBY', KEYS[2], pid .. ':held', qty)
end
-- Holds ever made and their tickets (the edge's release ends a fan's promise on it).
redis.call('HINCRBY', KEYS[2], '#holds', 1)
redis.call('HINCRBY', KEYS[2], '#units', qty)
local seat_names = {}
for i, m in ipairs(picks) do
  redis.call('ZREM', KEYS[3], m)
  redis.call('HSET', KEYS[5], m, oid)
  seat_names[i] = string.sub(m, #seated + 2)
end
local amount = tonumber(sku[1]) * qty
local expires = now + tonumber(meta[3])
local fields = {
  'id', oid, 'sku', sku_id, 'qty', tostring(qty), 'seats', table.concat(seat_names, ','), 'user', user,
  'state', 'CREATED', 'ver', '1', 'amt', string.format('%.0f', amount), 'exp', tostring(expires),
  'created', tostring(now), 'redeemed', '', 'pools', sku[3],
}
redis.call('HINCRBY', KEYS[6], 'user\n' .. user, qty)
for _, d in ipairs({ 'phone', 'id_number', 'device' }) do
  local v = dim_value(d)
  if v ~= nil then
    fields[#fields + 1] = d
    fields[#fields + 1] = v
    redis.call('HINCRBY', KEYS[6], d .. '\n' .. v, qty)
  end
end
redis.call('HSET', KEYS[13], unpack(fields))
redis.call('ZADD', KEYS[9], expires, oid)
redis.call('HSET', KEYS[7], idem_field, fp .. '\n' .. oid)
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now)
redis.call('ZADD', KEYS[8], jti_exp, jti)
if mine ~= nil then redis.call('HDEL', KEYS[14], jti) end
redis.call('SADD', KEYS[12], oid)
redis.call('XADD', KEYS[11], '*', 'o', oid, 's', 'CREATED', 'v', '1', 'at', tostring(now), 'k', 'created',
  'amt', string.format('%.0f', amount))
return { 'CREATED', '', fields }
