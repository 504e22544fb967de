#!lua
-- room_spread_block: one edge's record of the blocks it left, on one of the room's shards (an
-- edge's records go round them)
-- (`layout = "spread"`, edge/src/room/spread.rs). A block is one edge's places of one time bucket
-- (`block-ms` wide): its positions follow from the bucket and the edge index, so leasing one costs
-- no command at all; what the leader needs is how far each block was used, and how far in time the
-- edge has recorded everything (its watermark; the leader takes an index's highest over the shards,
-- read before any shard's blocks): positions of a bucket before it that no record holds were never
-- handed out.
--
-- KEYS (one shard's slot, `wk:{room:<id>:<k>.<n>}:...`):
--   1 blocks ZSET  member "start:end:used" (used: last position handed out), score: the block's end
--   2 wm     HASH  edge index -> watermark bucket (every block of a bucket before it is recorded)
--   3 hist   HASH  second -> places handed out in it; "total" -> all places handed out
-- ARGV: 1 edge index   2 watermark bucket   3 n blocks   then n pairs (end, member)   then pairs
--   (second, places)
-- Positions run past 2^47: they stay the strings the edge sent (a Lua number would print them
-- rounded). Written in one go with the watermark, after the edge's earlier records were written, so
-- a leader that read the watermark (before the blocks) finds every block it promises. Returns 1.
local n = tonumber(ARGV[3]) or 0
if n > 0 then
  local z = {}
  for i = 0, n - 1 do
    z[#z + 1] = ARGV[4 + 2 * i]
    z[#z + 1] = ARGV[5 + 2 * i]
  end
  redis.call('ZADD', KEYS[1], unpack(z))
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local total = 0
local i = 4 + 2 * n
while ARGV[i + 1] do
  local c = tonumber(ARGV[i + 1]) or 0
  if c > 0 then
    redis.call('HINCRBY', KEYS[3], ARGV[i], c)
    total = total + c
  end
  i = i + 2
end
if total > 0 then redis.call('HINCRBY', KEYS[3], 'total', total) end
return 1
