#!/usr/bin/env python3
"""What the disk sees while a bench round runs, once a second.

    blockstats.py SECONDS [DEVICE]    (DEVICE: a name in /proc/diskstats, default vda)

Per second: reads completed by the device, MB/s, the average request size, the mean time a read
spent in the block layer and device (`await`, from /proc/diskstats), and, when an EdgeCache
admin port answers (19090, else 19091 for edgecache-b), the mean time the data plane waited for
its disk reads (`disk_read_seconds`) over the same second. The gap between the two is the time a
read waits in the server before and after the device. Run it in the background next to
`bench.py` (session 29 in bench/BENCHMARKS.md).
"""
import re
import sys
import time
import urllib.request


def diskstats(dev):
    """(reads completed, sectors read, ms spent reading) of `dev`."""
    for line in open("/proc/diskstats"):
        f = line.split()
        if f[2] == dev:
            return int(f[3]), int(f[5]), int(f[6])
    raise SystemExit(f"no device {dev!r} in /proc/diskstats")


def server_reads():
    """(sum, count) of the data plane's disk_read_seconds, or None when no admin port answers."""
    for port in (19090, 19091):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=0.5).read().decode()
        except OSError:
            continue
        out = []
        for k in ("sum", "count"):
            m = re.search(rf"^edgecache_dataplane_disk_read_seconds_{k}(?:\{{[^}}]*\}})? ([0-9.e+]+)", text, re.M)
            out.append(float(m.group(1)) if m else 0.0)
        return tuple(out)
    return None


def main():
    secs = float(sys.argv[1])
    dev = sys.argv[2] if len(sys.argv) > 2 else "vda"
    end = time.time() + secs
    prev, prev_srv, prev_t = diskstats(dev), server_reads(), time.time()
    while time.time() < end:
        time.sleep(1.0)
        cur, srv, now = diskstats(dev), server_reads(), time.time()
        dt = now - prev_t
        n, sectors, ms = (c - p for c, p in zip(cur, prev))
        line = (f"{time.strftime('%H:%M:%S')} dev reads/s {n / dt:6.0f} MB/s {sectors * 512 / dt / 1e6:6.0f} "
                f"avgKiB {sectors / 2 / n if n else 0:5.0f} await {ms / n if n else 0:5.2f} ms")
        if srv and prev_srv and srv[1] > prev_srv[1]:
            c, s = srv[1] - prev_srv[1], srv[0] - prev_srv[0]
            line += f" server reads/s {c / dt:6.0f} mean {s / c * 1000:.2f} ms"
        print(line, flush=True)
        prev, prev_srv, prev_t = cur, srv, now


if __name__ == "__main__":
    main()
