#!lua
-- room_lapse: spends owed places whose turn came more than the grace ago (at most `limit` a call):
-- their identities' next join queues at the back (RoomState::lapse, once a release tick).
--
-- KEYS: 1 who HASH   2 passed ZSET identity -> when its turn came (ms)   (`wk:{room:<id>}:...`)
-- ARGV: 1 oldest turn kept (ms: now - grace)   2 limit
-- Returns how many places were spent.
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]) or 1000)
for _, who in ipairs(due) do
  redis.call('ZREM', KEYS[2], who)
  local cur = redis.call('HGET', KEYS[1], who)
  if cur and string.sub(cur, 1, 1) ~= 'd' then
    redis.call('HSET', KEYS[1], who, 'd' .. cur)
  end
end
return #due
