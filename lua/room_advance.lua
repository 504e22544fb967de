#!lua
-- room_advance: the leader moves `serving` forward by up to n places whose bot check is given (or
-- not asked), never past `issued`. Owed places it passes do not count (a release slot is never spent
-- on a place that cannot be admitted): they move from `owed` to `passed` (scored by now), where a
-- proof within the grace still finds them (room_join). Late proofs since the last advance (`late`)
-- are taken off n first.
--
-- KEYS: 1 leader STRING   2 issued STRING   3 serving STRING   4 owed ZSET   5 passed ZSET
--       6 late STRING   (`wk:{room:<id>}:...`)
-- ARGV: 1 node id   2 n (>= 0)   3 now (ms)   4 most owed places passed in one call
-- Returns the new serving, or -1 when this node does not hold the lease (nothing written).
local leader = redis.call('GET', KEYS[1])
local issued = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local serving = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local n = tonumber(ARGV[2]) or 0
if leader ~= ARGV[1] then
  return -1
end
local late = tonumber(redis.call('GET', KEYS[6]) or '0') or 0
if late > 0 then
  local used = math.min(late, n)
  n = n - used
  redis.call('DECRBY', KEYS[6], used)
end
local cap = tonumber(ARGV[4]) or 100000
local last = math.max(issued, serving)
local target = serving + n
if target > last then target = last end
local skipped = 0
while target > serving and skipped < cap do
  local hit = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. serving, target, 'WITHSCORES', 'LIMIT', 0, 1000)
  if #hit == 0 then break end
  for i = 1, #hit, 2 do
    redis.call('ZREM', KEYS[4], hit[i])
    redis.call('ZADD', KEYS[5], ARGV[3], hit[i])
    skipped = skipped + 1
    target = target + 1
  end
  if target > last then target = last end
end
if target ~= serving then
  redis.call('SET', KEYS[3], target)
end
return target
