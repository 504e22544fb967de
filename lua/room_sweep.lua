#!lua
-- room_sweep: ends sessions whose time is up (at most `limit` per call), spends their places, and
-- returns the active count and the exits since the last sweep (revocations included).
--
-- KEYS: 1 sessions ZSET identity -> session end (ms)   2 who HASH   3 ended STRING
-- ARGV: 1 now (ms)   2 limit
-- Returns {active sessions, ended since the last sweep}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]) or 1000)
local pos = {}
for i, who in ipairs(due) do
  pos[i] = redis.call('HGET', KEYS[2], who)
end
local ended = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
for i, who in ipairs(due) do
  redis.call('ZREM', KEYS[1], who)
  if pos[i] and string.sub(pos[i], 1, 1) ~= 'd' then
    redis.call('HSET', KEYS[2], who, 'd' .. pos[i])
  end
end
if ended > 0 then
  redis.call('DECRBY', KEYS[3], ended)
end
return {redis.call('ZCARD', KEYS[1]), ended + #due}
