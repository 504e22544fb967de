-- give_back: an order's tickets, seats and limit usage go back on sale. The one copy of what close.lua
-- (CREATED -> CLOSED) and refund.lua (PAID -> REFUNDED) both do; core/src/store/redis.rs puts this file
-- after their `#!lua` line, so each stays one script, one EVALSHA, its keys in the event's slot.
--
-- KEYS (the standard list of lua/README.md): 2 pools, 3 seatfree, 4 seatidx, 5 seatown, 6 usage.
-- counter: the pool counter the tickets leave: 'held' (a hold) or 'sold' (a paid order).
-- oid, qty, pools, seats: the order's id, quantity, pool ids (csv) and seat names (csv, or nil).
-- user, phone, id_number, device: the order's limit dimensions (each nil when the order has none).
-- Writes only: the caller has made every check.
local function give_back(counter, oid, qty, pools, seats, user, phone, id_number, device)
  for pid in string.gmatch(pools, '[^,]+') do
    local c = redis.call('HMGET', KEYS[2], pid .. ':' .. counter, pid .. ':slot')
    if c[1] then
      local n = tonumber(c[1])
      if n > 0 then redis.call('HINCRBY', KEYS[2], pid .. ':' .. counter, -math.min(qty, n)) end
      redis.call('HINCRBY', KEYS[2], pid .. ':avail', qty)
      if c[2] then
        for name in string.gmatch(seats or '', '[^,]+') do
          local m = pid .. '/' .. name
          local idx = redis.call('HGET', KEYS[4], m)
          if idx and redis.call('HGET', KEYS[5], m) == oid then
            redis.call('HDEL', KEYS[5], m)
            redis.call('ZADD', KEYS[3], tonumber(c[2]) * 1000000 + tonumber(idx), m)
          end
        end
      end
    end
  end
  local dims = { { 'user', user }, { 'phone', phone }, { 'id_number', id_number }, { 'device', device } }
  for _, dv in ipairs(dims) do
    if dv[2] then
      local f = dv[1] .. '\n' .. dv[2]
      local u = redis.call('HGET', KEYS[6], f)
      if u then
        local left = tonumber(u) - math.min(qty, tonumber(u))
        if left == 0 then redis.call('HDEL', KEYS[6], f) else redis.call('HSET', KEYS[6], f, left) end
      end
    end
  end
end
