#!lua
-- lease: takes or renews a named lease (one sweeper at a time across core instances).
-- Free or expired: take it; held by the same holder: renew it; held by another: refuse.
--
-- KEYS: 1 the lease key, `wk:lease:<name>`
-- ARGV: 1 holder  2 time to live (ms)
-- Returns 1 when the holder has the lease, 0 when another has it.

local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
