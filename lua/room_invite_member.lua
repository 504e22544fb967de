#!lua flags=no-writes
-- room_invite_member: whether an identity is an invitee of a room (redeemed a code, or on the
-- allowlist).
--
-- KEYS: 1 bound HASH (`wk:{room:<id>}:inv:bound`), 2 users SET (`wk:{room:<id>}:inv:users`)
-- ARGV: 1 identity (16 hex digits)
-- Returns 1 or 0.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 or redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 1
end
return 0
