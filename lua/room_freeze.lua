#!lua
-- room_freeze: fixes the pre-queue at the open (random method): its size and the shuffle key, once.
--
-- KEYS: 1 issued STRING   2 prequeue STRING   3 shuffle STRING   (`wk:{room:<id>}:...`)
-- ARGV: 1 a random shuffle key (used only when none is set yet)
-- Returns 1 when this call froze it, 0 when it was frozen already.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local issued = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
redis.call('SET', KEYS[2], issued)
redis.call('SET', KEYS[3], ARGV[1], 'NX')
return 1
