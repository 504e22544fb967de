#!lua flags=no-writes
-- due: CREATED orders whose deadline Redis TIME has passed, oldest first (what the sweeper closes).
-- O(log n + limit).
--
-- KEYS: the standard list of lua/README.md; used here: 9 deadlines.
-- ARGV: 1 most entries to return
-- Returns {order id, deadline ms, ...}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]) or 0)
