#!lua
-- pay: CREATED -> PAID for a payment callback or a positive payment query, idempotent by txn id.
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 2 pools, 9 deadlines, 10 txns,
--   11 outbox, 13 order.
-- ARGV: 1 txn id  2 amount in cents
-- Returns {code, detail, order fields (flat HGETALL, after the change)}:
--   PAID             ''        CREATED -> PAID
--   ALREADY_PAID     ''        this txn already paid this order (a repeated callback)
--   REFUND_REQUIRED  ''        money for an order that cannot take it (closed, or paid by another txn);
--                              recorded once per (order, txn) in txns and the outbox, order untouched
--   AMOUNT_MISMATCH  <expected cents>
--   NOT_FOUND        ''

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local txn, amount = ARGV[1], ARGV[2]

-- Reads and checks.
local o = redis.call('HMGET', KEYS[13], 'id', 'state', 'ver', 'amt', 'qty', 'pools', 'exp')
if not o[1] then return { 'NOT_FOUND', '' } end
local oid, state, ver, amt, qty = o[1], o[2], tonumber(o[3]), o[4], tonumber(o[5])
local txn_field = oid .. '\n' .. txn
local seen = redis.call('HGET', KEYS[10], txn_field)
if seen == 'paid' then return { 'ALREADY_PAID', '', redis.call('HGETALL', KEYS[13]) } end
if seen then return { 'REFUND_REQUIRED', '', redis.call('HGETALL', KEYS[13]) } end
if amount ~= amt then return { 'AMOUNT_MISMATCH', amt } end

-- Writes.
if state ~= 'CREATED' then
  redis.call('HSET', KEYS[10], txn_field, 'refund_required')
  redis.call('XADD', KEYS[11], '*', 'o', oid, 's', state, 'v', tostring(ver), 'at', tostring(now),
    'k', 'refund_required', 'txn', txn, 'amt', amount)
  return { 'REFUND_REQUIRED', '', redis.call('HGETALL', KEYS[13]) }
end
for pid in string.gmatch(o[6], '[^,]+') do
  local held = tonumber(redis.call('HGET', KEYS[2], pid .. ':held') or '0')
  if held > 0 then redis.call('HINCRBY', KEYS[2], pid .. ':held', -math.min(qty, held)) end
  redis.call('HINCRBY', KEYS[2], pid .. ':sold', qty)
end
redis.call('ZREM', KEYS[9], oid)
redis.call('HSET', KEYS[13], 'state', 'PAID', 'ver', tostring(ver + 1), 'txn', txn)
redis.call('HSET', KEYS[10], txn_field, 'paid')
redis.call('XADD', KEYS[11], '*', 'o', oid, 's', 'PAID', 'v', tostring(ver + 1), 'at', tostring(now),
  'k', 'paid', 'txn', txn, 'amt', amount)
return { 'PAID', '', redis.call('HGETALL', KEYS[13]) }
