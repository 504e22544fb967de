#!lua flags=no-writes
-- room_invite_counts: the invite lane of a room in figures.
--
-- KEYS: 1 codes HASH, 2 bound HASH, 3 users SET (`wk:{room:<id>}:inv:{codes,bound,users}`)
-- Returns {codes, redeemed codes, allowlisted identities}.
return {redis.call('HLEN', KEYS[1]), redis.call('HLEN', KEYS[2]), redis.call('SCARD', KEYS[3])}
