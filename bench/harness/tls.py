#!/usr/bin/env python3
"""EdgeCache HTTPS benchmark (issue 17 section 5): TLS hits over HTTP/1.1 (wrk) and HTTP/2
(h2load), and new TLS connections per second, side by side with nginx and Traffic Server
terminating TLS on the same machine.

Run through bench/tls.sh, which installs the tools and builds the binaries. The caches, their
cgroups (the memory bench.py gives each: Traffic Server 1 GiB, the others 256 MiB), CPU pinning
(caches on CPU 1, load generators on CPU 0), storage, warm-up and interleaved rounds are
bench.py's; this file adds one certificate per run, the TLS listeners
and the HTTPS load. Varnish has no TLS in Debian 12 and is not part of this run.

Every server gets the same self-signed ECDSA P-256 certificate and negotiates TLS 1.3 with
TLS_AES_128_GCM_SHA256 and X25519: nginx and Traffic Server are pinned to that in their
configuration; EdgeCache's command line cannot pin a suite, so the clients offer only that
suite and group (an OpenSSL configuration file, OPENSSL_CONF, for wrk, h2load, curl and
openssl s_client). A probe checks the negotiated version, suite, group, certificate and ALPN
on every server before its rounds and drops a server that does not match.

Results: bench/results/tls-<run>.jsonl (kinds tls_round, tls_handshake, tls_probe, ...) and a
generated section of bench/BENCHMARKS.md (harness/tls_report.py).
"""

import argparse
import bisect
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import bench as B

TLS_PORTS = {"edgecache": 18443, "nginx": 18444, "ats": 18445, "edgecache-b": 18446}
HOST = "bench.edgecache.test"  # the Host (:authority) every client sends, plain warm-up included
SUITE = "TLS_AES_128_GCM_SHA256"
GROUP = "X25519"
TLS = {}  # paths of this run's certificate, key, client configuration and wrk shim

CLIENT_CNF = f"""# Every TLS client of the benchmark (wrk, h2load, curl, openssl s_client) reads this.
openssl_conf = ecb_init
[ecb_init]
ssl_conf = ecb_ssl
[ecb_ssl]
system_default = ecb_tls
[ecb_tls]
MinProtocol = TLSv1.3
Ciphersuites = {SUITE}
Groups = {GROUP}
"""

# wrk keeps a connection's TLS session when it reconnects (SSL_clear), so with
# `Connection: close` every handshake after the first would be a resumption. Preloaded into
# wrk for the full-handshake rounds, this drops the session there.
NORESUME_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;
int SSL_set_session(SSL *s, SSL_SESSION *session);

int SSL_clear(SSL *s) {
    static int (*real)(SSL *);
    if (!real) real = (int (*)(SSL *))dlsym(RTLD_NEXT, "SSL_clear");
    int r = real(s);
    SSL_set_session(s, 0);
    return r;
}
"""


def make_tls(d):
    """One certificate per run, the clients' OpenSSL configuration and the wrk shim."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={HOST}",
                    "-addext", f"subjectAltName=DNS:{HOST},IP:127.0.0.1"], check=True, capture_output=True)
    (d / "client.cnf").write_text(CLIENT_CNF)
    (d / "noresume.c").write_text(NORESUME_C)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(d / "noresume.so"), str(d / "noresume.c"), "-ldl"],
                   check=True, capture_output=True)
    fp = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256"],
                        capture_output=True, text=True, check=True).stdout.strip().split("=", 1)[1]
    TLS.update({"dir": d, "cert": cert, "key": key, "cnf": d / "client.cnf", "shim": d / "noresume.so",
                "fingerprint": fp})


def client_env(args, noresume=False, first=0):
    e = B.client_env(args, first, [TLS["shim"]] if noresume else [])
    e["OPENSSL_CONF"] = str(TLS["cnf"])
    return e


# --------------------------------------------------------------------------
# the caches with a TLS listener (same configuration as bench.py otherwise)

class TlsNginx(B.Nginx):
    def prepare(self, disk_bytes):
        super().prepare(disk_bytes)
        p = self.dir / "nginx.conf"
        conf = p.read_text()
        plain = f"listen 127.0.0.1:{self.port} reuseport backlog=4096;"
        tls = f"""{plain}
        listen 127.0.0.1:{TLS_PORTS[self.name]} ssl http2 reuseport backlog=4096;
        ssl_certificate {TLS['cert']};
        ssl_certificate_key {TLS['key']};
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites {SUITE};
        ssl_ecdh_curve {GROUP};
        ssl_session_cache shared:ecbtls:16m;
        ssl_session_tickets on;"""
        # The default key starts with $scheme: without this, the HTTPS requests would miss
        # what the plain warm-up stored.
        key = "proxy_cache ec;\n            proxy_cache_key $proxy_host$request_uri;"
        assert conf.count(plain) == 1 and conf.count("proxy_cache ec;") == 1, "nginx.conf changed shape"
        p.write_text(conf.replace(plain, tls).replace("proxy_cache ec;", key))


class TlsTrafficServer(B.TrafficServer):
    def prepare(self, disk_bytes):
        super().prepare(disk_bytes)
        etc = self.dir / "etc"
        rec = (etc / "records.config").read_text()
        line = f"CONFIG proxy.config.http.server_ports STRING {self.port}\n"
        assert rec.count(line) == 1, "records.config changed shape"
        rec = rec.replace(line, f"CONFIG proxy.config.http.server_ports STRING {self.port} "
                                f"{TLS_PORTS[self.name]}:ssl\n")
        rec += f"""CONFIG proxy.config.ssl.server.cert.path STRING {TLS['dir']}
CONFIG proxy.config.ssl.server.private_key.path STRING {TLS['dir']}
CONFIG proxy.config.ssl.server.multicert.filename STRING ssl_multicert.config
CONFIG proxy.config.ssl.server.multicert.exit_on_load_fail INT 1
CONFIG proxy.config.ssl.TLSv1 INT 0
CONFIG proxy.config.ssl.TLSv1_1 INT 0
CONFIG proxy.config.ssl.TLSv1_2 INT 0
CONFIG proxy.config.ssl.TLSv1_3 INT 1
CONFIG proxy.config.ssl.server.TLSv1_3.cipher_suites STRING {SUITE}
CONFIG proxy.config.ssl.server.groups_list STRING {GROUP}
"""
        (etc / "records.config").write_text(rec)
        (etc / "ssl_multicert.config").write_text(
            f"dest_ip=* ssl_cert_name={TLS['cert'].name} ssl_key_name={TLS['key'].name}\n")
        remap = (etc / "remap.config").read_text()
        (etc / "remap.config").write_text(
            f"map http://{HOST}/ http://127.0.0.1:{B.ORIGIN_PORT}/\n"
            f"map https://{HOST}/ http://127.0.0.1:{B.ORIGIN_PORT}/\n" + remap)


class TlsEdgeCache(B.EdgeCache):
    def argv(self):
        return super().argv() + ["--tls-listen", f"127.0.0.1:{TLS_PORTS[self.name]}",
                                 "--tls-cert", str(TLS["cert"]), "--tls-key", str(TLS["key"])]


class TlsEdgeCacheB(TlsEdgeCache, B.EdgeCacheB):
    """The second build of an A/B (--edge-b DIR), with the same TLS listener on its own port."""


CACHE_TYPES = {c.name: c for c in (TlsEdgeCache, TlsNginx, TlsTrafficServer, TlsEdgeCacheB)}


def probe(cache, emit):
    """The TLS listener negotiates what every server must (version, suite, group, our
    certificate, ALPN h2 and http/1.1) and serves a hit over both protocols."""
    port = TLS_PORTS[cache.name]
    env = client_env(None)  # one client, from 127.0.0.1
    rec = {"kind": "tls_probe", "cache": cache.name, "port": port}
    r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", HOST,
                        "-CAfile", str(TLS["cert"]), "-alpn", "h2,http/1.1"],
                       input="", capture_output=True, text=True, errors="replace", timeout=15, env=env)
    out = r.stdout + r.stderr
    for key, pat in (("protocol", r"New, (TLSv[\d.]+), Cipher is"), ("suite", r"New, TLSv[\d.]+, Cipher is (\S+)"),
                     ("group", r"Server Temp Key: ([^,\n]+)"), ("alpn", r"ALPN protocol: (\S+)"),
                     ("verification", r"Verify return code: (\d+ \([^)]*\))")):
        m = re.search(pat, out)
        rec[key] = m.group(1).strip() if m else None
    for proto, flag in (("h1", "--http1.1"), ("h2", "--http2")):
        c = subprocess.run(["curl", "-sS", flag, "--tlsv1.3", "--tls13-ciphers", SUITE, "--curves", GROUP,
                            "--cacert", str(TLS["cert"]), "--resolve", f"{HOST}:{port}:127.0.0.1",
                            "-H", f"Host: {HOST}", "-o", "/dev/null",
                            "-w", "%{http_code} %{http_version} %{size_download}",
                            f"https://{HOST}:{port}/obj/1k/0"],
                           capture_output=True, text=True, timeout=15, env=env)
        rec[f"curl_{proto}"] = (c.stdout or c.stderr).strip()
    problems = []
    if rec["protocol"] != "TLSv1.3" or rec["suite"] != SUITE:
        problems.append(f"negotiated {rec['protocol']} {rec['suite']}")
    if rec["group"] != GROUP:
        problems.append(f"group {rec['group']}")
    if rec["alpn"] != "h2":
        problems.append(f"ALPN {rec['alpn']}")
    if rec["verification"] != "0 (ok)":
        problems.append(f"certificate verification {rec['verification']}")
    if rec["curl_h1"] != "200 1.1 1024":
        problems.append(f"HTTP/1.1 over TLS: {rec['curl_h1']}")
    if rec["curl_h2"] != "200 2 1024":
        problems.append(f"HTTP/2 over TLS: {rec['curl_h2']}")
    rec["ok"] = not problems
    rec["problems"] = problems
    emit(rec)
    B.log(f"  tls probe {cache.name}: {rec['protocol']} {rec['suite']} {rec['group']} ALPN {rec['alpn']}, "
          f"cert {rec['verification']}, curl h1 [{rec['curl_h1']}] h2 [{rec['curl_h2']}]"
          + (f"; PROBLEMS: {'; '.join(problems)}" if problems else ""))
    if problems:
        raise RuntimeError("TLS probe: " + "; ".join(problems))


# --------------------------------------------------------------------------
# load

def pinned(args, cmd):
    return ["sh", "-c", 'ulimit -n $(ulimit -Hn) && exec "$@"', "sh",
            "nice", "-n", str(B.NICE), "taskset", "-c", str(args.client_cpu)] + cmd


def run_wrk(args, port, duration, conns, lua_args, headers=(), noresume=False):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--timeout", "10s", "-s", str(B.HERE / "objects.lua"),
           "-H", f"Host: {HOST}"]
    for h in headers:
        cmd += ["-H", h]
    cmd += [f"https://127.0.0.1:{port}", "--"] + [str(x) for x in lua_args]
    r = subprocess.run(pinned(args, cmd), capture_output=True, text=True, timeout=duration + 60,
                       env=client_env(args, noresume))
    for line in r.stdout.splitlines():
        if line.startswith("WRKJSON "):
            w = json.loads(line[len("WRKJSON "):])
            w["errors"] = sum(w[k] for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
            w["err_detail"] = {k: w[k] for k in w if k.startswith("err_")}
            return w
    raise RuntimeError(f"wrk produced no result: rc={r.returncode} {r.stdout[-1000:]} {r.stderr[-1000:]}")


class Ids:
    """Object ids drawn like objects.lua draws them (uniform, or zipf with exponent s)."""

    def __init__(self, count, dist, s):
        self.count = count
        self.cdf = None
        if dist == "zipf":
            acc, self.cdf = 0.0, []
            for i in range(1, count + 1):
                acc += 1 / i ** s
                self.cdf.append(acc)
            self.cdf = [x / acc for x in self.cdf]

    def draw(self, rng):
        if self.cdf is None:
            return rng.randrange(self.count)
        return min(bisect.bisect_left(self.cdf, rng.random()), self.count - 1)


def run_h2load(args, port, size, ids, seed, duration, work):
    """HTTP/2: --h2-conns h2load processes, each one connection with --h2-streams streams and
    its own random id list. h2load sends every client the URIs of -i in the same order, so
    the clients of one process would ask for the same objects at the same moment; one
    connection per process keeps the requests as random as wrk's."""
    d = work / "h2"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    procs = []
    for k in range(args.h2_conns):
        rng = random.Random(f"{seed}-{k}")
        lines = [f"/obj/{size}/{ids.draw(rng)}" for _ in range(args.h2_list)]
        lines[0] = f"https://127.0.0.1:{port}{lines[0]}"
        (d / f"uris-{k}").write_text("\n".join(lines) + "\n")
        cmd = ["h2load", "-c1", "-m", str(args.h2_streams), "-D", str(duration), "-i", str(d / f"uris-{k}"),
               f"--log-file={d / f'log-{k}'}", f"--tls13-ciphers={SUITE}", f"--groups={GROUP}",
               "-H", f":authority: {HOST}"]
        procs.append(subprocess.Popen(pinned(args, cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=client_env(args, first=k), start_new_session=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=duration + 60)[0])
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            outs.append(p.communicate()[0])
    agg = {"requests": 0, "bytes": 0, "h2_failed": 0, "h2_errored": 0, "h2_timeout": 0, "status_2xx": 0,
           "status_other": 0, "alpn": [], "tls_protocol": [], "cipher": [], "temp_key": [], "finished_s": []}
    for out in outs:
        def grab(pat, cast=str):
            m = re.search(pat, out)
            return cast(m.group(1)) if m else None
        agg["finished_s"].append(grab(r"finished in ([\d.]+)s", float))
        m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, "
                      r"(\d+) errored, (\d+) timeout", out)
        st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
        tr = re.search(r"traffic: \S+ \((\d+)\) total", out)
        if not (m and st and tr):
            raise RuntimeError(f"h2load produced no summary: {out[-1500:]}")
        agg["h2_failed"] += int(m.group(2))
        agg["h2_errored"] += int(m.group(3))
        agg["h2_timeout"] += int(m.group(4))
        agg["status_2xx"] += int(st.group(1))
        agg["status_other"] += sum(int(st.group(i)) for i in (2, 3, 4))
        agg["bytes"] += int(tr.group(1))
        for key, pat in (("alpn", r"Application protocol: (\S+)"), ("tls_protocol", r"TLS Protocol: (\S+)"),
                         ("cipher", r"Cipher: (\S+)"), ("temp_key", r"Server Temp Key: ([^\n]+)")):
            v = grab(pat)
            if v not in agg[key]:
                agg[key].append(v)
    lat = []
    for k in range(args.h2_conns):
        try:
            for line in (d / f"log-{k}").read_text().splitlines():
                f = line.split("\t")
                if len(f) == 3 and f[1] == "200":
                    lat.append(int(f[2]))
        except OSError:
            pass
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0
    agg["requests"] = agg["status_2xx"]
    agg["duration_us"] = int(1e6 * max([x for x in agg["finished_s"] if x] or [duration]))
    agg.update({"p50_us": pct(0.50), "p90_us": pct(0.90), "p99_us": pct(0.99), "p999_us": pct(0.999),
                "lat_mean_us": sum(lat) / len(lat) if lat else 0, "lat_max_us": lat[-1] if lat else 0})
    # Streams still open when -D ends count as failed; anything beyond that is a real error.
    agg["errors"] = agg["status_other"] + max(0, agg["h2_failed"] - args.h2_conns * args.h2_streams)
    agg["err_detail"] = {k: agg[k] for k in ("h2_failed", "h2_errored", "h2_timeout", "status_other")}
    return agg


def edge_tls_counters():
    try:
        txt = B.http_get(f"http://127.0.0.1:{B.EDGE_ADMIN_PORT}/metrics", 5)[1].decode(errors="replace")
    except Exception:
        return None
    out = {}
    for line in txt.splitlines():
        m = re.match(r"edgecache_dataplane_(tls_handshakes|tls_resumed)_total(\{[^}]*\})? (\S+)", line)
        if m:
            k = m.group(1) + (m.group(2) or "")
            out[k] = out.get(k, 0) + float(m.group(3))
    return out


def measured(args, cache, load):
    """bench.measure_round's counters around one load run."""
    name = cache.name
    B.cg_reset_peak(name)
    B.pin_for_round(cache)
    o0, c0, d0, e0 = B.origin_requests(), B.cg_read(name), B.disk_read_bytes(), None
    if name == "edgecache":
        e0 = edge_tls_counters()
    t0 = time.time()
    w = load()
    t1 = time.time()
    c1, d1, o1 = B.cg_read(name), B.disk_read_bytes(), B.origin_requests()
    secs = w["duration_us"] / 1e6
    reqs = w["requests"]
    fetches = o1 - o0
    hits = max(reqs - fetches, 0)
    cpu_s = ((c1["cpu_ns"] or 0) - (c0["cpu_ns"] or 0)) / 1e9
    rec = {
        "cache": name, "seconds": secs, "requests": reqs, "req_per_s": reqs / secs if secs else 0.0,
        "mb_per_s": w["bytes"] / secs / 1e6 if secs else 0.0,
        "p50_ms": w["p50_us"] / 1e3, "p99_ms": w["p99_us"] / 1e3, "p999_ms": w["p999_us"] / 1e3,
        "mean_ms": w["lat_mean_us"] / 1e3, "max_ms": w["lat_max_us"] / 1e3,
        "errors": w["errors"], "err_detail": w["err_detail"],
        "origin_fetches": fetches, "hit_ratio": hits / reqs if reqs else 0.0,
        "cpu_s": cpu_s, "cpu_cores": cpu_s / (t1 - t0),
        "cpu_us_per_hit": cpu_s * 1e6 / hits if hits else None,
        "cpu_us_per_req": cpu_s * 1e6 / reqs if reqs else None,
        "disk_read_mb_s": (d1 - d0) / (t1 - t0) / 1e6,
        "mem_peak_mib": (c1["mem_peak"] or 0) / 2**20, "rss_mib": (c1.get("rss") or 0) / 2**20,
        "failcnt_delta": (c1["failcnt"] or 0) - (c0["failcnt"] or 0), "failcnt": c1["failcnt"],
        "oom_kill": c1["oom_kill"],
    }
    for k in ("alpn", "tls_protocol", "cipher", "temp_key"):
        if k in w:
            rec[k] = w[k]
    if e0 is not None:
        e1 = edge_tls_counters() or {}
        rec["edge_tls"] = {k: e1.get(k, 0) - e0.get(k, 0) for k in e1}
    return rec


def rounds(args, live, emit, label, one):
    """Interleaved rounds (A B C, C B A, ...) of `one(cache, rnd)` over the live caches."""
    for rnd in range(args.rounds):
        order = live if rnd % 2 == 0 else list(reversed(live))
        B.log(f"  {label} round {rnd + 1}/{args.rounds}: {' '.join(c.name for c in order)}")
        for c in order:
            B.ensure_origin()
            if c.proc and c.proc.poll() is not None:
                if not getattr(c, "death_reported", False):
                    c.death_reported = True
                    cg = B.cg_read(c.name)
                    B.log(f"  {c.name} is DEAD (exit {c.proc.poll()}, oom_kill {cg.get('oom_kill')}); skipped")
                    emit({"kind": "died", "cache": c.name, "what": label, "round": rnd,
                          "exit": c.proc.poll(), "cgroup": cg})
                continue
            try:
                r = one(c, rnd)
            except Exception as e:
                B.log(f"  {c.name}: {label} round failed: {e}")
                emit({"kind": "error", "cache": c.name, "what": label, "round": rnd, "error": str(e)[:2000]})
                continue
            r["round"] = rnd
            if c.proc and c.proc.poll() is not None:
                r["died"] = True
                c.death_reported = True
                B.log(f"  {c.name} DIED during the round (exit {c.proc.poll()}); round excluded")
                emit({"kind": "died", "cache": c.name, "what": label, "round": rnd, "exit": c.proc.poll(),
                      "cgroup": B.cg_read(c.name)})
            emit(r)
            extra = ""
            if r.get("alpn"):
                extra = f" alpn {','.join(map(str, r['alpn']))}"
            if r.get("edge_tls"):
                extra += " " + " ".join(f"{k}+{v:.0f}" for k, v in sorted(r["edge_tls"].items()) if v)
            B.log(f"    {c.name:9s} {r['req_per_s']:9.0f} req/s {r['mb_per_s']:7.0f} MB/s p50 {r['p50_ms']:6.2f} "
                  f"p99 {r['p99_ms']:7.2f} ms hit {r['hit_ratio']:.4f} cpu {r['cpu_cores']:.2f} cores "
                  f"{(r['cpu_us_per_req'] or 0):.1f} us/req peak {r['mem_peak_mib']:.0f} MiB "
                  f"failcnt +{r['failcnt_delta']} err {r['errors']}{extra}")


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small object sets, short rounds")
    ap.add_argument("--caches", default="edgecache,nginx,ats", help="comma list from edgecache,nginx,ats (and edgecache-b with --edge-b)")
    ap.add_argument("--sizes", default="4k,100k,1m", help="comma list from 4k,100k,1m ('' = handshakes only)")
    ap.add_argument("--protos", default="h1,h2", help="comma list from h1 (wrk), h2 (h2load)")
    ap.add_argument("--dists", default="uniform", help="comma list from uniform,zipf")
    ap.add_argument("--handshakes", default="full,resumed",
                    help="new-connection rounds: full (no resumption), resumed ('' = none)")
    ap.add_argument("--hs-size", default=None, help="size phase that runs the handshake rounds (default: the first)")
    ap.add_argument("--count", type=int, help="objects per size (overrides the set sizes)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, help="seconds per round (default 20, quick 5)")
    ap.add_argument("--connections", type=int, default=256, help="wrk connections (HTTP/1.1 and handshakes)")
    ap.add_argument("--sources", type=int, default=B.SOURCES,
                    help="loopback source addresses the load generators spread their connections over "
                         "(harness/srcaddr.c; 1 = all from 127.0.0.1)")
    ap.add_argument("--h2-conns", type=int, default=16, help="HTTP/2 connections (one h2load process each)")
    ap.add_argument("--h2-streams", type=int, default=16, help="concurrent streams per HTTP/2 connection")
    ap.add_argument("--h2-list", type=int, default=20000, help="random URIs per h2load process (then it cycles)")
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--mem-limit", type=int, default=None,
                    help="cgroup memory limit of every cache, bytes (default: each its own, as bench.py: "
                         + ", ".join(f"{k} {v} MiB" for k, v in B.MEM_MIB.items() if k != "varnish") + ")")
    ap.add_argument("--mem", type=B.parse_mem, default={},
                    help="memory of some caches, MiB, over the defaults and --mem-limit: e.g. ats=1024")
    ap.add_argument("--cache-cpu", type=int, default=1)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--work", default="/var/tmp/ec-bench", help="cache storage and logs (on the disk)")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR", str(B.REPO / "target")))
    ap.add_argument("--edge-b", metavar="DIR",
                    help="cargo target directory of a second EdgeCache build, cache edgecache-b in "
                         "--caches: both measured in the same rounds (an A/B of two binaries)")
    ap.add_argument("--warm-conns", type=int, default=32)
    ap.add_argument("--warm-timeout", type=int, default=900)
    ap.add_argument("--max-warm-passes", type=int, default=10)
    ap.add_argument("--storage-mib", type=int, default=None,
                    help="each cache's storage (default run.sh's: twice the set + 256 MiB, at least 1 GiB); "
                         "only for a smoke test on a machine short of disk")
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--keep-storage", action="store_true")
    ap.add_argument("--directio", "--nginx-directio", dest="directio", default="4k")
    ap.add_argument("--edge-directio", default=None)
    ap.add_argument("--ats-ram-cache", type=int, default=16 << 20)
    ap.add_argument("--ats-fragment", type=int, default=256 << 10)
    ap.add_argument("--edge-workers", type=int, default=1)
    ap.add_argument("--edge-config", default=None)
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--run-id", default="tls-" + time.strftime("%Y%m%d-%H%M%S"))
    args = ap.parse_args()
    if args.duration is None:
        args.duration = 5 if args.quick else 20
    B.NICE = args.nice
    work, emit, out_path = B.begin_run(
        args, [B.ORIGIN_PORT, B.EDGE_ADMIN_PORT, *B.PORTS.values(), *TLS_PORTS.values()])

    sizes = [s for s in args.sizes.split(",") if s]
    protos = [p for p in args.protos.split(",") if p]
    dists = [d for d in args.dists.split(",") if d]
    hs_modes = [m for m in args.handshakes.split(",") if m]
    for s in sizes:
        if s not in B.SIZES or s in B.ROW_OBJECT:  # run.sh's 4k-ram row is not one here
            sys.exit(f"unknown size {s}")
    if set(protos) - {"h1", "h2"} or set(dists) - {"uniform", "zipf"} or set(hs_modes) - {"full", "resumed"}:
        sys.exit("unknown --protos, --dists or --handshakes value")
    hs_size = args.hs_size or (sizes[0] if sizes else None)
    caches = []
    for n in [c for c in args.caches.split(",") if c]:
        if n not in CACHE_TYPES:
            sys.exit(f"unknown cache {n} (TLS rows: edgecache, nginx, ats, edgecache-b; Varnish has no TLS in Debian 12)")
        c = CACHE_TYPES[n](args, work)
        if c.available():
            caches.append(c)
        else:
            B.log(f"SKIPPED {n}: {c.skip_reason or 'not installed'}")
            emit({"kind": "skipped", "cache": n, "reason": c.skip_reason or "not installed"})
    def storage(size):
        return (args.storage_mib << 20) if args.storage_mib else B.storage_bytes(args, size)
    need = max(storage(s) for s in sizes or ["4k"]) * len(caches)
    free = shutil.disk_usage(work).free
    if free < need + (1 << 30):
        sys.exit(f"tls: {work} has {free / 2**30:.1f} GiB free; this run needs about "
                 f"{(need + (1 << 30)) / 2**30:.1f} GiB there (the caches' storage): free some space or pass --work")
    make_tls(work / "tls")
    meta = B.machine_info(caches)
    sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    meta["versions"].update({"h2load": sh("h2load --version").split("/")[-1],
                             "openssl": " ".join(sh("openssl version").split()[1:2]), "curl": sh("curl -V").split()[1]})
    meta.update({"args": vars(args), "mem_mib": {c.name: B.cache_mem(args, c.name) >> 20 for c in caches},
                 "tls": {"certificate": "self-signed ECDSA P-256",
                                             "fingerprint": TLS["fingerprint"], "version": "TLSv1.3",
                                             "suite": SUITE, "group": GROUP, "host": HOST},
                 "tls_ports": TLS_PORTS})
    emit(meta)
    B.log(f"run {args.run_id}: caches {[c.name for c in caches]}, sizes {sizes}, protos {protos}, dists {dists}, "
          f"handshakes {hs_modes} at {hs_size}, {args.rounds} rounds x {args.duration}s; TLS 1.3 {SUITE} {GROUP}, "
          f"certificate {TLS['fingerprint'][:23]}...; results -> {out_path}")

    B.copy_binaries(args, work)
    ensure_origin = B.origin_keeper(work, emit)
    B.ensure_origin = ensure_origin
    ensure_origin()

    phases = sizes or ([hs_size or "4k"] if hs_modes else [])
    for size in phases:
        measure_hits = size in sizes
        count = B.object_count(args, size) if measure_hits else 1
        disk = storage(size)
        B.log(f"== {size} x {count} over TLS (cache storage {disk >> 20} MiB each)")
        live = []
        for c in caches:
            ensure_origin()
            try:
                c.prepare(disk)
                B.cg_create(c.name, B.cache_mem(args, c.name))
                c.start()
                if not B.wait_port(TLS_PORTS[c.name], 10, c.proc):
                    raise RuntimeError(f"no TLS listener on {TLS_PORTS[c.name]}")
                if measure_hits and not B.warm(args, c, size, count, emit, host=HOST):
                    raise RuntimeError("did not reach a pass without origin fetches")
                # The handshake rounds' object, and the probe's.
                if not B.warm(args, c, "1k", 1, emit, host=HOST):
                    raise RuntimeError("1k object did not warm")
                probe(c, emit)
                live.append(c)
            except Exception as e:
                B.log(f"SKIPPED {c.name} for {size}: {e}")
                emit({"kind": "skipped", "cache": c.name, "size": size, "reason": str(e)[:2000]})
                c.stop()
        if not live:
            continue
        if not args.no_drop_caches:
            B.drop_caches()
        if measure_hits:
            for proto in protos:
                for dist in dists:
                    ids = Ids(count, dist, args.zipf_s) if proto == "h2" else None

                    def one(c, rnd, proto=proto, dist=dist, ids=ids):
                        port = TLS_PORTS[c.name]
                        if proto == "h1":
                            load = lambda: run_wrk(args, port, args.duration, args.connections,  # noqa: E731
                                                   [size, count, dist, args.zipf_s, int(time.time())])
                            conns = {"connections": args.connections}
                        else:
                            seed = f"{args.run_id}-{size}-{dist}-{rnd}"
                            load = lambda: run_h2load(args, port, size, ids, seed, args.duration, work)  # noqa: E731
                            conns = {"connections": args.h2_conns, "streams": args.h2_streams}
                        r = measured(args, c, load)
                        r.update({"kind": "tls_round", "proto": proto, "size": size, "count": count, "dist": dist,
                                  **conns})
                        return r
                    rounds(args, live, emit, f"{size} {proto} {dist}", one)
        if size == hs_size:
            for mode in hs_modes:
                def one(c, rnd, mode=mode):
                    load = lambda: run_wrk(args, TLS_PORTS[c.name], args.duration, args.connections,  # noqa: E731
                                           ["1k", 1, "uniform", 1.0, 0], headers=["Connection: close"],
                                           noresume=(mode == "full"))
                    r = measured(args, c, load)
                    r.update({"kind": "tls_handshake", "mode": mode, "size": "1k", "connections": args.connections,
                              "handshakes_per_s": r["req_per_s"],
                              "cpu_us_per_handshake": r["cpu_us_per_req"]})
                    return r
                rounds(args, live, emit, f"new connections ({mode} handshakes)", one)
        for c in live:
            emit({"kind": "cgroup_final", "cache": c.name, "size": size, "cgroup": B.cg_read(c.name)})
            c.stop()
    ensure_origin.stop()
    shutil.rmtree(work / "h2", ignore_errors=True)  # h2load's URI lists and per-request logs
    emit.close()
    B.log(f"results: {out_path}")
    if not args.no_report:
        r = subprocess.run([sys.executable, str(B.HERE / "tls_report.py"), str(out_path)])
        if r.returncode != 0:
            B.log("report failed")


if __name__ == "__main__":
    main()
