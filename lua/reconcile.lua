#!lua flags=no-writes
-- reconcile: the pool counters and, summed over the live orders (CREATED, PAID, USED), the tickets they
-- hold and have bought, read in one atomic step so a busy sale cannot produce a false alarm.
-- O(live orders), which is at most the tickets of the event: an operator call, never on the buyer's path.
-- The order keys come from the live set: they share the event's hash tag, so they are in this slot.
--
-- KEYS: the standard list of lua/README.md; used here: 1 ev, 2 pools, 12 live.
-- ARGV: 1 the order key prefix, `wk:{ev:<event>}:o:`
-- Returns {} when the event does not exist, else
--   {pool ids csv, {HGETALL pools}, {sku id, "price|max|pools", ...}, {pool, held by orders, sold by orders, ...}}.

local meta = redis.call('HMGET', KEYS[1], 'pools', 'skus')
if not meta[1] then return {} end
local skus = {}
for sid in string.gmatch(meta[2] or '', '[^,]+') do
  skus[#skus + 1] = sid
  skus[#skus + 1] = redis.call('HGET', KEYS[1], 'sku:' .. sid) or ''
end
local held, sold, names = {}, {}, {}
for _, oid in ipairs(redis.call('SMEMBERS', KEYS[12])) do
  local o = redis.call('HMGET', ARGV[1] .. oid, 'state', 'qty', 'pools')
  if o[1] then
    local target = nil
    if o[1] == 'CREATED' then target = held elseif o[1] == 'PAID' or o[1] == 'USED' then target = sold end
    if target then
      for pid in string.gmatch(o[3], '[^,]+') do
        if held[pid] == nil then held[pid] = 0; sold[pid] = 0; names[#names + 1] = pid end
        target[pid] = target[pid] + tonumber(o[2])
      end
    end
  end
end
local sums = {}
for _, pid in ipairs(names) do
  sums[#sums + 1] = pid
  sums[#sums + 1] = tostring(held[pid])
  sums[#sums + 1] = tostring(sold[pid])
end
return { meta[1], redis.call('HGETALL', KEYS[2]), skus, sums }
