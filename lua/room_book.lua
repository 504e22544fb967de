#!lua
-- room_book: keeps the release leader's book (the places its recent steps promised tickets to,
-- edge/src/room/claims.rs) where the next leader finds it. Only the node holding the lease
-- writes: a leader that lost its lease without knowing it yet cannot overwrite its successor's.
--
-- KEYS: 1 leader STRING node id   (`wk:{room:<id>}:leader`)
--       2 book STRING, JSON        (`wk:{room:<id>}:book`)
-- ARGV: 1 node id   2 the book (empty: nothing promised, the key is dropped)   3 time to keep it, ms
-- Returns 1 when kept, 0 when this node does not hold the lease.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[2])
else
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
