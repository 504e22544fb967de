#!lua
-- room_spread_edge: an edge claims (or renews) its index in a spread room (`layout = "spread"`,
-- edge/src/room/spread.rs). Positions are (time bucket, edge index, sequence): two edges numbering
-- with one index would hand out the same places, so an index is one edge's while it renews it.
-- Edges numbering with other settings would hand out places the others cannot read, so the
-- settings of the edges holding live claims bind a new one.
--
-- KEYS (the room's counter slot): 1 edges HASH index -> "node:ms of its last renewal", and
--   "settings" -> the numbering settings of the edges claiming
-- ARGV: 1 this edge's node token   2 now (Unix ms)   3 ms after which an index not renewed is free
--   4 indexes (the most edges numbering at once)   5 the index this edge numbers with (-1: none)
--   6 this edge's numbering settings ("shards:block:block-ms")
-- Returns the index held (renewed); or, when the claims were lost (a failover), the index the edge
-- numbers with if free, else the lowest free one (claimed); or -1 when every index is held by
-- another edge; or {-2, settings} when edges holding live claims number with other settings
-- (with no live claim the settings are this edge's from now on).
local all = redis.call('HGETALL', KEYS[1])
local now = tonumber(ARGV[2]) or 0
local stale = tonumber(ARGV[3]) or 10000
local taken = {}
local live = false
local settings = nil
for i = 1, #all, 2 do
  if all[i] == 'settings' then
    settings = all[i + 1]
  else
    local node, at = string.match(all[i + 1], '^(.*):(%d+)$')
    local idx = tonumber(all[i])
    if idx and node == ARGV[1] then
      redis.call('HSET', KEYS[1], all[i], ARGV[1] .. ':' .. ARGV[2])
      return idx
    end
    if idx and at and now - tonumber(at) <= stale then
      taken[idx] = true
      live = true
    end
  end
end
if settings and settings ~= ARGV[6] and live then
  return {-2, settings}
end
if settings ~= ARGV[6] then
  redis.call('HSET', KEYS[1], 'settings', ARGV[6])
end
local want = tonumber(ARGV[5]) or -1
if want >= 0 and want < (tonumber(ARGV[4]) or 64) and not taken[want] then
  redis.call('HSET', KEYS[1], tostring(want), ARGV[1] .. ':' .. ARGV[2])
  return want
end
for idx = 0, (tonumber(ARGV[4]) or 64) - 1 do
  if not taken[idx] then
    redis.call('HSET', KEYS[1], tostring(idx), ARGV[1] .. ':' .. ARGV[2])
    return idx
  end
end
return -1
