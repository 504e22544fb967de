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

-- Writes: give back held tickets, seats and limit usage (`give_back`: lua/lib/give_back.lua, which the
-- core puts after this file's first line).
give_back('held', oid, qty, o[5], o[6], o[8], o[9], o[10], o[11])
redis.call('ZREM', KEYS[9], oid)
redis.call('SREM', KEYS[12], oid)
redis.call('HSET', KEYS[13], 'state', 'CLOSED', 'ver', tostring(ver + 1))
redis.call('XADD', KEYS[11], '*', 'o', oid, 's', 'CLOSED', 'v', tostring(ver + 1), 'at', tostring(now),
  'k', reason)
return { 'DONE', '', redis.call('HGETALL', KEYS[13]) }
