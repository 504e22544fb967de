#!lua
-- room_lead: takes the room's leader lease when free, renews it when held by this node
-- (SET NX PX + compare-and-renew). Only the leader advances `serving`.
--
-- KEYS: 1 leader STRING node id, with a TTL   (`wk:{room:<id>}:leader`)
-- ARGV: 1 node id   2 lease in ms
-- Returns 1 when this node holds the lease after the call, 0 when another node does.
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
