#!lua
-- room_join: the queue place of one identity, or the next one (DESIGN §3). Reads first, then writes.
-- Freezes the pre-queue (random method) first when the sale is open, so arrivals after the open
-- are FIFO after the shuffled pre-queue.
--
-- The room's bot check gates admission, not the place: a joiner that has not given it gets a place
-- at once, marked owed (in `owed`, scored by position); a join with the check given marks the held
-- place proven. An owed place whose turn came (room_advance moved it to `passed`, scored by when)
-- is still proven within the grace (and `late` counts it, so the next advance lets in one fewer);
-- past the grace it is lost and a new place is given.
--
-- The invite lane's share of the release (`[rooms.invite] share`): an invitee's new place given
-- with the check given also gets a lane place (`lane_issued`, in join order), recorded in `lane`
-- (lane place -> place, for room_advance) and `lanewho` (identity -> "place:lane place", for a
-- rejoin). A place with the check owed gets none.
--
-- KEYS (one room's slot, `wk:{room:<id>}:...`):
--   1 issued    STRING last position handed out
--   2 who       HASH   identity hash -> position, or "d<position>" once that session ended
--   3 prequeue  STRING size of the pre-queue, set once at open
--   4 shuffle   STRING key of the pre-queue shuffle, set once at open
--   5 owed      ZSET   identity -> position, places whose check is owed and whose turn has not come
--   6 passed    ZSET   identity -> when its turn came (ms), owed places past their turn
--   7 late      STRING proofs given after their turn, not yet taken off a release
--   8 lane_issued STRING last lane place handed out
--   9 lane      HASH   lane place -> place, lane places not yet passed by serving
--  10 lanewho   HASH   identity hash -> "place:lane place"
-- ARGV:
--   1 identity hash (hex)   2 "1" when the sale is open   3 a random shuffle key (used if none yet)
--   4 most identities remembered (beyond it a new place is given but not remembered)
--   5 "1" when the check is given (or the room has none)   6 now (ms)   7 grace (ms)
--   8 "1" when the joiner is an invitee of a room whose lane has a share of the release
-- Returns {position, 1 when new / 0 when the identity already held it, 1 when the check is owed,
-- lane place or 0}, or {0, 0, 1, 0} when a new owed place cannot be remembered (the joiner must
-- give the check first).
local open = ARGV[2] == '1'
local need_freeze = open and redis.call('EXISTS', KEYS[3]) == 0
local issued = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local cur = redis.call('HGET', KEYS[2], ARGV[1])
local tracked = redis.call('HLEN', KEYS[2])
local limit = tonumber(ARGV[4]) or 0
local proven = ARGV[5] == '1'
local now = tonumber(ARGV[6]) or 0
local grace = tonumber(ARGV[7]) or 0
local lane = ARGV[8] == '1'

-- The lane place of place p held by this identity (0: none).
local function lane_of(p)
  local v = redis.call('HGET', KEYS[10], ARGV[1])
  if not v then return 0 end
  local at = string.find(v, ':', 1, true)
  if not at or tonumber(string.sub(v, 1, at - 1)) ~= p then return 0 end
  return tonumber(string.sub(v, at + 1)) or 0
end

if need_freeze then
  redis.call('SET', KEYS[3], issued)
  redis.call('SET', KEYS[4], ARGV[3], 'NX')
end
if cur and string.sub(cur, 1, 1) ~= 'd' then
  local p = tonumber(cur)
  local owed = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[1]) or '-1')
  if owed == p then
    if proven then redis.call('ZREM', KEYS[5], ARGV[1]) return {p, 0, 0, 0} end
    return {p, 0, 1, 0}
  end
  local since = redis.call('ZSCORE', KEYS[6], ARGV[1])
  if not since then
    return {p, 0, 0, lane_of(p)}
  end
  redis.call('ZREM', KEYS[6], ARGV[1])
  if tonumber(since) + grace >= now then
    if proven then
      redis.call('INCR', KEYS[7])
      return {p, 0, 0, 0}
    end
    redis.call('ZADD', KEYS[6], since, ARGV[1])
    return {p, 0, 1, 0}
  end
  -- Its turn came longer ago than the grace: the place is lost, a new one follows.
  redis.call('HSET', KEYS[2], ARGV[1], 'd' .. p)
  cur = 'd' .. p
end
if not proven and not cur and tracked >= limit then
  return {0, 0, 1, 0}
end
local p = redis.call('INCR', KEYS[1])
local remembered = cur or tracked < limit
if remembered then
  redis.call('HSET', KEYS[2], ARGV[1], p)
end
if not proven then
  redis.call('ZADD', KEYS[5], p, ARGV[1])
  return {p, 1, 1, 0}
end
if lane then
  local l = redis.call('INCR', KEYS[8])
  redis.call('HSET', KEYS[9], l, p)
  if remembered then
    redis.call('HSET', KEYS[10], ARGV[1], p .. ':' .. l)
  end
  return {p, 1, 0, l}
end
return {p, 1, 0, 0}
