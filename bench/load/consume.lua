-- wrk script: POST /api/v1/consume for one of 1000 keys, round robin per
-- thread, so the load spreads over keys as real clients would.
local n = 0
request = function()
  n = n + 1
  local body = string.format('{"limiter":"load","key":"k%d","tokens":1}', n % 1000)
  return wrk.format("POST", "/api/v1/consume", {["Content-Type"] = "application/json"}, body)
end
