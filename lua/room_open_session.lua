#!lua
-- room_open_session: starts one admitted session unless it runs, and records its place as picked
-- up (the release leader counts, with its sweep, the places of each recent step whose fans were
-- admitted: edge/src/room/claims.rs). One call, as the plain ZADD it replaces.
--
-- KEYS: 1 sessions ZSET identity -> session end (ms)   2 picked ZSET identity -> place
-- ARGV: 1 session end (ms)   2 identity hash (hex)   3 the session's place
-- Returns 1 when the session was opened now, 0 when it was already running.
if redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[2]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
  return 1
end
return 0
