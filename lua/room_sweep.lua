#!lua
-- room_sweep: ends sessions whose time is up (at most `limit` per call), spends their places, and
-- returns the active count (sessions seen within the idle window) and the exits since the last
-- sweep (revocations included). Idle sessions leave the seen set; a touch brings them back.
--
-- KEYS: 1 sessions ZSET identity -> session end (ms)   2 who HASH   3 ended STRING
--       4 seen ZSET identity -> last seen (ms)
-- ARGV: 1 now (ms)   2 limit   3 idle window (ms)
-- Returns {active sessions, ended since the last sweep}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]) or 1000)
local pos = {}
for i, who in ipairs(due) do
  pos[i] = redis.call('HGET', KEYS[2], who)
end
local ended = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
for i, who in ipairs(due) do
  redis.call('ZREM', KEYS[1], who)
  redis.call('ZREM', KEYS[4], who)
  if pos[i] and string.sub(pos[i], 1, 1) ~= 'd' then
    redis.call('HSET', KEYS[2], who, 'd' .. pos[i])
  end
end
if ended > 0 then
  redis.call('DECRBY', KEYS[3], ended)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. (tonumber(ARGV[1]) - tonumber(ARGV[3])))
return {redis.call('ZCARD', KEYS[4]), ended + #due}
