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

-- Writes: give back sold tickets, seats and limit usage (`give_back`: lua/lib/give_back.lua, which the
-- core puts after this file's first line).
give_back('sold', oid, qty, o[5], o[6], o[8], o[9], o[10], o[11])
redis.call('SREM', KEYS[12], oid)
redis.call('HSET', KEYS[13], 'state', 'REFUNDED', 'ver', tostring(ver + 1))
local entry = { 'o', oid, 's', 'REFUNDED', 'v', tostring(ver + 1), 'at', tostring(now), 'k', 'refunded' }
if o[12] then entry[#entry + 1] = 'txn'; entry[#entry + 1] = o[12] end
entry[#entry + 1] = 'amt'; entry[#entry + 1] = o[13]
redis.call('XADD', KEYS[11], '*', unpack(entry))
return { 'DONE', '', redis.call('HGETALL', KEYS[13]) }
