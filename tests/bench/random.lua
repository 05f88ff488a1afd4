-- random.lua — wrk script for the random-access workload: each request asks for one of
-- the document root's 10,000 small files (files/00000.html .. files/09999.html), picked
-- at random, so the servers' file lookup and caches are exercised rather than one hot
-- file. The seed is fixed per thread so every server gets the same sequence.
local count = 10000

function setup(thread)
  thread:set("seed", 12345)
end

function init(args)
  math.randomseed(seed or 12345)
end

function request()
  local path = string.format("/files/%05d.html", math.random(0, count - 1))
  return wrk.format("GET", path)
end
