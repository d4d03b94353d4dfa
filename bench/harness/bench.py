#!/usr/bin/env python3
"""EdgeCache benchmark harness (issue 7): hits from disk, side by side with
nginx (proxy_cache, aio threads), Varnish (file storage) and Traffic Server.

Run through bench/run.sh, which installs the tools and builds the binaries.
Every server listens on 127.0.0.1 only. Each cache runs in its own memory
cgroup (v1; the memory each needs to finish every round, MEM_MIB: Traffic
Server 1 GiB, the others 256 MiB) pinned to CPU 1; the load generators are
pinned to CPU 0 and connect from one client address (127.0.0.1) unless
--sources N spreads them over N. Rows: 4 KiB, 100 KiB and 1 MiB hits from
warm caches, 4 KiB hits from RAM (4k-ram: 1,000 objects, all resident) and
nginx serving one static file from RAM on the same core (the ceiling; measured
once before the rows, and again in each round of the 4k-ram row).
Results go to bench/results/<run>.jsonl, a table into bench/BENCHMARKS.md and
a PNG chart next to it (report.py).
"""

import argparse
import atexit
import fcntl
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
REPO = BENCH.parent
RESULTS = BENCH / "results"

CG_MEM = Path("/sys/fs/cgroup/memory")
CG_CPU = Path("/sys/fs/cgroup/cpuacct")
CG_BLK = Path("/sys/fs/cgroup/blkio")
CG_PREFIX = "ecbench-"

ORIGIN_PORT = 18000
PORTS = {"edgecache": 18080, "nginx": 18081, "varnish": 18082, "ats": 18083, "edgecache-b": 18084}
EDGE_ADMIN_PORT = 19090
EDGE_B_ADMIN_PORT = 19091
CEILING_PORT = 18089

SIZES = {  # row -> (object bytes, full count, quick count)
    "4k": (4096, 100_000, 5_000),
    "4k-ram": (4096, 1_000, 1_000),
    "100k": (102_400, 10_000, 1_000),
    "1m": (1 << 20, 1_000, 200),
}
# Rows whose objects are of another row's size (in URLs, the load generators' --size and the
# ceiling's file): the RAM-hit row asks for 4 KiB objects, few enough that every cache holds all
# of them in memory.
ROW_OBJECT = {"4k-ram": "4k"}
# Rows measured with everything resident: the page cache is not dropped before their rounds,
# and the warm-up ends with RESIDENT_PASSES more passes over every id (a cache that admits to
# RAM on a second hit has taken every object by then).
RESIDENT = {"4k-ram"}
RESIDENT_PASSES = 2

# Memory each cache's cgroup gets (MiB): what it needs to finish every round at every row with
# wrk's 256 connections. Traffic Server at 1 MiB reaches ~350 MB RSS (256 KiB fragments, flow
# control, 16 MiB RAM cache) and was OOM-killed in 256 MiB after its first round, so it gets
# 1 GiB; the others finish in 256 MiB. --mem CACHE=MIB changes one, --mem-limit BYTES sets all
# (e.g. 1 GiB each for an equal footing). The run logs and records what each got.
MEM_MIB = {"edgecache": 256, "nginx": 256, "varnish": 256, "ats": 1024, "edgecache-b": 256}


def object_size(row):
    """The object size a row asks for (`4k-ram` -> `4k`)."""
    return ROW_OBJECT.get(row, row)


def cache_mem(args, name):
    """Bytes of memory the cgroup of cache `name` gets (MEM_MIB, --mem, --mem-limit)."""
    per = getattr(args, "mem", None) or {}
    if name in per:
        return per[name] << 20
    if getattr(args, "mem_limit", None):
        return args.mem_limit
    return MEM_MIB.get(name, 256) << 20


def parse_mem(text):
    """`ats=1024,nginx=512` -> {"ats": 1024, "nginx": 512} (MiB)."""
    out = {}
    for item in [x for x in text.split(",") if x]:
        name, _, mib = item.partition("=")
        if name not in MEM_MIB or not mib.isdigit():
            raise argparse.ArgumentTypeError(f"--mem wants CACHE=MIB with CACHE from {','.join(MEM_MIB)}: {item!r}")
        out[name] = int(mib)
    return out

LOG = None
NICE = 0  # --nice: priority of the caches and the load generators


def log(*a):
    msg = time.strftime("%H:%M:%S ") + " ".join(str(x) for x in a)
    print(msg, flush=True)
    if LOG:
        LOG.write(msg + "\n")
        LOG.flush()


# --------------------------------------------------------------------------
# processes and cgroups

PROCS = []  # (name, Popen)
BINS = {}  # private copies of our binaries (see main)
RUN = {}  # what a run holds until it exits (its lock)
# Client addresses the load generators use by default (--sources): one, as wrk on loopback is
# and as an edge sees whole offices, mobile carriers and other proxies behind one address; a
# cache's per-address limits then bind. --sources N spreads the connections over N addresses.
SOURCES = 1
CGROUPS = set()


def cg_create(name, limit):
    """Create memory (+cpuacct, blkio) cgroups; returns the list of cgroup dirs."""
    dirs = []
    mem = CG_MEM / (CG_PREFIX + name)
    if mem.exists():
        cg_remove(name)
    mem.mkdir()
    (mem / "memory.limit_in_bytes").write_text(str(limit))
    dirs.append(mem)
    for root in (CG_CPU, CG_BLK):
        if root.is_dir():
            d = root / (CG_PREFIX + name)
            try:
                d.mkdir(exist_ok=True)
                dirs.append(d)
            except OSError as e:
                log(f"warning: cannot create {d}: {e}")
    CGROUPS.add(name)
    return dirs


def cg_pids(name):
    p = CG_MEM / (CG_PREFIX + name) / "cgroup.procs"
    try:
        return [int(x) for x in p.read_text().split()]
    except OSError:
        return []


def cg_pin(name, spec):
    """Hold every thread of cgroup `name` to the CPUs of `spec`; how many threads had left them.

    `taskset` at the start is inherited, but a program may set its threads' affinity itself:
    Traffic Server binds its ET_NET thread to the whole machine (`exec_thread.affinity` 0), so
    without this its network thread shares the load generator's core."""
    cpus = cpu_list(spec)
    tasks = CG_MEM / (CG_PREFIX + name) / "tasks"
    moved = 0
    try:
        tids = [int(x) for x in tasks.read_text().split()]
    except OSError:
        return 0
    for tid in tids:
        try:
            if os.sched_getaffinity(tid) != cpus:
                os.sched_setaffinity(tid, cpus)
                moved += 1
        except OSError:
            pass
    return moved


def pin_for_round(cache):
    """Before a measured round: every thread of `cache` back on its CPUs (see `cg_pin`)."""
    cpus = cache.args.cache_cpu
    moved = cg_pin(cache.name, cpus)
    if moved:
        log(f"    {cache.name}: {moved} thread(s) had left CPU {cpus}; pinned again")


def cg_remove(name):
    for _ in range(50):
        pids = cg_pids(name)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for root in (CG_MEM, CG_CPU, CG_BLK):
        d = root / (CG_PREFIX + name)
        if d.exists():
            for _ in range(20):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
    CGROUPS.discard(name)


def cg_read(name):
    """Counters of a cache's cgroups."""
    out = {}
    mem = CG_MEM / (CG_PREFIX + name)

    def rd(p):
        try:
            return int(p.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    out["mem_usage"] = rd(mem / "memory.usage_in_bytes")
    out["mem_peak"] = rd(mem / "memory.max_usage_in_bytes")
    out["failcnt"] = rd(mem / "memory.failcnt")
    out["oom_kill"] = None
    try:
        for line in (mem / "memory.oom_control").read_text().splitlines():
            k, v = line.split()
            if k == "oom_kill":
                out["oom_kill"] = int(v)
    except OSError:
        pass
    try:
        for line in (mem / "memory.stat").read_text().splitlines():
            k, v = line.split()
            if k in ("total_rss", "total_cache", "total_mapped_file", "total_shmem"):
                out[k[len("total_"):]] = int(v)
    except (OSError, ValueError):
        pass
    out["cpu_ns"] = rd(CG_CPU / (CG_PREFIX + name) / "cpuacct.usage")
    if out["cpu_ns"] is None:  # fall back to /proc/<pid>/stat
        tot = 0
        tck = os.sysconf("SC_CLK_TCK")
        for pid in cg_pids(name):
            try:
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                tot += int(f[11]) + int(f[12])
            except (OSError, IndexError, ValueError):
                pass
        out["cpu_ns"] = tot * 1_000_000_000 // tck
    rb = 0
    try:
        for line in (CG_BLK / (CG_PREFIX + name) / "blkio.throttle.io_service_bytes").read_text().splitlines():
            f = line.split()
            if len(f) == 3 and f[1] == "Read":
                rb += int(f[2])
        out["blkio_read"] = rb
    except OSError:
        out["blkio_read"] = None
    return out


def cg_reset_peak(name):
    try:
        (CG_MEM / (CG_PREFIX + name) / "memory.max_usage_in_bytes").write_text("0")
    except OSError:
        pass


def disk_read_bytes():
    """Bytes read from the disk(s) backing /var/tmp (whole-device /proc/diskstats)."""
    tot = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if len(f) > 6 and re.fullmatch(r"(vd[a-z]+|sd[a-z]+|nvme\d+n\d+|xvd[a-z]+)", f[2]):
            tot += int(f[5]) * 512
    return tot


def cpu_list(spec):
    """The CPUs of a taskset list such as "1", "1,3" or "0-2"."""
    cpus = set()
    for part in str(spec).split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def core_busy_ns(spec):
    """CPU time the cores of `spec` (a taskset list) spent busy, everything but idle and iowait
    in /proc/stat, in ns.

    Unlike a cgroup's cpuacct it includes the kernel's own threads on that core, such as the
    block layer's workers, and softirqs. Other work on the core counts too, so it means
    something only on a quiet machine."""
    want = {f"cpu{c}" for c in cpu_list(spec)}
    ticks, seen = 0, set()
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f and f[0] in want:
            # user nice system idle iowait irq softirq steal ...
            ticks += sum(int(x) for i, x in enumerate(f[1:9]) if i not in (3, 4))
            seen.add(f[0])
    if seen != want:
        return None
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def start(name, argv, cgroup=None, cpu=None, env=None, logfile=None, cwd=None):
    """Start argv in its own session, optionally inside cgroup `name` and pinned."""
    cmd = list(argv)
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu)] + cmd
    if NICE:
        cmd = ["nice", "-n", str(NICE)] + cmd
    if cgroup:
        joins = " && ".join(
            f"echo $$ > {root / (CG_PREFIX + cgroup) / 'cgroup.procs'}"
            for root in (CG_MEM, CG_CPU, CG_BLK)
            if (root / (CG_PREFIX + cgroup)).is_dir()
        )
        cmd = ["sh", "-c", f'{joins} && ulimit -n $(ulimit -Hn) && exec "$@"', "sh"] + cmd
    lf = open(logfile, "ab") if logfile else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env, cwd=cwd)
    PROCS.append((name, p))
    return p


def stop(p, grace=5.0):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(5)
    PROCS[:] = [(n, q) for (n, q) in PROCS if q is not p]


def cleanup():
    for _, p in list(PROCS):
        try:
            stop(p, 3)
        except Exception:
            pass
    for name in list(CGROUPS):
        cg_remove(name)


def wait_port(port, timeout=20.0, proc=None):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def http_get(url, timeout=10.0, data=None):
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read(), dict(r.headers)


def origin_stats():
    return json.loads(http_get(f"http://127.0.0.1:{ORIGIN_PORT}/__stats")[1])


def origin_requests():
    return origin_stats()["requests"]


# --------------------------------------------------------------------------
# caches

class Cache:
    name = "?"
    label = "?"

    def __init__(self, args, work):
        self.args = args
        self.port = PORTS[self.name]
        self.dir = work / self.name
        self.proc = None
        self.skip_reason = None

    def available(self):
        return True

    def prepare(self, disk_bytes):
        """Write configs; wipe the cache storage."""
        raise NotImplementedError

    def argv(self):
        raise NotImplementedError

    def env(self):
        return None

    def start(self):
        self.proc = start(self.name, self.argv(), cgroup=self.name, cpu=self.args.cache_cpu,
                          env=self.env(), logfile=self.dir / "server.log", cwd=self.dir)
        if not wait_port(self.port, 30, self.proc):
            tail = ""
            try:
                tail = (self.dir / "server.log").read_text(errors="replace")[-2000:]
            except OSError:
                pass
            raise RuntimeError(f"{self.name} did not start (exit {self.proc.poll()}):\n{tail}")
        # One request through the cache proves the path to the origin works.
        for _ in range(50):
            try:
                st, body, _ = http_get(f"http://127.0.0.1:{self.port}/obj/1k/ready", 5)
                if st == 200 and len(body) == 1024:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} started but does not proxy /obj/1k/ready")

    def storage(self):
        """Paths holding cached objects (removed after the cache stops, unless --keep-storage)."""
        return [self.dir / "cache"]

    def stop(self):
        if self.proc:
            stop(self.proc, 10)
            self.proc = None
        cg_remove(self.name)
        if not self.args.keep_storage:
            for pth in self.storage():
                if pth.is_dir():
                    shutil.rmtree(pth, ignore_errors=True)
                elif pth.exists():
                    pth.unlink()

    def version(self):
        return "?"


class Nginx(Cache):
    name = "nginx"
    label = "nginx (proxy_cache, aio threads)"

    def available(self):
        return shutil.which("nginx") is not None

    def version(self):
        r = subprocess.run(["nginx", "-v"], capture_output=True, text=True)
        return (r.stderr or r.stdout).strip().split("/")[-1]

    def prepare(self, disk_bytes):
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "cache").mkdir(parents=True)
        (self.dir / "tmp").mkdir()
        max_size = disk_bytes // (1 << 20)
        conf = f"""
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 16384;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
thread_pool default threads=16 max_queue=65536;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {self.dir}/tmp/body;
    proxy_temp_path {self.dir}/tmp/proxy;
    fastcgi_temp_path {self.dir}/tmp/fcgi;
    uwsgi_temp_path {self.dir}/tmp/uwsgi;
    scgi_temp_path {self.dir}/tmp/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    sendfile on;
    aio threads;
    directio {self.args.directio};
    directio_alignment 4096;
    output_buffers 2 256k;
    proxy_cache_path {self.dir}/cache levels=1:2 keys_zone=ec:64m max_size={max_size}m
                     inactive=7d use_temp_path=off;
    upstream origin {{ server 127.0.0.1:{ORIGIN_PORT}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{self.port} reuseport backlog=4096;
        location / {{
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache ec;
            proxy_cache_valid 200 1d;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 30s;
            proxy_cache_lock_age 30s;
            proxy_buffering on;
            proxy_buffers 16 64k;
            proxy_max_temp_file_size 0;
        }}
    }}
}}
"""
        (self.dir / "nginx.conf").write_text(conf)

    def argv(self):
        return ["nginx", "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")]


class Varnish(Cache):
    name = "varnish"
    label = "Varnish (file storage)"

    def available(self):
        return shutil.which("varnishd") is not None

    def version(self):
        r = subprocess.run(["varnishd", "-V"], capture_output=True, text=True)
        m = re.search(r"varnish-([\d.]+)", r.stderr + r.stdout)
        return m.group(1) if m else "?"

    def prepare(self, disk_bytes):
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        (self.dir / "default.vcl").write_text(f"""vcl 4.1;
backend origin {{ .host = "127.0.0.1"; .port = "{ORIGIN_PORT}"; }}
sub vcl_recv {{ set req.backend_hint = origin; }}
""")
        self.disk_bytes = disk_bytes

    def storage(self):
        return [self.dir / "storage.bin"]

    def argv(self):
        return ["varnishd", "-F", "-j", "none", "-n", str(self.dir / "n"),
                "-a", f"127.0.0.1:{self.port}", "-T", "127.0.0.1:0",
                "-f", str(self.dir / "default.vcl"),
                "-s", f"file,{self.dir}/storage.bin,{self.disk_bytes // (1 << 20)}M",
                "-p", "thread_pools=1", "-p", "thread_pool_min=600", "-p", "thread_pool_max=5000",
                "-p", "http_resp_hdr_len=8k"]


class TrafficServer(Cache):
    name = "ats"
    label = "Traffic Server"

    def available(self):
        return shutil.which("traffic_server") is not None

    def version(self):
        r = subprocess.run(["traffic_server", "-V"], capture_output=True, text=True)
        m = re.search(r"Traffic Server ([\d.]+)", r.stdout + r.stderr)
        return m.group(1) if m else "?"

    def prepare(self, disk_bytes):
        shutil.rmtree(self.dir, ignore_errors=True)
        etc = self.dir / "etc"
        shutil.copytree("/etc/trafficserver", etc)
        for d in ("run", "log", "cache", "state", "data"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        (self.dir / "runroot.yaml").write_text(f"""prefix: {self.dir}
exec_prefix: /usr
bindir: /usr/bin
sbindir: /usr/sbin
sysconfdir: {etc}
datadir: {self.dir}/data
includedir: /usr/include
libdir: /usr/lib/trafficserver
libexecdir: /usr/lib/trafficserver/modules
localstatedir: {self.dir}/state
runtimedir: {self.dir}/run
logdir: {self.dir}/log
cachedir: {self.dir}/cache
""")
        ram = self.args.ats_ram_cache
        rec = f"""CONFIG proxy.config.http.server_ports STRING {self.port}
CONFIG proxy.config.admin.user_id STRING #-1
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT 1
CONFIG proxy.config.exec_thread.affinity INT 0
CONFIG proxy.config.accept_threads INT 1
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.cache.threads_per_disk INT 16
CONFIG proxy.config.http.cache.http INT 1
CONFIG proxy.config.http.cache.required_headers INT 2
CONFIG proxy.config.http.insert_request_via_str INT 0
CONFIG proxy.config.http.insert_response_via_str INT 0
CONFIG proxy.config.http.insert_client_ip INT 0
CONFIG proxy.config.http.insert_squid_x_forwarded_for INT 0
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT 120
CONFIG proxy.config.http.keep_alive_no_activity_timeout_out INT 120
CONFIG proxy.config.net.connections_throttle INT 16000
CONFIG proxy.config.net.max_connections_in INT 16000
CONFIG proxy.config.cache.ram_cache.size INT {ram}
CONFIG proxy.config.cache.ram_cache_cutoff INT 4194304
CONFIG proxy.config.cache.agg_write_backlog INT 33554432
CONFIG proxy.config.http.flow_control.enabled INT 1
CONFIG proxy.config.http.flow_control.high_water INT 262144
CONFIG proxy.config.http.flow_control.low_water INT 65536
CONFIG proxy.config.cache.target_fragment_size INT {self.args.ats_fragment}
CONFIG proxy.config.cache.max_doc_size INT 0
CONFIG proxy.config.cache.min_average_object_size INT 4096
CONFIG proxy.config.cache.enable_read_while_writer INT 1
CONFIG proxy.config.http.cache.open_read_retry_time INT 10
CONFIG proxy.config.http.cache.max_open_read_retries INT 100
CONFIG proxy.config.http.cache.open_write_fail_action INT 0
CONFIG proxy.config.http.background_fill_completed_threshold FLOAT 0.0
CONFIG proxy.config.log.logging_enabled INT 0
CONFIG proxy.config.diags.debug.enabled INT 0
CONFIG proxy.config.url_remap.remap_required INT 1
CONFIG proxy.config.url_remap.pristine_host_hdr INT 0
CONFIG proxy.config.reverse_proxy.enabled INT 1
CONFIG proxy.config.body_factory.template_sets_dir STRING {etc}/body_factory
"""
        (etc / "records.config").write_text(rec)
        (etc / "storage.config").write_text(f"{self.dir}/cache {disk_bytes // (1 << 20)}M\n")
        (etc / "volume.config").write_text("")
        (etc / "hosting.config").write_text("")
        (etc / "remap.config").write_text(
            f"map http://127.0.0.1:{self.port}/ http://127.0.0.1:{ORIGIN_PORT}/\n"
            f"map / http://127.0.0.1:{ORIGIN_PORT}/\n")
        (etc / "plugin.config").write_text("")
        (etc / "ip_allow.yaml").write_text("""ip_allow:
  - apply: in
    ip_addrs: 127.0.0.0/8
    action: allow
    methods: ALL
  - apply: out
    ip_addrs: 127.0.0.0/8
    action: allow
    methods: ALL
""")

    def argv(self):
        return ["traffic_server", f"--run-root={self.dir}/runroot.yaml"]

    def env(self):
        e = dict(os.environ)
        e["TS_RUNROOT"] = str(self.dir / "runroot.yaml")
        return e


class EdgeCache(Cache):
    name = "edgecache"
    label = "EdgeCache"
    admin_port = EDGE_ADMIN_PORT
    bin_key = "dataplane"

    def binary(self):
        return Path(self.args.target_dir) / "release" / "edgecache-dataplane"

    def available(self):
        if not self.binary().exists():
            self.skip_reason = f"{self.binary()} not built (cargo build --release -p edgecache-dataplane failed or the crate is not ready)"
            return False
        return True

    def version(self):
        r = subprocess.run([str(self.binary()), "--version"], capture_output=True, text=True)
        return (r.stdout.strip() or "?").split()[-1]

    def prepare(self, disk_bytes):
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "cache").mkdir(parents=True)
        self.disk_bytes = disk_bytes

    def argv(self):
        a = [str(BINS.get(self.bin_key) or self.binary()), "serve",
             "--origin", f"http://127.0.0.1:{ORIGIN_PORT}",
             "--listen", f"127.0.0.1:{self.port}",
             "--admin", f"127.0.0.1:{self.admin_port}",
             "--cache-dir", str(self.dir / "cache"),
             "--cache-size", f"{self.disk_bytes // (1 << 20)}MiB",
             "--workers", str(self.args.edge_workers),
             # Access logs are off in every cache compared (nginx `access_log off`, ATS
             # `logging_enabled 0`, Varnish without varnishncsa).
             "--access-log", "off"]
        # EdgeCache runs with its shipped O_DIRECT threshold (4 KiB, nginx's `directio 4k` here)
        # unless --edge-directio sets another.
        if self.args.edge_directio:
            a += ["--direct-io-threshold",
                  self.args.edge_directio.upper().replace("K", "KiB").replace("M", "MiB")]
        if self.args.edge_config:
            a += ["--config", self.args.edge_config]
        return a


class EdgeCacheB(EdgeCache):
    """A second EdgeCache build (--edge-b DIR, a cargo target directory), measured in the same
    run and the same rounds as the first: an A/B of two binaries that the VM's drift between
    separate runs cannot blur."""
    name = "edgecache-b"
    label = "EdgeCache (B)"
    admin_port = EDGE_B_ADMIN_PORT
    bin_key = "dataplane-b"

    def binary(self):
        return Path(self.args.edge_b or "-") / "release" / "edgecache-dataplane"

    def available(self):
        if not self.args.edge_b:
            self.skip_reason = "no --edge-b DIR given"
            return False
        return super().available()


CACHE_TYPES = {c.name: c for c in (EdgeCache, Nginx, Varnish, TrafficServer, EdgeCacheB)}


# --------------------------------------------------------------------------
# load

def build_srcaddr(d):
    """The load generators' source-address shim (harness/srcaddr.c), built into `d`."""
    so = Path(d) / "srcaddr.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(so), str(HERE / "srcaddr.c"), "-ldl"],
                   check=True, capture_output=True)
    BINS["srcaddr"] = so
    return so


def client_env(args, first=0, preload=()):
    """A load generator's environment: with --sources N (N > 1), the shim that spreads its
    connections over N loopback source addresses (127.0.0.2 and up, from the `first`), so a
    cache sees N clients, not one; `preload`: more LD_PRELOAD libraries."""
    e = dict(os.environ)
    libs = [str(x) for x in preload]
    if getattr(args, "sources", 0) > 1 and BINS.get("srcaddr"):
        libs.append(str(BINS["srcaddr"]))
        e["EC_SRC_COUNT"] = str(args.sources)
        e["EC_SRC_FIRST"] = str(first)
    if libs:
        e["LD_PRELOAD"] = " ".join(libs)
    return e


def loadgen(args, *a, timeout=900):
    exe = BINS.get("loadgen") or Path(args.target_dir) / "release" / "edgecache-loadgen"
    cmd = ["nice", "-n", str(NICE), "taskset", "-c", str(args.client_cpu), str(exe)] + [str(x) for x in a]
    r = subprocess.run(["sh", "-c", 'ulimit -n $(ulimit -Hn) && exec "$@"', "sh"] + cmd,
                       capture_output=True, text=True, timeout=timeout, env=client_env(args))
    if r.returncode != 0:
        raise RuntimeError(f"loadgen failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_wrk(args, port, size, count, dist, duration, conns=None, path_lua=None):
    conns = conns or args.connections
    cmd = ["nice", "-n", str(NICE), "taskset", "-c", str(args.client_cpu), "wrk", "-t1", f"-c{conns}", f"-d{duration}s",
           "--timeout", "10s", "-s", str(path_lua or HERE / "objects.lua"),
           f"http://127.0.0.1:{port}", "--", object_size(size), str(count), dist, str(args.zipf_s),
           str(int(time.time()))]
    r = subprocess.run(["sh", "-c", 'ulimit -n $(ulimit -Hn) && exec "$@"', "sh"] + cmd,
                       capture_output=True, text=True, timeout=duration + 60, env=client_env(args))
    for line in r.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[len("WRKJSON "):])
    raise RuntimeError(f"wrk produced no result: rc={r.returncode} {r.stdout[-1000:]} {r.stderr[-1000:]}")


def measure_round(args, cache, size, count, dist, rnd):
    name = cache.name
    cg_reset_peak(name)
    o0 = origin_requests()
    pin_for_round(cache)
    c0 = cg_read(name)
    k0 = core_busy_ns(args.cache_cpu)
    d0 = disk_read_bytes()
    t0 = time.time()
    w = run_wrk(args, cache.port, size, count, dist, args.duration)
    t1 = time.time()
    k1 = core_busy_ns(args.cache_cpu)
    c1 = cg_read(name)
    d1 = disk_read_bytes()
    o1 = origin_requests()
    secs = w["duration_us"] / 1e6
    reqs = w["requests"]
    fetches = o1 - o0
    hits = max(reqs - fetches, 0)
    cpu_s = ((c1["cpu_ns"] or 0) - (c0["cpu_ns"] or 0)) / 1e9
    errors = sum(w[k] for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
    blk = None
    if c1.get("blkio_read") is not None and c0.get("blkio_read") is not None:
        blk = (c1["blkio_read"] - c0["blkio_read"]) / (t1 - t0) / 1e6
    return {
        "kind": "round", "cache": name, "size": size, "object_size": object_size(size), "count": count,
        "dist": dist, "round": rnd, "connections": args.connections, "sources": args.sources,
        "mem_limit_mib": cache_mem(args, name) >> 20, "seconds": secs,
        "requests": reqs, "req_per_s": reqs / secs, "mb_per_s": w["bytes"] / secs / 1e6,
        "p50_ms": w["p50_us"] / 1e3, "p99_ms": w["p99_us"] / 1e3, "p999_ms": w["p999_us"] / 1e3,
        "mean_ms": w["lat_mean_us"] / 1e3, "max_ms": w["lat_max_us"] / 1e3,
        "errors": errors, "err_detail": {k: w[k] for k in w if k.startswith("err_")},
        "origin_fetches": fetches, "hit_ratio": hits / reqs if reqs else 0.0,
        "cpu_s": cpu_s, "cpu_cores": cpu_s / (t1 - t0),
        "cpu_us_per_hit": cpu_s * 1e6 / hits if hits else None,
        "cpu_us_per_req": cpu_s * 1e6 / reqs if reqs else None,
        "core_us_per_hit": (k1 - k0) / 1e3 / hits if hits and k0 is not None and k1 is not None else None,
        "disk_read_mb_s": (d1 - d0) / (t1 - t0) / 1e6,
        "cgroup_read_mb_s": blk,
        "mem_peak_mib": (c1["mem_peak"] or 0) / 2**20,
        "mem_usage_mib": (c1["mem_usage"] or 0) / 2**20,
        "rss_mib": (c1.get("rss") or 0) / 2**20, "page_cache_mib": (c1.get("cache") or 0) / 2**20,
        "failcnt_delta": (c1["failcnt"] or 0) - (c0["failcnt"] or 0),
        "failcnt": c1["failcnt"], "oom_kill": c1["oom_kill"],
    }


def object_count(args, size):
    _, full, quick = SIZES[size]
    return args.count or (quick if args.quick else full)


def storage_bytes(args, size):
    """Disk storage each cache gets for `size`: twice the objects' bytes (the row's set and the
    miss rounds' new ones) plus slack, >= 1 GiB."""
    count = object_count(args, size) + getattr(args, "miss_rounds", 0) * miss_round_count(args, size)
    return max(2 * SIZES[size][0] * count + (256 << 20), 1 << 30)


def miss_round_count(args, size):
    """New objects each miss round asks every cache for (a fifth of the row's set: a pass long
    enough for its rate to be more than its first connections' start)."""
    return max(1, object_count(args, size) // 5)


def check_disk_space(args, work, sizes, ncaches):
    """Stop before anything starts when `work` cannot hold what the run writes there at once:
    every cache's storage for the largest size (or fio's file, removed before the caches start),
    plus 1 GiB. A cache that cannot allocate its storage would otherwise drop out of the rounds."""
    need = max([storage_bytes(args, s) * ncaches for s in sizes] + [0 if args.skip_fio else 2 << 30])
    free = shutil.disk_usage(work).free
    if free < need + (1 << 30):
        sys.exit(f"bench: {work} has {free / 2**30:.1f} GiB free; this run needs about "
                 f"{(need + (1 << 30)) / 2**30:.1f} GiB there (caches' storage, fio's file): "
                 f"free some space or pass --work on a larger disk")


def warm(args, cache, size, count, emit, host=None):
    """Passes over every id until a pass makes no origin fetch. The first pass is
    the miss path (cold cache). `host`: the Host header to warm for (default the target;
    the HTTPS run warms for the name its clients send, harness/tls.py)."""
    for i in range(1, args.max_warm_passes + 1):
        o0 = origin_requests()
        r = pass_over(args, cache, size, count, args.warm_conns if i == 1 else max(1, args.warm_conns // 4), host)
        fetches = origin_requests() - o0
        r.update({"kind": "warm", "cache": cache.name, "size": size, "size_bytes": r.get("size"), "pass": i,
                  "origin_fetches": fetches, "cgroup": cg_read(cache.name)})
        emit(r)
        log(f"  warm {cache.name} {size} pass {i}: {r['ok']}/{count} ok, {r['bad_body']} bad bodies, "
            f"{r['errors']} errors, {fetches} origin fetches, {r['req_per_s']:.0f} req/s, "
            f"{r['mb_per_s']:.0f} MB/s" + (f", first error: {r['first_error']}" if r.get("first_error") else ""))
        if i == 1:
            m = dict(r)
            m["kind"] = "miss"
            emit(m)
        if cache.proc and cache.proc.poll() is not None:
            cg = cg_read(cache.name)
            emit({"kind": "died", "cache": cache.name, "size": size, "dist": "warm-up", "round": i - 1,
                  "exit": cache.proc.poll(), "cgroup": cg})
            raise RuntimeError(f"died during warm-up pass {i} (exit {cache.proc.poll()}, oom_kill "
                               f"{cg.get('oom_kill')}, failcnt {cg.get('failcnt')})")
        if r.get("aborted"):
            raise RuntimeError(f"warm-up pass {i} aborted: {r.get('first_error')}")
        if fetches == 0 and r["ok"] == count:
            if size in RESIDENT:
                resident_passes(args, cache, size, count)
            return True
    return False


def pass_over(args, cache, size, count, conns, host=None, start=0):
    """One loadgen pass over ids start..start+count of row `size` (the loadgen's JSON result)."""
    return loadgen(args, "pass", "--target", f"127.0.0.1:{cache.port}", "--size", object_size(size),
                   "--count", count, "--start", start, "--conns", conns, "--timeout-s", args.warm_timeout,
                   *(["--host", host] if host else []))


def miss_rounds(args, live, size, count, emit, ensure_origin):
    """Misses measured as the hit rows are: `--miss-rounds` interleaved rounds (A B C D, D C B A,
    ...), each a pass of new ids (beyond the row's set and earlier rounds') with the warm-up's
    connections, so the VM's swings between one cache's moment and another's fall into every
    cache's rounds alike instead of deciding a single first pass. Run after the hit rounds (the
    new objects cannot disturb those); the storage is sized for them (`storage_bytes`)."""
    m = miss_round_count(args, size)
    for rnd in range(args.miss_rounds):
        order = live if rnd % 2 == 0 else list(reversed(live))
        log(f"  miss round {rnd + 1}/{args.miss_rounds}: {m:,} new ids each, {' '.join(c.name for c in order)}")
        for c in order:
            if c.proc and c.proc.poll() is not None:
                continue
            ensure_origin()
            o0 = origin_requests()
            c0, k0, t0 = cg_read(c.name), core_busy_ns(args.cache_cpu), time.time()
            try:
                r = pass_over(args, c, size, m, args.warm_conns, start=count + rnd * m)
            except Exception as e:
                log(f"    {c.name}: miss round failed: {e}")
                emit({"kind": "error", "cache": c.name, "size": size, "dist": "miss", "round": rnd,
                      "error": str(e)[:2000]})
                continue
            t1, k1, c1 = time.time(), core_busy_ns(args.cache_cpu), cg_read(c.name)
            fetches = origin_requests() - o0
            # The cache's CPU over the pass (its start-up and connections included).
            cpu_s = ((c1["cpu_ns"] or 0) - (c0["cpu_ns"] or 0)) / 1e9
            r.update({"kind": "miss_round", "cache": c.name, "size": size, "size_bytes": r.get("size"),
                      "round": rnd, "start": count + rnd * m, "origin_fetches": fetches,
                      "cpu_s": cpu_s, "cpu_cores": cpu_s / (t1 - t0),
                      "cpu_us_per_miss": cpu_s * 1e6 / m,
                      "core_us_per_miss": (k1 - k0) / 1e3 / m if k0 is not None and k1 is not None else None})
            emit(r)
            log(f"    {c.name:9s} {r['req_per_s']:9.0f} req/s {r['ok']}/{m} ok, {r['bad_body']} bad bodies, "
                f"{r['errors']} errors, {fetches} origin fetches, cpu {r['cpu_cores']:.2f} cores "
                f"{r['cpu_us_per_miss']:.1f} us/miss")


def resident_passes(args, cache, size, count):
    """RESIDENT_PASSES more passes over every id of a resident row, after its warm-up."""
    for i in range(RESIDENT_PASSES):
        r = pass_over(args, cache, size, count, max(1, args.warm_conns // 4))
        log(f"  resident pass {i + 1} {cache.name} {size}: {r['ok']}/{count} ok, {r['req_per_s']:.0f} req/s")


def drop_caches():
    try:
        subprocess.run(["sync"], timeout=120)
        Path("/proc/sys/vm/drop_caches").write_text("1")
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"warning: drop_caches: {e}")


# --------------------------------------------------------------------------
# machine limits

def fio_runs(args, emit):
    try:
        _fio_runs(args, emit)
    finally:
        if not args.keep_storage:
            (Path(args.work) / "fio" / "fio.dat").unlink(missing_ok=True)


def _fio_runs(args, emit):
    fdir = Path(args.work) / "fio"
    fdir.mkdir(parents=True, exist_ok=True)
    f = fdir / "fio.dat"
    size = "512M" if args.quick else "2G"
    rt = 3 if args.quick else 10
    for bs in ("4k", "128k", "1m"):
        for eng in ("io_uring", "libaio", "psync"):
            depth = 1 if eng == "psync" else 32
            jobs = 4 if eng == "psync" else 1
            cmd = ["taskset", "-c", str(args.cache_cpu), "fio", "--name=randread", f"--filename={f}",
                   f"--size={size}", "--direct=1", "--rw=randread", f"--bs={bs}", f"--ioengine={eng}",
                   f"--iodepth={depth}", f"--numjobs={jobs}", "--group_reporting", f"--runtime={rt}",
                   "--time_based", "--output-format=json"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            try:
                j = json.loads(r.stdout[r.stdout.index("{"):])
                rd = j["jobs"][0]["read"]
                res = {"kind": "fio", "bs": bs, "engine": eng, "iodepth": depth, "numjobs": jobs,
                       "mb_per_s": rd["bw_bytes"] / 1e6, "iops": rd["iops"],
                       "lat_p99_ms": rd.get("clat_ns", {}).get("percentile", {}).get("99.000000", 0) / 1e6,
                       "cpu_sys": j["jobs"][0].get("sys_cpu"), "cpu_usr": j["jobs"][0].get("usr_cpu")}
            except (ValueError, KeyError, IndexError) as e:
                res = {"kind": "fio", "bs": bs, "engine": eng, "error": f"{e}: {r.stderr[-500:]}"}
            emit(res)
            log(f"  fio {bs} {eng}: " + (f"{res['mb_per_s']:.0f} MB/s, {res['iops']:.0f} IOPS"
                                           if "mb_per_s" in res else res["error"]))


def start_ceiling(args, work, sizes):
    """nginx serving one file per object size of `sizes` from RAM (tmpfs), in cgroup `ceiling` on
    the caches' core; returns the stop function, or None when it did not start."""
    d = Path(work) / "ceiling"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    shm = Path("/dev/shm/ecbench-ceiling")
    shutil.rmtree(shm, ignore_errors=True)
    (shm / "obj").mkdir(parents=True)
    for s in sizes:
        n = SIZES[s][0]
        sub = shm / "obj" / s
        sub.mkdir()
        (sub / "0").write_bytes(os.urandom(n))
    (d / "nginx.conf").write_text(f"""daemon off; master_process on; worker_processes 1;
pid {d}/nginx.pid; error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{ access_log off; sendfile on; keepalive_requests 1000000; open_file_cache max=100;
  server {{ listen 127.0.0.1:{CEILING_PORT} backlog=4096; root {shm}; }} }}
""")
    cg_create("ceiling", cache_mem(args, "nginx"))
    p = start("ceiling", ["nginx", "-p", str(d), "-c", str(d / "nginx.conf")], cgroup="ceiling",
              cpu=args.cache_cpu, logfile=d / "server.log")

    def stop_ceiling():
        stop(p)
        cg_remove("ceiling")
        shutil.rmtree(shm, ignore_errors=True)

    if not wait_port(CEILING_PORT, 10, p):
        log("  ceiling nginx did not start")
        stop_ceiling()
        return None
    return stop_ceiling


def measure_ceiling(args, size, duration):
    """One wrk run against the started ceiling for object size `size`."""
    c0 = cg_read("ceiling")
    t0 = time.time()
    w = run_wrk(args, CEILING_PORT, size, 1, "uniform", duration)
    cpu = ((cg_read("ceiling")["cpu_ns"] or 0) - (c0["cpu_ns"] or 0)) / 1e9
    secs = w["duration_us"] / 1e6
    return {"size": size, "req_per_s": w["requests"] / secs,
            "mb_per_s": w["bytes"] / secs / 1e6, "p50_ms": w["p50_us"] / 1e3,
            "p99_ms": w["p99_us"] / 1e3, "cpu_cores": cpu / (time.time() - t0),
            "cpu_us_per_req": cpu * 1e6 / max(w["requests"], 1)}


def ceiling_runs(args, work, sizes, emit):
    """Loopback ceiling: nginx serving one file per size from RAM (tmpfs), once per size before
    the rows (the RAM rows also measure it in each of their rounds, `ceiling_round`)."""
    stop_ceiling = start_ceiling(args, work, sizes)
    if stop_ceiling is None:
        return
    try:
        for s in sizes:
            res = {"kind": "ceiling", **measure_ceiling(args, s, max(3, args.duration // 2))}
            emit(res)
            log(f"  ceiling {s}: {res['req_per_s']:.0f} req/s, {res['mb_per_s']:.0f} MB/s, "
                f"{res['cpu_us_per_req']:.1f} us CPU/req")
    finally:
        stop_ceiling()


def ceiling_round(args, row, dist, rnd, emit):
    """The ceiling measured in a round of RAM row `row`, beside the caches: the machine's speed
    drifts over a run, and a RAM row's ratio to a ceiling measured minutes before would carry
    that drift (kind `ceiling_round`, the round's duration)."""
    try:
        res = measure_ceiling(args, object_size(row), args.duration)
    except Exception as e:
        log(f"  ceiling: round failed: {e}")
        return
    res.update({"kind": "ceiling_round", "row": row, "dist": dist, "round": rnd})
    emit(res)
    log(f"    {'ceiling':9s} {res['req_per_s']:9.0f} req/s {res['mb_per_s']:7.0f} MB/s "
        f"p50 {res['p50_ms']:6.2f} p99 {res['p99_ms']:7.2f} ms cpu {res['cpu_cores']:.2f} cores "
        f"{res['cpu_us_per_req']:.1f} us/req")


def coalesce_burst(args, cache, tag):
    """One burst of `args.coalesce_n` simultaneous requests for a new cold key: the loadgen's
    result plus the origin's fetch count for that key and the origin's own time."""
    key = f"/obj/{args.coalesce_size}/coalesce-{cache.name}-{tag}-{int(time.time() * 1000)}"
    path = f"{key}?delay_ms={args.coalesce_delay_ms}"
    # The origin's own time for this object (a direct request, not counted below).
    t = time.time()
    http_get(f"http://127.0.0.1:{ORIGIN_PORT}/obj/{args.coalesce_size}/direct-{tag}-{int(t * 1000)}"
             f"?delay_ms={args.coalesce_delay_ms}")
    origin_ms = (time.time() - t) * 1e3
    r = loadgen(args, "burst", "--target", f"127.0.0.1:{cache.port}", "--path", path,
                "--n", args.coalesce_n, "--timeout-s", 60, timeout=120)
    st = json.loads(http_get(f"http://127.0.0.1:{ORIGIN_PORT}/__stats?path={path.replace('&', '%26')}")[1])
    r.update({"origin_fetches": st.get("path_requests"), "origin_ms": origin_ms,
              "added_p99_ms": r["latency"]["p99_ms"] - origin_ms})
    return r


def coalesce_run(args, cache, emit):
    # Two bursts on two cold keys, one after the other, against the same freshly started cache.
    # The first also pays for the fresh process (page faults of 1,000 new connections' buffers,
    # first allocations): it is kept as `first_burst`. The second is the steady state an edge
    # lives in and is the one reported; both must make exactly one origin fetch.
    first = coalesce_burst(args, cache, "first")
    r = coalesce_burst(args, cache, "steady")
    alive = cache.proc is None or cache.proc.poll() is None
    r.update({"kind": "coalesce", "cache": cache.name, "size": args.coalesce_size, "survived": alive,
              "first_burst": {k: first[k] for k in ("ok", "errors", "origin_fetches", "origin_ms",
                                                     "added_p99_ms", "latency", "ttfb")},
              "cgroup": cg_read(cache.name)})
    emit(r)
    log(f"  coalesce {cache.name}: {r['origin_fetches']} origin fetches for {r['ok']}/{r['n']} ok "
        f"({r['errors']} errors, {r['connect_errors']} connect errors), latency p50 "
        f"{r['latency']['p50_ms']:.0f} ms p99 {r['latency']['p99_ms']:.0f} ms "
        f"(origin alone {r['origin_ms']:.0f} ms), first byte p99 {r['ttfb']['p99_ms']:.0f} ms; "
        f"first burst of the fresh process: {first['origin_fetches']} fetches, "
        f"+{first['added_p99_ms']:.0f} ms p99")


# --------------------------------------------------------------------------

def machine_info(caches):
    def sh(c):
        try:
            return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return ""
    return {
        "kind": "meta",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host_kernel": platform.release(),
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "cores": os.cpu_count(),
        "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "disk": sh("d=$(df --output=source /var/tmp | tail -1); echo \"$d $(lsblk -dn -o SIZE,MODEL $d 2>/dev/null | tr -s ' ')\""),
        "os": sh(". /etc/os-release; echo $PRETTY_NAME"),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "versions": {**{c.name: c.version() for c in caches},
                     "wrk": sh("wrk -v 2>&1 | head -1 | cut -d' ' -f1-2"), "fio": sh("fio --version"),
                     "rustc": sh("rustc --version")},
    }



def begin_run(args, ports):
    """What every benchmark run does first: root, its work directory, the one-run-at-a-time
    lock, free ports, its results and log files, the cleanup at exit, no stale cgroups.
    Returns the work directory, `emit` (one JSON record to the results) and the results path."""
    global LOG
    if os.geteuid() != 0:
        sys.exit("run as root (cgroups, drop_caches)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    # One run at a time: runs share ports, cgroup names and the work directory, and a run's
    # start-up cleanup kills whatever is left in ecbench-* cgroups.
    lock = open("/var/tmp/ec-bench.lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        sys.exit(f"another benchmark run holds /var/tmp/ec-bench.lock ({lock.read().strip()}); "
                 "wait for it to finish")
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}, run {args.run_id}, started {time.strftime('%H:%M:%S')}\n")
    lock.flush()
    RUN["lock"] = lock  # held until the process exits
    busy = [p for p in ports if wait_port(p, 0.2)]
    if busy:
        sys.exit(f"ports {busy} on 127.0.0.1 are already in use; stop what listens there first")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / f"{args.run_id}.jsonl"
    out = open(out_path, "a")
    LOG = open(RESULTS / f"{args.run_id}.log", "a")

    def emit(rec):
        rec = dict(rec)
        rec.setdefault("run_id", args.run_id)
        rec.setdefault("quick", args.quick)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    emit.close = out.close
    atexit.register(cleanup)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda *_: sys.exit(130))
    # Stale cgroups from an interrupted run.
    for root in (CG_MEM, CG_CPU, CG_BLK):
        if root.is_dir():
            for d in root.glob(CG_PREFIX + "*"):
                cg_remove(d.name[len(CG_PREFIX):])
    return work, emit, out_path


def copy_binaries(args, work):
    """Private copies of our binaries under neutral names, so that a name-based kill of
    "edgecache-*" processes elsewhere on a shared machine does not hit the benchmark; and the
    load generators' source-address shim."""
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    for src, dst in (("edgecache-origin", "ecb-origin"), ("edgecache-loadgen", "ecb-loadgen"),
                     ("edgecache-dataplane", "ecb-dataplane")):
        f = Path(args.target_dir) / "release" / src
        if f.exists():
            shutil.copy2(f, bindir / dst)
    BINS.update({"origin": bindir / "ecb-origin", "loadgen": bindir / "ecb-loadgen",
                 "dataplane": bindir / "ecb-dataplane"})
    # compress.py has no second build (--edge-b).
    if getattr(args, "edge_b", None):
        shutil.copy2(Path(args.edge_b) / "release" / "edgecache-dataplane", bindir / "ecb-dataplane-b")
        BINS["dataplane-b"] = bindir / "ecb-dataplane-b"
    build_srcaddr(bindir)


def origin_keeper(work, emit, extra=()):
    """Start the origin (with `extra` arguments); returns the function that restarts it when it
    died (logged)."""
    origin = {"p": None}

    def ensure_origin():
        if origin["p"] is not None and origin["p"].poll() is None:
            return
        if origin["p"] is not None:
            log(f"WARNING: the origin exited ({origin['p'].poll()}); restarting it")
            emit({"kind": "origin_restart", "exit": origin["p"].poll()})
        origin["p"] = start("origin", [str(BINS["origin"]), "--listen", f"127.0.0.1:{ORIGIN_PORT}",
                                       "--threads", "2", "--max-age", "86400", *extra],
                            logfile=work / "origin.log")
        if not wait_port(ORIGIN_PORT, 10, origin["p"]):
            sys.exit(f"origin did not start, see {work / 'origin.log'}")
    ensure_origin.stop = lambda: stop(origin["p"])
    return ensure_origin

def main():
    global NICE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small object sets, short rounds")
    ap.add_argument("--caches", default="edgecache,nginx,varnish,ats",
                    help="comma list from edgecache,nginx,varnish,ats (and edgecache-b with --edge-b)")
    ap.add_argument("--sizes", default="4k,4k-ram,100k,1m",
                    help="comma list of rows from 4k,4k-ram,100k,1m (4k-ram: 4 KiB hits from RAM, all resident)")
    ap.add_argument("--dists", default="uniform,zipf")
    ap.add_argument("--count", type=int, help="objects per size (overrides the set sizes)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, help="seconds per wrk round (default 20, quick 5)")
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--sources", type=int, default=SOURCES,
                    help="loopback source addresses the load generators spread their connections over "
                         "(harness/srcaddr.c; default 1: all from 127.0.0.1)")
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--mem-limit", type=int, default=None,
                    help="cgroup memory limit of every cache, bytes (default: each its own, MEM_MIB: "
                         + ", ".join(f"{k} {v} MiB" for k, v in MEM_MIB.items()) + ")")
    ap.add_argument("--mem", type=parse_mem, default={},
                    help="memory of some caches, MiB, over the defaults and --mem-limit: e.g. ats=1024,nginx=512")
    ap.add_argument("--cache-cpu", default="1",
                    help="CPUs of the caches, as taskset -c takes them (1, or 0,1 to share both)")
    ap.add_argument("--client-cpu", default="0", help="CPUs of the load generators (taskset -c)")
    ap.add_argument("--work", default="/var/tmp/ec-bench", help="cache storage and logs (on the disk)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", str(REPO / "target")))
    ap.add_argument("--edge-b", metavar="DIR",
                    help="cargo target directory of a second EdgeCache build, cache edgecache-b in "
                         "--caches: both measured in the same rounds (an A/B of two binaries)")
    ap.add_argument("--warm-conns", type=int, default=32)
    ap.add_argument("--warm-timeout", type=int, default=900)
    ap.add_argument("--max-warm-passes", type=int, default=10)
    ap.add_argument("--miss-rounds", type=int, default=3,
                    help="interleaved miss rounds after a row's hit rounds, each a pass of a fifth of the "
                         "row's set in new ids (0: the first warm-up pass alone measures misses)")
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--keep-storage", action="store_true",
                    help="keep the caches' storage and fio's file under --work after the run")
    ap.add_argument("--skip-fio", action="store_true")
    ap.add_argument("--skip-ceiling", action="store_true")
    ap.add_argument("--skip-coalesce", action="store_true")
    ap.add_argument("--skip-rounds", action="store_true")
    ap.add_argument("--coalesce-n", type=int, default=1000)
    ap.add_argument("--coalesce-delay-ms", type=int, default=200)
    ap.add_argument("--coalesce-size", default="4k", help="object size of the coalescing key")
    ap.add_argument("--directio", "--nginx-directio", dest="directio", default="4k",
                    help="O_DIRECT threshold for nginx (`directio`); multiple of 4k")
    ap.add_argument("--edge-directio", default=None,
                    help="EdgeCache's --direct-io-threshold (default: unset, its shipped 4KiB)")
    ap.add_argument("--ats-ram-cache", type=int, default=16 << 20)
    ap.add_argument("--ats-fragment", type=int, default=256 << 10,
                    help="ATS target_fragment_size (the Debian default 1 MiB gets ATS OOM-killed at 1m x -c256 in 256 MiB)")
    ap.add_argument("--edge-workers", type=int, default=1)
    ap.add_argument("--edge-config", default=None)
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--nice", type=int, default=0,
                    help="nice value for the caches and wrk (e.g. -10 on a machine shared with builds)")
    ap.add_argument("--run-id", default=time.strftime("%Y%m%d-%H%M%S"))
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 5 if args.quick else 20

    NICE = args.nice
    work, emit, out_path = begin_run(args, [ORIGIN_PORT, CEILING_PORT, EDGE_ADMIN_PORT, EDGE_B_ADMIN_PORT,
                                            *PORTS.values()])

    sizes = [s for s in args.sizes.split(",") if s]  # "" = no hit phases (e.g. coalescing only)
    for s in sizes:
        if s not in SIZES:
            sys.exit(f"unknown size {s}")
    dists = [d for d in args.dists.split(",") if d]
    caches = []
    for n in [c for c in args.caches.split(",") if c]:
        if n not in CACHE_TYPES:
            sys.exit(f"unknown cache {n}")
        c = CACHE_TYPES[n](args, work)
        if c.available():
            caches.append(c)
        else:
            log(f"SKIPPED {n}: {c.skip_reason or 'not installed'}")
            emit({"kind": "skipped", "cache": n, "reason": c.skip_reason or "not installed"})
    check_disk_space(args, work, sizes, len(caches))
    meta = machine_info(caches)
    meta.update({"args": vars(args), "mem_mib": {c.name: cache_mem(args, c.name) >> 20 for c in caches},
                 "ceiling_mem_mib": cache_mem(args, "nginx") >> 20})
    emit(meta)
    log(f"run {args.run_id}: caches {[c.name for c in caches]}, rows {sizes}, dists {dists}, "
        f"{args.rounds} rounds x {args.duration}s, -c{args.connections}; results -> {out_path}")
    log("memory: " + ", ".join(f"{n} {m} MiB" for n, m in meta["mem_mib"].items()))
    log("clients: " + ("every connection from 127.0.0.1 (one client address)" if args.sources <= 1
                       else f"connections spread over {args.sources} client addresses (--sources)"))

    copy_binaries(args, work)
    # Origin (outside the cgroups: it is only busy while warming).
    ensure_origin = origin_keeper(work, emit)
    ensure_origin()

    if not args.skip_fio:
        log("fio: O_DIRECT random reads")
        fio_runs(args, emit)
    if not args.skip_ceiling:
        log("loopback ceiling: nginx serving one file from RAM")
        ceiling_runs(args, work, [s for s in SIZES if s in {object_size(r) for r in sizes}], emit)

    for size in sizes:
        count = object_count(args, size)
        disk = storage_bytes(args, size)
        log(f"== {size} x {count}{' (all resident)' if size in RESIDENT else ''} (cache storage {disk >> 20} MiB each)")
        live = []
        for c in caches:
            ensure_origin()
            try:
                c.prepare(disk)
                cg_create(c.name, cache_mem(args, c.name))
                c.start()
                if not warm(args, c, size, count, emit):
                    raise RuntimeError("did not reach a pass without origin fetches")
                live.append(c)
            except Exception as e:
                log(f"SKIPPED {c.name} for {size}: {e}")
                emit({"kind": "skipped", "cache": c.name, "size": size, "reason": str(e)[:2000]})
                c.stop()
        if not live:
            continue
        if not args.no_drop_caches and size not in RESIDENT:
            drop_caches()
        # A RAM row measures the ceiling in each round too (first in even rounds, last in odd).
        stop_ceiling = None
        if size in RESIDENT and not args.skip_ceiling and not args.skip_rounds:
            stop_ceiling = start_ceiling(args, work, [object_size(size)])
        if not args.skip_rounds:
            for dist in dists:
                for rnd in range(args.rounds):
                    order = live if rnd % 2 == 0 else list(reversed(live))
                    log(f"  round {rnd + 1}/{args.rounds} {dist}: {' '.join(c.name for c in order)}"
                        f"{' and the ceiling' if stop_ceiling else ''}")
                    if stop_ceiling and rnd % 2 == 0:
                        ceiling_round(args, size, dist, rnd, emit)
                    for c in order:
                        ensure_origin()
                        if c.proc and c.proc.poll() is not None:
                            if not getattr(c, "death_reported", False):
                                c.death_reported = True
                                cg = cg_read(c.name)
                                log(f"  {c.name} is DEAD before this round (exit {c.proc.poll()}, oom_kill "
                                    f"{cg.get('oom_kill')}, failcnt {cg.get('failcnt')}); skipped from now on")
                                emit({"kind": "died", "cache": c.name, "size": size, "dist": dist, "round": rnd,
                                      "exit": c.proc.poll(), "cgroup": cg, "between_rounds": True})
                            continue
                        try:
                            r = measure_round(args, c, size, count, dist, rnd)
                        except Exception as e:
                            log(f"  {c.name}: round failed: {e}")
                            emit({"kind": "error", "cache": c.name, "size": size, "dist": dist,
                                  "round": rnd, "error": str(e)[:2000]})
                            continue
                        if c.proc and c.proc.poll() is not None:
                            r["died"] = True
                            c.death_reported = True
                            log(f"  {c.name} DIED during the round (exit {c.proc.poll()}, oom_kill "
                                f"{r['oom_kill']}); round excluded from medians")
                            emit({"kind": "died", "cache": c.name, "size": size, "dist": dist, "round": rnd,
                                  "exit": c.proc.poll(), "cgroup": cg_read(c.name)})
                        emit(r)
                        log(f"    {c.name:9s} {r['req_per_s']:9.0f} req/s {r['mb_per_s']:7.0f} MB/s "
                            f"p50 {r['p50_ms']:6.2f} p99 {r['p99_ms']:7.2f} p99.9 {r['p999_ms']:7.2f} ms "
                            f"hit {r['hit_ratio']:.4f} cpu {r['cpu_cores']:.2f} cores "
                            f"{(r['cpu_us_per_hit'] or 0):.1f} us/hit disk {r['disk_read_mb_s']:.0f} MB/s "
                            f"peak {r['mem_peak_mib']:.0f} MiB (rss {r['rss_mib']:.0f}) failcnt +{r['failcnt_delta']} err {r['errors']}")
                    if stop_ceiling and rnd % 2 == 1:
                        ceiling_round(args, size, dist, rnd, emit)
        if stop_ceiling:
            stop_ceiling()
        if args.miss_rounds and not args.skip_rounds:
            miss_rounds(args, live, size, count, emit, ensure_origin)
        for c in live:
            if isinstance(c, EdgeCache):
                try:
                    txt = http_get(f"http://127.0.0.1:{c.admin_port}/metrics", 5)[1].decode(errors="replace")
                    emit({"kind": "edge_metrics", "cache": c.name, "size": size,
                          "lines": [ln for ln in txt.splitlines() if ln.startswith("edgecache_dataplane_")][:400]})
                except Exception as e:
                    log(f"  edgecache metrics: {e}")
            final = cg_read(c.name)
            emit({"kind": "cgroup_final", "cache": c.name, "size": size, "cgroup": final})
            c.stop()
    if not args.skip_coalesce:
        log(f"coalescing run: fresh caches, {args.coalesce_n} simultaneous requests for one cold "
            f"{args.coalesce_size} key")
        for c in caches:
            ensure_origin()
            try:
                c.prepare(1 << 30)
                cg_create(c.name, cache_mem(args, c.name))
                c.start()
                coalesce_run(args, c, emit)
            except Exception as e:
                log(f"  coalesce {c.name} failed: {e}")
                emit({"kind": "error", "cache": c.name, "what": "coalesce", "error": str(e)[:2000]})
            finally:
                c.stop()
    ensure_origin.stop()
    emit.close()
    log(f"results: {out_path}")
    if not args.no_report:
        r = subprocess.run([sys.executable, str(HERE / "report.py"), str(out_path)])
        if r.returncode != 0:
            log("report failed")


if __name__ == "__main__":
    main()
