#!lua
-- room_spread_block: the end of one of a spread room's blocks of positions (`layout = "spread"`,
-- edge/src/room/spread.rs): how far its edge used it, recorded on one of the room's shards (blocks
-- go round them, so the records and the leader's reads spread over the cluster; the block counter
-- itself is a plain `INCRBY`). The leader counts only the places handed out and skips the unused end;
-- positions of a block not recorded yet are a gap it waits at (the block is still in use).
--
-- KEYS (one shard's slot, `wk:{room:<id>:<k>.<n>}:...`):
--   1 blk    HASH   block start -> "end:lease ms:used:1" (used: last position handed out, start - 1
--                   for none)
--   2 placed STRING places handed out from this shard's blocks
-- ARGV: 1 block start   2 its end   3 its lease time (ms, the edge's clock)   4 last position handed
--   out from it   5 places handed out from it
-- A block the leader already passed as a gap (its edge was cut off longer than the grace) is written
-- all the same: the leader drops it at its next step and counts its places as passed.
-- Returns 1.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[4] .. ':1')
local n = tonumber(ARGV[5]) or 0
if n > 0 then redis.call('INCRBY', KEYS[2], n) end
return 1
