#!lua
-- room_end_session: ends one admitted session (origin's Wicket-Revoke: 1). Its slot frees and its
-- place is spent: the identity's next join queues at the back.
--
-- KEYS: 1 sessions ZSET identity -> session end (ms)   2 who HASH   3 ended STRING exits not yet counted
--       4 seen ZSET identity -> last seen (ms)
-- ARGV: 1 identity hash (hex)
-- Returns 1 when a session ended, 0 when there was none.
local had = redis.call('ZSCORE', KEYS[1], ARGV[1])
local pos = redis.call('HGET', KEYS[2], ARGV[1])
if not had then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if pos and string.sub(pos, 1, 1) ~= 'd' then
  redis.call('HSET', KEYS[2], ARGV[1], 'd' .. pos)
end
redis.call('INCR', KEYS[3])
return 1
