-- wrk script: every request joins room r1 as a new user (x-user-id unique per run, thread and
-- request). wrk ... -s join.lua <url> -- <run prefix>
local next_id = 0
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end
function init(args)
  prefix = args[1] or "u"
  sent = 0
end
function request()
  sent = sent + 1
  return wrk.format("GET", "/queue/r1", { ["x-user-id"] = prefix .. "-" .. tid .. "-" .. sent, ["accept"] = "application/json" })
end
