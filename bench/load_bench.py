#!/usr/bin/env python3
"""Load on frenzyd: submissions per second and latency over loopback, and the daemon's memory
with many jobs in its database (issue 8).

Starts frenzyd (sim backend on the lab cluster, slowed down so that submitted jobs stay queued)
on a fresh database, then:
  1. queues `--queued` jobs (1,000);
  2. submits `--submissions` more from `--clients` threads, each on its own keep-alive
     connection, and reports submissions/s (every one persisted: the daemon answers 201 after
     its transaction commits) and the latency percentiles. The submissions come from the
     compiled client `frenzy_load_client` (beside FRENZYD, or `--client`) when it is there,
     else from Python threads, whose interpreter lock adds a tail of its own;
  3. fills the database to `--fill` jobs (100,000) and reports the daemon's resident memory and
     the latency of GET /v1/jobs/{id} and of a control-loop pass (from /metrics).

usage: bench/load_bench.py FRENZYD [--queued N] [--submissions N] [--clients N] [--fill N]
                            [--client PATH | --python-client]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

TOKEN = "bench-token"
SPEC = json.dumps({"model": "llama-2-7b", "tokens": 1e12, "global_batch": 64, "seq_len": 2048})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def submit_many(port, n, clients):
    lat = []
    lock = threading.Lock()
    errors = []

    def worker(count):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        for _ in range(count):
            t0 = time.perf_counter()
            c.request("POST", "/v1/jobs", SPEC, {"Authorization": "Bearer " + TOKEN,
                                                 "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 201:
                errors.append(r.status)
        with lock:
            lat.extend(mine)

    per = [n // clients + (1 if i < n % clients else 0) for i in range(clients)]
    threads = [threading.Thread(target=worker, args=(k,)) for k in per]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"{len(errors)} submissions failed: {errors[:5]}")
    lat.sort()
    return n / wall, lat


def submit_compiled(client, port, n, clients):
    out = subprocess.run([client, str(port), TOKEN, str(n), str(clients), SPEC],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{client} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def pct(lat, p):
    return lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzyd")
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--submissions", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--fill", type=int, default=100000)
    ap.add_argument("--client", help="the compiled load client (default: frenzy_load_client "
                    "beside FRENZYD)")
    ap.add_argument("--python-client", action="store_true", help="submit from Python threads")
    a = ap.parse_args()
    client = a.client or os.path.join(os.path.dirname(os.path.abspath(a.frenzyd)),
                                      "frenzy_load_client")
    if a.python_client or not os.path.exists(client):
        client = None
    work = tempfile.mkdtemp(prefix="frenzy-load-")
    port = free_port()
    log = open(os.path.join(work, "frenzyd.log"), "w")
    d = subprocess.Popen([a.frenzyd, "--listen", f"127.0.0.1:{port}", "--db",
                          os.path.join(work, "load.db"), "--token", TOKEN, "--time-scale", "0.001",
                          "--runs-dir", os.path.join(work, "runs")], stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        rate0, _ = submit_many(port, a.queued, a.clients)
        if client:
            r = submit_compiled(client, port, a.submissions, a.clients)
            rate, p50, p99, worst = r["rate"], r["p50_ms"], r["p99_ms"], r["max_ms"]
        else:
            rate, lat = submit_many(port, a.submissions, a.clients)
            p50, p99, worst = pct(lat, 0.5), pct(lat, 0.99), lat[-1] * 1e3
        print(f"queued first: {a.queued} jobs ({rate0:.0f}/s)")
        print(f"submissions: {a.submissions} from {a.clients} clients "
              f"({'compiled' if client else 'Python'}): {rate:.0f} per second persisted; "
              f"latency p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms")
        print(f"daemon memory with {a.queued + a.submissions} jobs: {rss_mib(d.pid):.0f} MiB")
        left = a.fill - a.queued - a.submissions
        if left > 0:
            rate2, _ = submit_many(port, left, a.clients)
            time.sleep(2)  # a few control-loop passes over the full queue
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            gets = []
            for i in range(200):
                t0 = time.perf_counter()
                c.request("GET", f"/v1/jobs/j-{1 + i * (a.fill // 200):06d}")
                c.getresponse().read()
                gets.append(time.perf_counter() - t0)
            gets.sort()
            c.request("GET", "/metrics")
            metrics = c.getresponse().read().decode()
            last = [l for l in metrics.splitlines() if l.startswith("frenzy_schedule_last_seconds")]
            locked = [l for l in metrics.splitlines()
                      if l.startswith("frenzy_schedule_locked_last_seconds")]
            print(f"filled to {a.fill} jobs ({rate2:.0f}/s): daemon memory {rss_mib(d.pid):.0f} "
                  f"MiB; GET /v1/jobs/ID p50 {pct(gets, 0.5):.2f} ms, p99 {pct(gets, 0.99):.2f} "
                  f"ms; last control-loop pass {float(last[0].split()[1]) * 1e3:.0f} ms, of "
                  f"which {float(locked[0].split()[1]) * 1e3:.0f} ms under the daemon's lock "
                  f"(all {a.fill} jobs queued)")
        print(f"database: {os.path.getsize(os.path.join(work, 'load.db')) / 2**20:.0f} MiB")
    finally:
        d.terminate()
        d.wait(10)


if __name__ == "__main__":
    main()
