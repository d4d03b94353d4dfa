-- wrk script: requests drawn at random (uniform) from a list of paths, one per line.
-- usage: wrk ... -s corpus.lua URL -- <path list file> [seed]
-- done() prints one line "WRKJSON {...}" as objects.lua's does.

local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")

local threads = {}
local paths = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  paths = common.read_paths(args[1])
  local seed = tonumber(args[2] or os.time())
  math.randomseed(seed + (tid or 0) * 7919)
end

function request()
  return wrk.format("GET", paths[math.random(1, #paths)])
end

function done(summary, latency, requests)
  common.report(summary, latency)
end
