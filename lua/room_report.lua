#!lua
-- room_report: adds one edge's counts of one minute to the room's report and sets the release
-- leader's figures in it, in one step; the minute joins the room's list of minutes. Both keys
-- live ARGV[2] seconds after their last write.
--
-- KEYS: 1 the minute's HASH field -> value   2 minutes ZSET minute -> minute
-- ARGV: 1 minute   2 keep (s); 0: this edge wrote the minute already (its list entry and expiry
--       are set: not again, every edge flushes once a second)   3 n: how many (field, count) pairs
--       to add; then those pairs, then the (field, value) pairs to set (one HSET)
local n = tonumber(ARGV[3]) or 0
local i = 4
for _ = 1, n do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  i = i + 2
end
if i + 1 <= #ARGV then
  redis.call('HSET', KEYS[1], unpack(ARGV, i))
end
if ARGV[2] ~= '0' then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return 1
