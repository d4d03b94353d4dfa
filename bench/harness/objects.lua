-- wrk script: random object ids, uniform or zipf, over /obj/<size>/<id>.
-- usage: wrk ... -s objects.lua URL -- <size> <count> <uniform|zipf> [zipf_s] [seed]
-- done() prints one line "WRKJSON {...}" with counts and latency percentiles (us).

local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")

local threads = {}
local size, count, dist, zs = "4k", 1000, "uniform", 1.0
local cdf = nil
local prefix

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  size = args[1] or size
  count = tonumber(args[2] or count)
  dist = args[3] or dist
  zs = tonumber(args[4] or zs)
  local seed = tonumber(args[5] or os.time())
  math.randomseed(seed + (tid or 0) * 7919)
  prefix = "/obj/" .. size .. "/"
  if dist == "zipf" then
    cdf = {}
    local sum = 0
    for i = 1, count do
      sum = sum + 1 / (i ^ zs)
      cdf[i] = sum
    end
    for i = 1, count do
      cdf[i] = cdf[i] / sum
    end
  end
end

local function zipf_id()
  local r = math.random()
  local lo, hi = 1, count
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cdf[mid] < r then lo = mid + 1 else hi = mid end
  end
  return lo - 1
end

function request()
  local id
  if cdf then id = zipf_id() else id = math.random(0, count - 1) end
  return wrk.format("GET", prefix .. id)
end

function done(summary, latency, requests)
  common.report(summary, latency)
end
