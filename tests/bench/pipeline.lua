-- pipeline.lua — wrk script for the pipelined keep-alive workload: each connection sends
-- `depth` requests for the URL's path back to back in one write and waits for all their
-- responses before sending the next batch (wrk counts every response as a request; its
-- latency figures are per batch). Depth 16 unless given after `--`:
--   wrk -t1 -c100 -d5s -s pipeline.lua http://127.0.0.1:PORT/index.html -- 16
local depth = 16
local batch

function init(args)
  depth = tonumber(args[1]) or depth
  local requests = {}
  for i = 1, depth do
    requests[i] = wrk.format(nil, nil)  -- wrk.method and the URL's path, wrk.headers
  end
  batch = table.concat(requests)
end

function request()
  return batch
end
