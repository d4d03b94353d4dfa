-- wrk script: one pass over a list of paths (one per line), each requested once in order over
-- all connections; the thread stops when as many responses as paths have arrived (requests
-- sent after the last path start the list again: at most one per connection) and prints
-- "PASSDONE": wrk itself runs to -d, so the caller sends it SIGINT then (compress.py). Use -t1.
-- usage: wrk -t1 ... -s corpus_pass.lua URL -- <path list file>
-- done() prints one line "WRKJSON {...}" as objects.lua's does.

local paths = {}
local next_i = 1
local responses = 0

function init(args)
  for line in io.lines(args[1]) do
    if line ~= "" then table.insert(paths, line) end
  end
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
