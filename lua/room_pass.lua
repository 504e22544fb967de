#!lua
-- room_pass: a passthrough room (`queue = "when-needed"`) lets the holder of `position` in at
-- once, but only when everyone ahead is already served: `serving` moves from position - 1 to
-- position, or nothing changes (somebody waits: the queue is on, and FIFO holds). Any edge may
-- call it (no lease): it never releases anyone but the caller's own place.
--
-- KEYS: 1 serving STRING   (`wk:{room:<id>}:serving`)
-- ARGV: 1 position (>= 1)
-- Returns 1 when the place is now served, 0 otherwise.
local serving = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local position = tonumber(ARGV[1]) or 0
if position >= 1 and serving == position - 1 then
  redis.call('SET', KEYS[1], position)
  return 1
end
if position >= 1 and serving >= position then
  return 1
end
return 0
