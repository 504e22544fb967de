#!lua
-- room_spread_block: the records of a spread room's blocks of positions (`layout = "spread"`,
-- edge/src/room/spread.rs), kept on the room's shards (blocks go round them, so the records and the
-- leader's reads spread over the cluster; the block counter itself is a plain `INCRBY`). Ends an
-- edge's previous block (how far it used it: the leader counts only those places and skips the
-- unused end) and/or records its new one, before the edge hands out a place from it.
--
-- KEYS (one shard's slot, `wk:{room:<id>:<k>.<n>}:...`): 1 blk HASH block start -> "end:lease ms:used:final" (used: last position
--   handed out, start - 1 for none; final 1 once the edge hands out no more from it)
--   2 placed STRING places handed out from this shard's blocks, counted when a block ends
-- ARGV: 1 previous block's start (0: none)   2 its end   3 its lease time (ms)   4 last position
--   handed out from it   5 places handed out from it   6 new block's start (0: none)   7 its end
--   8 its lease time (ms, the edge's clock)
-- A block the leader already passed and dropped is written again: the leader drops it at its next
-- step and counts its places as passed.
-- Returns 1.
if tonumber(ARGV[1]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3] .. ':' .. ARGV[4] .. ':1')
  local n = tonumber(ARGV[5]) or 0
  if n > 0 then redis.call('INCRBY', KEYS[2], n) end
end
if tonumber(ARGV[6]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[6], ARGV[7] .. ':' .. ARGV[8] .. ':' .. (tonumber(ARGV[6]) - 1) .. ':0')
end
return 1
