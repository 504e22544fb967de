#!lua
-- room_invite_revoke: invite codes of a room taken back; a redeemed one takes its redeemer's
-- invitation with it (unless the redeemer is also on the allowlist).
--
-- KEYS: 1 codes HASH (`wk:{room:<id>}:inv:codes`), 2 bound HASH (`wk:{room:<id>}:inv:bound`)
-- ARGV: code hashes (at most 10,000 a call)
-- Returns how many existed.
local removed = 0
for i = 1, #ARGV do
  local owner = redis.call('HGET', KEYS[1], ARGV[i])
  if owner then
    redis.call('HDEL', KEYS[1], ARGV[i])
    if owner ~= '' then
      redis.call('HDEL', KEYS[2], owner)
    end
    removed = removed + 1
  end
end
return removed
