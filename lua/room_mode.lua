#!lua
-- room_mode: a room's operator mode moves by compare-and-set (edge/src/room/mode.rs): the new
-- state is written only over the state the edge based its transition on, so two operators acting
-- through two edges at once never undo each other by publishing a state they had not seen.
--
-- KEYS: 1 overrides HASH   (`wk:{rooms}:overrides`: room id -> the machine's state, JSON)
-- ARGV: 1 room id, 2 the value the transition was made from ('' when none), 3 the new value
-- Returns 1 when written, 0 when the value had changed (the edge reads it again and retries).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur == false then cur = '' end
if cur ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
