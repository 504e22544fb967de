#!lua flags=no-writes
-- stock: one consistent read of an event's counters (GET /v1/events/{event}/stock). O(pools + SKUs).
-- A SKU is sold out when any of its pools has none available (the core derives it from these counters).
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 1 ev, 2 pools.
-- ARGV: none
-- Returns {} when the event does not exist, else {pool ids csv, {HGETALL pools}, {sku id, "price|max|pools", ...}}.

local meta = redis.call('HMGET', KEYS[1], 'pools', 'skus')
if not meta[1] then return {} end
local skus = {}
for sid in string.gmatch(meta[2] or '', '[^,]+') do
  skus[#skus + 1] = sid
  skus[#skus + 1] = redis.call('HGET', KEYS[1], 'sku:' .. sid) or ''
end
return { meta[1], redis.call('HGETALL', KEYS[2]), skus }
