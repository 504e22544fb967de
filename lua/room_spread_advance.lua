#!lua
-- room_spread_advance: the leader of a spread room writes the step it computed from every edge's
-- blocks (edge/src/room/spread.rs): the new `serving`, the real places it passed, the queue's
-- length, and how many places each second of joins ahead of `serving` holds (the other edges
-- tell a fan how many people are ahead from it). Only the lease holder writes (a leader that lost
-- its lease mid-step writes nothing).
--
-- KEYS (the room's slot): 1 leader STRING   2 serving STRING   3 passed STRING real places serving
--   passed   4 waiting STRING places handed out and not passed   5 hist STRING (ARGV 5)
-- ARGV: 1 node id   2 new serving   3 places passed in this step   4 places handed out, all edges
--   5 what every edge counts the people ahead from: "second:places,...;start:end:used,..." (the
--   places of each second of joins ahead of serving; the blocks at the front)
-- Serving never moves back. Positions run past 2^47: `serving` is kept as the string sent (a Lua
-- number would print it rounded); compared as numbers, exact below 2^53. Returns {serving,
-- waiting}, or -1 when this node does not hold the lease (nothing written).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
local add = tonumber(ARGV[3]) or 0
local passed = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if add > 0 then
  passed = redis.call('INCRBY', KEYS[3], add)
end
local waiting = (tonumber(ARGV[4]) or 0) - passed
if waiting < 0 then waiting = 0 end
local serving = redis.call('GET', KEYS[2]) or '0'
if (tonumber(ARGV[2]) or 0) > (tonumber(serving) or 0) then
  serving = ARGV[2]
  redis.call('SET', KEYS[2], serving)
end
redis.call('SET', KEYS[4], waiting)
redis.call('SET', KEYS[5], ARGV[5])
return {serving, waiting}
