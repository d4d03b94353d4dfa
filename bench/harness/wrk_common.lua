-- What the wrk scripts of bench/harness share (loaded with dofile from each script's folder):
-- the "WRKJSON {...}" line their done() prints, which the harness parses, and a list of paths
-- read from a file, one per line.

local M = {}

-- The paths in `file`, one per line, empty lines skipped.
function M.read_paths(file)
  local paths = {}
  for line in io.lines(file) do
    if line ~= "" then table.insert(paths, line) end
  end
  return paths
end

-- Print the run's summary as one line "WRKJSON {...}" (requests, bytes, errors, latencies in us).
function M.report(summary, latency)
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

return M
