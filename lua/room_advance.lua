#!lua
-- room_advance: the leader moves `serving` forward by up to n places whose bot check is given (or
-- not asked), never past `issued`. Owed places it passes do not count (a release slot is never spent
-- on a place that cannot be admitted): they move from `owed` to `passed` (scored by now), where a
-- proof within the grace still finds them (room_join). Late proofs since the last advance (`late`)
-- are taken off n first.
--
-- The invite lane's part (`[rooms.invite] share`): up to `lane` of the n go to lane places first
-- (`lane_serving` moves, in lane order, never past `lane_issued`); the rest move `serving`, where
-- lane places already admitted through the lane cost nothing (they are passed, not counted). A
-- lane place that `serving` reaches is admitted in order: `lane_serving` follows it. `lane_passed`
-- counts the lane places whose place `serving` passed; their entries in `lane` are dropped.
-- Without lane places (`lane_issued` 0) this is three GETs more than before.
--
-- KEYS: 1 leader STRING   2 issued STRING   3 serving STRING   4 owed ZSET   5 passed ZSET
--       6 late STRING   7 lane_issued STRING   8 lane_serving STRING   9 lane HASH (lane place ->
--       place)   10 lane_passed STRING   (`wk:{room:<id>}:...`)
-- ARGV: 1 node id   2 n (>= 0)   3 now (ms)   4 most owed places passed in one call
--       5 most of n that go to the lane first (>= 0)
-- Returns {serving, lane_serving, places released: the lane places admitted, the places serving
-- passed less the lane places among them admitted before and the owed places (held back, not yet
-- anyone's turn), and the late proofs taken off n (those places are let in now); of them, the
-- places serving passed}, or -1 when this node does not hold the lease (nothing written).
local leader = redis.call('GET', KEYS[1])
local issued = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local serving = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
local n = tonumber(ARGV[2]) or 0
if leader ~= ARGV[1] then
  return -1
end
local late = tonumber(redis.call('GET', KEYS[6]) or '0') or 0
local used = 0
if late > 0 then
  used = math.min(late, n)
  n = n - used
  redis.call('DECRBY', KEYS[6], used)
end
local lane_issued = tonumber(redis.call('GET', KEYS[7]) or '0') or 0
local lane_serving = tonumber(redis.call('GET', KEYS[8]) or '0') or 0
local lane_stored = lane_serving
local lane_passed = tonumber(redis.call('GET', KEYS[10]) or '0') or 0
local lane_start = lane_passed

-- Passes the lane places whose place is at or before limit; how many of them were admitted
-- through the lane already.
local function pass_to(limit)
  local admitted = 0
  while lane_passed < lane_issued do
    local at = tonumber(redis.call('HGET', KEYS[9], lane_passed + 1) or '0') or 0
    if at > limit then break end
    redis.call('HDEL', KEYS[9], lane_passed + 1)
    lane_passed = lane_passed + 1
    if lane_passed <= lane_serving then admitted = admitted + 1 end
  end
  return admitted
end

-- Lane places passed since the last step (a passthrough) are admitted.
pass_to(serving)
if lane_passed > lane_serving then lane_serving = lane_passed end
-- The lane's part first, in lane order.
local k = math.min(tonumber(ARGV[5]) or 0, n, lane_issued - lane_serving)
if k < 0 then k = 0 end
lane_serving = lane_serving + k
n = n - k

local cap = tonumber(ARGV[4]) or 100000
local last = math.max(issued, serving)
local target = serving + n
if target > last then target = last end
local from = serving
local lane_skipped = 0
local owed_skipped = 0
while target > from do
  local extra = 0
  while owed_skipped < cap do
    local hit = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. from, target, 'WITHSCORES', 'LIMIT', 0, 1000)
    if #hit == 0 then break end
    for i = 1, #hit, 2 do
      redis.call('ZREM', KEYS[4], hit[i])
      redis.call('ZADD', KEYS[5], ARGV[3], hit[i])
      owed_skipped = owed_skipped + 1
      extra = extra + 1
    end
  end
  local admitted = pass_to(target)
  lane_skipped = lane_skipped + admitted
  extra = extra + admitted
  from = target
  if extra == 0 then break end
  target = target + extra
  if target > last then target = last end
end
if lane_passed > lane_serving then lane_serving = lane_passed end
if target ~= serving then
  redis.call('SET', KEYS[3], target)
end
if lane_serving ~= lane_stored then
  redis.call('SET', KEYS[8], lane_serving)
end
if lane_passed ~= lane_start then
  redis.call('SET', KEYS[10], lane_passed)
end
local released = target - serving - lane_skipped - owed_skipped
if released < 0 then released = 0 end
return {target, lane_serving, used + k + released, released}
