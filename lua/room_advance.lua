#!lua
-- room_advance: the leader moves `serving` forward by up to n, never past `issued`.
--
-- KEYS: 1 leader STRING   2 issued STRING   3 serving STRING   (`wk:{room:<id>}:...`)
-- ARGV: 1 node id   2 n (>= 0)
-- Returns the new serving, or -1 when this node does not hold the lease (nothing written).
local leader = redis.call('GET', KEYS[1])
local issued = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local serving = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local n = tonumber(ARGV[2]) or 0
if leader ~= ARGV[1] then
  return -1
end
local target = serving + n
if target > issued then target = math.max(issued, serving) end
if target ~= serving then
  redis.call('SET', KEYS[3], target)
end
return target
