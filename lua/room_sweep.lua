#!lua
-- room_sweep: ends sessions whose time is up (at most `limit` per call), spends their places, and
-- returns the active count (sessions seen within the idle window) and the exits since the last
-- sweep (revocations included). Idle sessions leave the seen set; a touch brings them back. For
-- the release leader it also counts the places picked up (sessions opened, room_open_session.lua)
-- in each of the ranges asked, and forgets those at or below the bound asked.
--
-- KEYS: 1 sessions ZSET identity -> session end (ms)   2 who HASH   3 ended STRING
--       4 seen ZSET identity -> last seen (ms)   5 picked ZSET identity -> place
-- ARGV: 1 now (ms)   2 limit   3 idle window (ms)   4 forget places up to this one (-1: none)
--       5.. ranges of places: from, to (from < place <= to)
-- Returns {active sessions, ended since the last sweep, then the places picked up in each range}
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
local out = {redis.call('ZCARD', KEYS[4]), ended + #due}
if tonumber(ARGV[4]) >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', ARGV[4])
end
for i = 5, #ARGV - 1, 2 do
  out[#out + 1] = redis.call('ZCOUNT', KEYS[5], '(' .. ARGV[i], ARGV[i + 1])
end
return out
