-- wrk script: requests drawn at random (uniform) from a list of paths, one per line.
-- usage: wrk ... -s corpus.lua URL -- <path list file> [seed]
-- done() prints one line "WRKJSON {...}" as objects.lua's does.

local threads = {}
local paths = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    if line ~= "" then table.insert(paths, line) end
  end
  local seed = tonumber(args[2] or os.time())
  math.randomseed(seed + (tid or 0) * 7919)
end

function request()
  return wrk.format("GET", paths[math.random(1, #paths)])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"lat_mean_us":%.1f,"lat_max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
