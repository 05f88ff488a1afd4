-- load.lua — wrk script for one load kind of the soak (tests/soak/soak.py).
-- Arguments after `--`: KIND DELAY_MS ACCEPT_ENCODING PATH...
--   KIND             sent as the User-Agent "soak-KIND", so the access log tells the kinds
--                    apart; also the name in the summary line
--   DELAY_MS         pause before each request of a connection (wrk's delay()): the soak
--                    is about duration and variety, not peak rate
--   ACCEPT_ENCODING  the Accept-Encoding header, `-` for none; a comma-separated list is
--                    taken in turn, one per request (gzip, br, zstd)
--   PATH...          the paths asked for, in turn; `POST:SIZE:PATH` posts a body of SIZE
--                    bytes to PATH instead of a GET
-- At the end one line `soak-status STATUS=COUNT ...` gives the statuses the client saw,
-- summed over wrk's threads (done() runs in wrk's main state, which knows no KIND).

local kind, delay_ms, codings, paths
local next_path, next_coding = 0, 0
statuses = {}

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local function split(s, sep)
  local out = {}
  for part in string.gmatch(s, "[^" .. sep .. "]+") do
    table.insert(out, part)
  end
  return out
end

function init(args)
  kind = args[1]
  delay_ms = tonumber(args[2])
  codings = args[3] == "-" and {} or split(args[3], ",")
  paths = {}
  for i = 4, #args do
    local size, path = string.match(args[i], "^POST:(%d+):(.+)$")
    if size then
      -- The body made once: the same bytes go with every request.
      table.insert(paths, {method = "POST", path = path, body = string.rep("p", tonumber(size))})
    else
      table.insert(paths, {method = "GET", path = args[i]})
    end
  end
end

function delay()
  return delay_ms
end

function request()
  next_path = next_path % #paths + 1
  -- wrk.format takes these instead of wrk.headers, not on top of them.
  local headers = {["User-Agent"] = "soak-" .. kind}
  if #codings > 0 then
    next_coding = next_coding % #codings + 1
    headers["Accept-Encoding"] = codings[next_coding]
  end
  local p = paths[next_path]
  return wrk.format(p.method, p.path, headers, p.body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for status, count in pairs(thread:get("statuses")) do
      total[status] = (total[status] or 0) + count
    end
  end
  local parts = {}
  for status, count in pairs(total) do
    table.insert(parts, status .. "=" .. count)
  end
  table.sort(parts)
  io.write("soak-status " .. table.concat(parts, " ") .. "\n")
end
