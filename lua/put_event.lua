#!lua
-- put_event: creates or hot-updates an event. Capacity may be raised, or lowered but never below
-- held + sold; seats may be added, or removed while free; pools may be removed while nothing of them is
-- held or sold; once the sale is open (by Redis TIME) a change that moves stock needs force.
-- O(pools + seats of the event): an operator call, never on the buyer's path.
--
-- KEYS: the standard list of lua/README.md (1 ev .. 13 order); used here: 1 ev, 2 pools, 3 seatfree,
--   4 seatidx, 5 seatown.
-- ARGV:
--   1 the event body as the API shows it (JSON, stored verbatim for reads)
--   2 the same body compiled by the core (JSON): {"opens": ms, "closes": ms, "hold": ms,
--     "pools": [{"id", "cap"} | {"id", "seats": [..]}], "skus": [{"id", "price": "<cents>", "max", "pools": [..]}],
--     "limits": "<dimension>:<max>,..."}
--   3 force: "1" or "0"
-- Returns {code, ...}:
--   CREATED
--   UPDATED
--   NEEDS_FORCE
--   REJECTED, path1, message1, path2, message2, ...

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local spec = cjson.decode(ARGV[2])
local force = ARGV[3] == '1'

local function split(s)
  local out = {}
  for x in string.gmatch(s or '', '[^,]+') do out[#out + 1] = x end
  return out
end

-- Seat rows go in batches: one call per 500 seats instead of one per seat keeps a 100,000-seat pool
-- to a few hundred calls (Redis runs nothing else meanwhile), and far under Lua's stack limit for unpack.
local BATCH = 500

local function flush(cmd, key, args)
  if #args > 0 then redis.call(cmd, key, unpack(args)) end
  return {}
end

-- Seat rows of one pool: the free ones into the free set (by their index in the new list), every one
-- into the index; `taken` seats stay with their orders.
local function add_seats(pid, slot, names, taken)
  local idx, free = {}, {}
  for i, name in ipairs(names) do
    local m = pid .. '/' .. name
    idx[#idx + 1] = m
    idx[#idx + 1] = i - 1
    if not taken[name] then
      free[#free + 1] = slot * 1000000 + i - 1
      free[#free + 1] = m
    end
    if #idx >= 2 * BATCH then idx = flush('HSET', KEYS[4], idx) end
    if #free >= 2 * BATCH then free = flush('ZADD', KEYS[3], free) end
  end
  flush('HSET', KEYS[4], idx)
  flush('ZADD', KEYS[3], free)
end

local function drop_seats(pid, csv)
  local members = {}
  for _, name in ipairs(split(csv)) do
    members[#members + 1] = pid .. '/' .. name
    if #members >= BATCH then
      redis.call('HDEL', KEYS[4], unpack(members))
      members = flush('ZREM', KEYS[3], members)
    end
  end
  if #members > 0 then
    redis.call('HDEL', KEYS[4], unpack(members))
    redis.call('ZREM', KEYS[3], unpack(members))
  end
end

local old = redis.call('HMGET', KEYS[1], 'opens', 'pools', 'skus')
local exists = old[1] ~= false

-- Reads and checks (update only).
local errs = {}
local moves = false
local plan = {}        -- pool id -> {cap, avail, held, sold, seats (names or nil), taken, old_slot, old_csv}
if exists then
  -- Seats held or sold, per pool: only read for pools that had seats.
  for i, p in ipairs(spec.pools) do
    local path = 'pools[' .. (i - 1) .. ']'
    local new_cap = p.seats and #p.seats or p.cap
    local c = redis.call('HMGET', KEYS[2], p.id .. ':cap', p.id .. ':held', p.id .. ':sold', p.id .. ':slot')
    if not c[1] then
      moves = true
      plan[p.id] = { cap = new_cap, avail = new_cap, held = 0, sold = 0, seats = p.seats, taken = {} }
    else
      local old_cap, held, sold = tonumber(c[1]), tonumber(c[2]), tonumber(c[3])
      local used = held + sold
      local was_seated = c[4] ~= false
      local skip = false
      if was_seated ~= (p.seats ~= nil) and used > 0 then
        errs[#errs + 1] = path
        errs[#errs + 1] = 'cannot switch between capacity and seats while tickets are held or sold'
        skip = true
      end
      local taken, taken_list, old_csv, same = {}, {}, nil, false
      if not skip then
        if was_seated then old_csv = redis.call('HGET', KEYS[1], 'seats:' .. p.id) end
        -- The same seat list (the usual case: another field changed) leaves the seat rows untouched.
        same = was_seated and p.seats ~= nil and old_csv == table.concat(p.seats, ',')
        if was_seated and not same and used > 0 then
          -- The seats of this pool held or sold, in the old list's order: one read of the event's taken
          -- seats rather than one call per seat of the pool.
          local owned, prefix = {}, p.id .. '/'
          local rows = redis.call('HGETALL', KEYS[5])
          for j = 1, #rows, 2 do
            if string.sub(rows[j], 1, #prefix) == prefix then owned[string.sub(rows[j], #prefix + 1)] = true end
          end
          for _, name in ipairs(split(old_csv)) do
            if owned[name] then
              taken[name] = true
              taken_list[#taken_list + 1] = name
            end
          end
        end
        if p.seats then
          local keep = {}
          for _, name in ipairs(p.seats) do keep[name] = true end
          for _, name in ipairs(taken_list) do
            if not keep[name] then
              errs[#errs + 1] = path .. '.seats'
              errs[#errs + 1] = 'seat ' .. name .. ' is held or sold and cannot be removed'
            end
          end
          if not same then moves = true end
        elseif new_cap < used then
          errs[#errs + 1] = path .. '.capacity'
          errs[#errs + 1] = 'cannot be lowered below held + sold (' .. used .. ')'
          skip = true
        end
      end
      if not skip then
        if new_cap ~= old_cap then moves = true end
        plan[p.id] = { cap = new_cap, avail = math.max(new_cap - used, 0), held = held, sold = sold,
          seats = p.seats, taken = taken, old_slot = c[4], old_csv = old_csv, same = same }
      end
    end
  end
  local removed = {}
  local new_ids = {}
  for _, p in ipairs(spec.pools) do new_ids[p.id] = true end
  for _, pid in ipairs(split(old[2])) do
    if not new_ids[pid] then
      moves = true
      local c = redis.call('HMGET', KEYS[2], pid .. ':held', pid .. ':sold')
      if tonumber(c[1] or '0') + tonumber(c[2] or '0') > 0 then
        errs[#errs + 1] = 'pools'
        errs[#errs + 1] = 'pool ' .. pid .. ' has held or sold tickets and cannot be removed'
      end
      removed[#removed + 1] = pid
    end
  end
  if #errs > 0 then
    table.insert(errs, 1, 'REJECTED')
    return errs
  end
  if moves and now >= tonumber(old[1]) and not force then return { 'NEEDS_FORCE' } end

  -- Writes (update).
  for _, pid in ipairs(removed) do
    local slot = redis.call('HGET', KEYS[2], pid .. ':slot')
    if slot then drop_seats(pid, redis.call('HGET', KEYS[1], 'seats:' .. pid)) end
    redis.call('HDEL', KEYS[2], pid .. ':cap', pid .. ':avail', pid .. ':held', pid .. ':sold', pid .. ':slot')
    redis.call('HDEL', KEYS[1], 'seats:' .. pid)
  end
  for _, sid in ipairs(split(old[3])) do redis.call('HDEL', KEYS[1], 'sku:' .. sid) end
else
  plan = {}
  for _, p in ipairs(spec.pools) do
    local cap = p.seats and #p.seats or p.cap
    plan[p.id] = { cap = cap, avail = cap, held = 0, sold = 0, seats = p.seats, taken = {} }
  end
end

-- Writes (both).
local pool_ids, sku_ids = {}, {}
for _, p in ipairs(spec.pools) do
  local pl = plan[p.id]
  pool_ids[#pool_ids + 1] = p.id
  redis.call('HSET', KEYS[2], p.id .. ':cap', pl.cap, p.id .. ':avail', pl.avail, p.id .. ':held', pl.held,
    p.id .. ':sold', pl.sold)
  if not pl.same then
    if pl.old_csv then drop_seats(p.id, pl.old_csv) end
    if pl.seats then
      local slot = pl.old_slot and tonumber(pl.old_slot) or redis.call('HINCRBY', KEYS[1], 'nslot', 1)
      redis.call('HSET', KEYS[2], p.id .. ':slot', slot)
      redis.call('HSET', KEYS[1], 'seats:' .. p.id, table.concat(pl.seats, ','))
      add_seats(p.id, slot, pl.seats, pl.taken)
    else
      redis.call('HDEL', KEYS[2], p.id .. ':slot')
      redis.call('HDEL', KEYS[1], 'seats:' .. p.id)
    end
  end
end
for _, s in ipairs(spec.skus) do
  sku_ids[#sku_ids + 1] = s.id
  redis.call('HSET', KEYS[1], 'sku:' .. s.id, s.price .. '|' .. s.max .. '|' .. table.concat(s.pools, ','))
end
redis.call('HSET', KEYS[1], 'spec', ARGV[1], 'opens', string.format('%.0f', spec.opens),
  'closes', string.format('%.0f', spec.closes), 'hold', string.format('%.0f', spec.hold),
  'pools', table.concat(pool_ids, ','), 'skus', table.concat(sku_ids, ','), 'limits', spec.limits)
if not exists then
  redis.call('HSET', KEYS[1], 'paused', '0')
  return { 'CREATED' }
end
return { 'UPDATED' }
