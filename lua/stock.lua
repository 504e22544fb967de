#!lua flags=no-writes
-- stock: one consistent read of an event's counters (GET /v1/events/{event}/stock). O(pools + SKUs).
-- A SKU is sold out when any of its pools has none available (the core derives it from these counters).
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order, 14 wait); used here: 1 ev, 2 pools, 14 wait.
-- ARGV: none
-- Returns {} when the event does not exist, else {pool ids csv, {HGETALL pools}, {sku id, "price|max|pools", ...},
-- tickets the waitlist's live fans wait for (lua/hold.lua)}.

local meta = redis.call('HMGET', KEYS[1], 'pools', 'skus')
if not meta[1] then return {} end
local skus = {}
for sid in string.gmatch(meta[2] or '', '[^,]+') do
  skus[#skus + 1] = sid
  skus[#skus + 1] = redis.call('HGET', KEYS[1], 'sku:' .. sid) or ''
end
-- The waitlist's live entries (lua/hold.lua: first|seen|until|qty|pools; lapsed ones are dropped by holds).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiting = 0
local wait_raw = redis.call('HGETALL', KEYS[14])
for i = 2, #wait_raw, 2 do
  local seen, untl, q = string.match(wait_raw[i], '^[^|]*|([^|]*)|([^|]*)|([^|]*)|')
  if seen and tonumber(seen) + 10000 >= now and tonumber(untl) > now then waiting = waiting + tonumber(q) end
end
return { meta[1], redis.call('HGETALL', KEYS[2]), skus, waiting }
