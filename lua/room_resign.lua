#!lua
-- room_resign: gives the leader lease up if this node holds it (graceful stop).
--
-- KEYS: 1 leader STRING   (`wk:{room:<id>}:leader`)
-- ARGV: 1 node id
-- Returns 1 when the lease was released, 0 when this node did not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
