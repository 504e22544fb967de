#!lua
-- room_spread_advance: the leader of a spread room writes the step it computed from every edge's
-- blocks (edge/src/room/spread.rs): the new `serving`, the real places it passed, and the queue's
-- length. Only the lease holder writes (a leader that lost its lease mid-step writes nothing).
--
-- KEYS (the room's slot): 1 leader STRING   2 serving STRING   3 passed STRING real places serving
--   passed   4 waiting STRING places handed out and not passed
-- ARGV: 1 node id   2 new serving   3 places passed in this step   4 places handed out, all edges
-- Serving never moves back. Returns {serving, waiting}, or -1 when this node does not hold the lease (nothing written).
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
local serving = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local new = tonumber(ARGV[2]) or 0
if new > serving then
  serving = new
  redis.call('SET', KEYS[2], serving)
end
redis.call('SET', KEYS[4], waiting)
return {serving, waiting}
