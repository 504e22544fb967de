-- wrk script: every request is the next of N admitted fans (fans.txt: `<Cookie>\t<user id>` per
-- line, from admit_fans.py), so N distinct fans with their own tokens take turns.
--   FANS=fans.txt wrk -s bench/nginx-compat/distinct.lua http://127.0.0.1:8080/buy/ev-1/
local requests = {}
local i = 0

function init(args)
  for line in io.lines(os.getenv("FANS")) do
    local cookie, user = line:match("^(.-)\t(.*)$")
    requests[#requests + 1] = wrk.format("GET", nil, { ["Cookie"] = cookie, ["X-User-Id"] = user })
  end
  i = math.random(#requests) - 1
end

function request()
  i = i % #requests + 1
  return requests[i]
end
