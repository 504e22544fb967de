#!lua
-- redeem: marks one pool of a PAID order used at the gate (or every pool left); all pools redeemed -> USED.
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 11 outbox, 13 order.
-- ARGV: 1 pool id, or "" for every pool not yet redeemed
-- Returns {code, detail, order fields (flat HGETALL, after the change)}:
--   DONE         ''   redeemed (state USED when nothing is left)
--   INVALID      ''   not PAID, or that pool was already redeemed
--   UNKNOWN_POOL ''   the pool is not in the order
--   NOT_FOUND    ''

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pool = ARGV[1]

-- Reads and checks.
local o = redis.call('HMGET', KEYS[13], 'id', 'state', 'ver', 'pools', 'redeemed')
if not o[1] then return { 'NOT_FOUND', '' } end
local oid, state, ver = o[1], o[2], tonumber(o[3])
local pools, done, done_set = {}, {}, {}
for p in string.gmatch(o[4], '[^,]+') do pools[#pools + 1] = p end
for p in string.gmatch(o[5] or '', '[^,]+') do done[#done + 1] = p; done_set[p] = true end
if pool ~= '' then
  local known = false
  for _, p in ipairs(pools) do if p == pool then known = true end end
  if not known then return { 'UNKNOWN_POOL', '' } end
end
if state ~= 'PAID' then return { 'INVALID', '', redis.call('HGETALL', KEYS[13]) } end
local todo = {}
if pool ~= '' then
  if done_set[pool] then return { 'INVALID', '', redis.call('HGETALL', KEYS[13]) } end
  todo[1] = pool
else
  for _, p in ipairs(pools) do if not done_set[p] then todo[#todo + 1] = p end end
end

-- Writes.
for _, p in ipairs(todo) do done[#done + 1] = p; done_set[p] = true end
local all = true
for _, p in ipairs(pools) do if not done_set[p] then all = false end end
local new_state = all and 'USED' or 'PAID'
redis.call('HSET', KEYS[13], 'state', new_state, 'ver', tostring(ver + 1), 'redeemed', table.concat(done, ','))
local entry = { 'o', oid, 's', new_state, 'v', tostring(ver + 1), 'at', tostring(now), 'k', all and 'used' or 'redeemed' }
if #todo == 1 then entry[#entry + 1] = 'pool'; entry[#entry + 1] = todo[1] end
redis.call('XADD', KEYS[11], '*', unpack(entry))
return { 'DONE', '', redis.call('HGETALL', KEYS[13]) }
