#!lua
-- room_join: the queue place of one identity, or the next one (DESIGN §3). Reads first, then writes.
-- Freezes the pre-queue (random method) first when the sale is open, so arrivals after the open
-- are FIFO after the shuffled pre-queue.
--
-- KEYS (one room's slot, `wk:{room:<id>}:...`):
--   1 issued    STRING last position handed out
--   2 who       HASH   identity hash -> position, or "d<position>" once that session ended
--   3 prequeue  STRING size of the pre-queue, set once at open
--   4 shuffle   STRING key of the pre-queue shuffle, set once at open
-- ARGV:
--   1 identity hash (hex)   2 "1" when the sale is open   3 a random shuffle key (used if none yet)
--   4 most identities remembered (beyond it a new place is given but not remembered)
-- Returns {position, 1 when new / 0 when the identity already held it}
local open = ARGV[2] == '1'
local need_freeze = open and redis.call('EXISTS', KEYS[3]) == 0
local issued = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local cur = redis.call('HGET', KEYS[2], ARGV[1])
local tracked = redis.call('HLEN', KEYS[2])
local limit = tonumber(ARGV[4]) or 0

if need_freeze then
  redis.call('SET', KEYS[3], issued)
  redis.call('SET', KEYS[4], ARGV[3], 'NX')
end
if cur and string.sub(cur, 1, 1) ~= 'd' then
  return {tonumber(cur), 0}
end
local p = redis.call('INCR', KEYS[1])
if cur or tracked < limit then
  redis.call('HSET', KEYS[2], ARGV[1], p)
end
return {p, 1}
