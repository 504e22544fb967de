#!lua
-- room_proof: where one identity's owed place stands (RoomState::proof_state). A place whose turn
-- came longer ago than the grace is lost here (its place spent: the next join queues anew).
--
-- KEYS: 1 who HASH   2 owed ZSET   3 passed ZSET   (`wk:{room:<id>}:...`)
-- ARGV: 1 identity hash (hex)   2 position   3 now (ms)   4 grace (ms)
-- Returns {0} proven, {1} owed (turn not come), {2, ms since its turn} within the grace, {3} lost.
local p = tonumber(ARGV[2])
local owed = redis.call('ZSCORE', KEYS[2], ARGV[1])
if owed and tonumber(owed) == p then
  return {1}
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local since = redis.call('ZSCORE', KEYS[3], ARGV[1])
if since and cur == tostring(p) then
  local ago = tonumber(ARGV[3]) - tonumber(since)
  if ago <= tonumber(ARGV[4]) then
    return {2, math.max(ago, 0)}
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HSET', KEYS[1], ARGV[1], 'd' .. p)
  return {3}
end
if cur == tostring(p) then
  return {0}
end
return {3}
