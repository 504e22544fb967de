#!lua
-- room_invite_add: new invite codes of a room (unused); a code already there keeps its state.
--
-- KEYS: 1 codes HASH (`wk:{room:<id>}:inv:codes`)
-- ARGV: code hashes (at most 10,000 a call)
-- Returns how many were new.
local added = 0
for i = 1, #ARGV do
  added = added + redis.call('HSETNX', KEYS[1], ARGV[i], '')
end
return added
