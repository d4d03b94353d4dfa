-- wrk script: one pass over a list of paths (one per line), each requested once in order over
-- all connections; the thread stops when as many responses as paths have arrived (requests
-- sent after the last path start the list again: at most one per connection) and prints
-- "PASSDONE": wrk itself runs to -d, so the caller sends it SIGINT then (compress.py). Use -t1.
-- usage: wrk -t1 ... -s corpus_pass.lua URL -- <path list file>
-- done() prints one line "WRKJSON {...}" as objects.lua's does.

local common = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrk_common.lua")

local paths = {}
local next_i = 1
local responses = 0

function init(args)
  paths = common.read_paths(args[1])
end

function request()
  local p = paths[next_i]
  next_i = next_i % #paths + 1
  return wrk.format("GET", p)
end

function response(status, headers, body)
  responses = responses + 1
  if responses == #paths then
    io.write("PASSDONE\n")
    io.flush()
    wrk.thread:stop()
  end
end

function done(summary, latency, requests)
  common.report(summary, latency)
end
