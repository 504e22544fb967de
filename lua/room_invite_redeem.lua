#!lua
-- room_invite_redeem: an identity redeems an invite code of a room, once: the code is bound to
-- the first identity that redeems it, for good.
--
-- KEYS: 1 codes HASH (`wk:{room:<id>}:inv:codes`: code hash -> redeemer identity, '' unused)
--       2 bound HASH (`wk:{room:<id>}:inv:bound`: identity -> the code hash it redeemed)
--       3 users SET  (`wk:{room:<id>}:inv:users`: identities of the allowlist)
-- ARGV: 1 code hash, 2 identity (16 hex digits)
-- Returns 0: no such code (never uploaded, or revoked); 1: redeemed now; 2: this identity
-- redeemed it before (nothing changes); 3: another identity redeemed it; 4: the identity is an
-- invitee already (allowlisted, or through another code): the code stays unused.
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if not owner then
  return 0
end
if owner == ARGV[2] then
  return 2
end
if owner ~= '' then
  return 3
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 or redis.call('SISMEMBER', KEYS[3], ARGV[2]) == 1 then
  return 4
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
