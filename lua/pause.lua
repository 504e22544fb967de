#!lua
-- pause: stops (ARGV[1] = "1") or restarts ("0") holds of an event.
--
-- KEYS: the standard list of lua/README.md; used here: 1 ev.
-- ARGV: 1 "1" to pause, "0" to resume
-- Returns 1 when done, 0 when the event does not exist.

if redis.call('HEXISTS', KEYS[1], 'opens') == 0 then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
return 1
