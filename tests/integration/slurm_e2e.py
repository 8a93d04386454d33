#!/usr/bin/env python3
"""End to end on a real Slurm cluster: frenzyd with the slurm backend runs the real training
script (examples/train.py, PyTorch on CPU with gloo) through sbatch/srun.

Brings up a one-host Slurm cluster with three logical nodes, two of one fake GPU type and one of
another (scripts/slurm-up.sh), starts frenzyd on it, and checks over HTTP that:
  * the daemon discovered both GPU types from sinfo;
  * a job is planned on a type and count that hold it, runs through Slurm to completion, and
    its training process reported progress and peak memory;
  * a cancelled job is cancelled in Slurm too;
  * frenzyd killed with SIGKILL during a run and restarted still has every job, re-attaches
    to the running one, which then finishes;
  * a model too big for two GPUs runs sharded (ZeRO-2/3) over four, across the two A100 nodes;
  * a job whose node goes down mid-run is requeued and resumes from its checkpoint on one GPU
    instead of two (a resize), the node kept out until it is back;
  * bad and unauthorised requests are refused with 4xx and change nothing.
Stops every process it started (frenzyd, the Slurm daemons) whatever happens.

usage: tests/integration/slurm_e2e.py FRENZYD [--live-test BIN] [--keep DIR]
With --live-test, also runs that GoogleTest binary (SlurmBackend against the same cluster).
Needs root (the Slurm daemons), Slurm 22.05 and munge (scripts/install-deps.sh installs them).
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "e2e-secret-token"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method, path, body=None, token=TOKEN, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def job(self, job_id):
        status, j = self.call("GET", f"/v1/jobs/{job_id}")
        assert status == 200, (status, j)
        return j

    def wait(self, job_id, states, timeout_s, what=""):
        deadline = time.time() + timeout_s
        j = None
        while time.time() < deadline:
            j = self.job(job_id)
            if j["state"] in states:
                return j
            time.sleep(0.5)
        raise AssertionError(f"{job_id} not {states} after {timeout_s} s {what}: {json.dumps(j)}")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print(f"ok: {msg}", flush=True)


def start_daemon(frenzyd, work, conf, port):
    log = open(os.path.join(work, "frenzyd.log"), "ab")
    cmd = [frenzyd, "--backend", "slurm", "--slurm-conf", conf, "--listen", f"127.0.0.1:{port}",
           "--db", os.path.join(work, "frenzy.db"), "--runs-dir", os.path.join(work, "runs"),
           "--token", TOKEN, "--tick-s", "0.3", "--train-command",
           f"/usr/bin/python3 {ROOT}/examples/train.py --report-every 2 --checkpoint-every 4"]
    p = subprocess.Popen(cmd, stdout=log, stderr=log, cwd=work)
    api = Api(port)
    deadline = time.time() + 20
    while time.time() < deadline:
        if p.poll() is not None:
            raise AssertionError(f"frenzyd exited with {p.returncode}; see {work}/frenzyd.log")
        try:
            status, _ = api.call("GET", "/healthz", token=None)
            if status == 200:
                return p
        except OSError:
            pass
        time.sleep(0.2)
    p.kill()
    raise AssertionError("frenzyd did not answer within 20 s")


def spec(tokens, name):
    # A small model; the training script trains its own small stand-in on CPU.
    return {"model": "gpt2", "tokens": tokens, "global_batch": 4, "seq_len": 64, "name": name}


def slurm_up(work):
    """Starts the cluster; on failure stops what did start (slurm-up leaves running what it
    started before the failing step) and tries once more on other ports."""
    down = [os.path.join(ROOT, "scripts", "slurm-down.sh"), os.path.join(work, "slurm")]
    for attempt in (1, 2):
        try:
            return subprocess.run([os.path.join(ROOT, "scripts", "slurm-up.sh"),
                                   os.path.join(work, "slurm")],
                                  check=True, capture_output=True, text=True).stdout.strip()
        except subprocess.CalledProcessError as e:
            subprocess.run(down, capture_output=True)
            print(f"slurm-up failed (attempt {attempt}): {e.stderr[-2000:]}", file=sys.stderr)
            if attempt == 2:
                raise
            shutil.rmtree(os.path.join(work, "slurm"), ignore_errors=True)


def run(frenzyd, work, live_test):
    conf = slurm_up(work)
    env = dict(os.environ, SLURM_CONF=conf)
    if live_test:
        p = subprocess.run([live_test], env=dict(env, FRENZY_SLURM_CONF=conf), capture_output=True,
                           text=True)
        if p.returncode != 0:
            print(p.stdout[-4000:], file=sys.stderr)
        check(p.returncode == 0, "SlurmBackend live tests passed on the cluster")
    port = free_port()
    daemon = start_daemon(frenzyd, work, conf, port)
    api = Api(port)
    try:
        status, cluster = api.call("GET", "/v1/cluster", token=None)
        types = {t["gpu"]: t["gpus"] for t in cluster["types"]}
        check(status == 200 and types == {"A100-80GB": 4, "V100-32GB": 2},
              f"frenzyd discovered both GPU types from sinfo: {types}")

        # Bad and unauthorised requests: refused, nothing stored.
        bad = [
            ("POST", "/v1/jobs", spec(3000, "x"), None, 401, None),
            ("POST", "/v1/jobs", spec(3000, "x"), "wrong-token", 401, None),
            ("POST", "/v1/jobs", None, TOKEN, 400, b"{not json"),
            ("POST", "/v1/jobs", dict(spec(3000, "x"), gpus=2), TOKEN, 400, None),
            ("POST", "/v1/jobs", dict(spec(3000, "x"), model="no-such-model"), TOKEN, 404, None),
            ("POST", "/v1/jobs", None, TOKEN, 413, b"{" + b" " * (2 << 20) + b"}"),
            ("DELETE", "/v1/jobs/j-999999", None, TOKEN, 404, None),
        ]
        for method, path, body, token, want, raw in bad:
            status, err = api.call(method, path, body, token=token, raw=raw)
            check(status == want and "error" in err and "message" in err["error"],
                  f"{method} {path} ({want}) refused: {status} {err['error'].get('message', '')[:60]}")
        check(api.call("GET", "/v1/jobs")[1]["jobs"] == [], "nothing was stored by bad requests")

        # A job runs through Slurm to completion.
        status, a = api.call("POST", "/v1/jobs", spec(3000, "short"))
        check(status == 201, f"submitted {a['id']}")
        a = api.wait(a["id"], {"succeeded", "failed"}, 180, "(short job)")
        check(a["state"] == "succeeded", f"{a['id']} succeeded: {a['message']}")
        plan = a["plan"]
        check(plan["gpu"] in types and plan["gpus"] <= types[plan["gpu"]] and
              plan["device_bytes"] <= plan["gpu_memory_bytes"],
              f"planned on a fitting type: {plan['gpus']} x {plan['gpu']}, "
              f"{plan['device_bytes'] / 2**30:.1f} of {plan['gpu_memory_bytes'] / 2**30:.0f} GiB")
        check(a["handle"].startswith("slurm:"), f"ran through Slurm as {a['handle'].split(':')[1]}")
        check(a["progress"]["step"] > 0 and a["memory"]["observed_bytes"] > 0,
              f"the training process reported step {a['progress']['step']} and a peak of "
              f"{a['memory']['observed_bytes'] / 2**20:.0f} MiB")
        log = os.path.join(work, "runs", a["id"])
        check(os.path.exists(os.path.join(log, "checkpoint.pt")), "it wrote a checkpoint")

        # A long job is cancelled, in Slurm too.
        status, b = api.call("POST", "/v1/jobs", spec(10**9, "to-cancel"))
        b = api.wait(b["id"], {"running"}, 60, "(to cancel)")
        slurm_id = b["handle"].split(":")[1]
        status, _ = api.call("DELETE", f"/v1/jobs/{b['id']}")
        check(status == 200 and api.job(b["id"])["state"] == "cancelled", f"{b['id']} cancelled")
        deadline = time.time() + 30
        while time.time() < deadline:
            q = subprocess.run(["squeue", "-h", "-j", slurm_id, "-o", "%T"], env=env,
                               capture_output=True, text=True).stdout.strip()
            if q in ("", "CANCELLED", "COMPLETED"):
                break
            time.sleep(0.5)
        check(q in ("", "CANCELLED", "COMPLETED"), f"Slurm job {slurm_id} is gone ({q or 'none'})")

        # kill -9 during a run; restart; nothing lost, the run re-attached and finished.
        status, c = api.call("POST", "/v1/jobs", spec(40000, "survivor"))
        c = api.wait(c["id"], {"running"}, 60, "(survivor)")
        deadline = time.time() + 90
        while time.time() < deadline and api.job(c["id"])["progress"]["step"] == 0:
            time.sleep(0.5)
        before = {j["id"]: j["state"] for j in api.call("GET", "/v1/jobs")[1]["jobs"]}
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        print(f"ok: frenzyd killed with SIGKILL while {c['id']} ran", flush=True)
        daemon = start_daemon(frenzyd, work, conf, port)
        after = {j["id"]: j["state"] for j in api.call("GET", "/v1/jobs")[1]["jobs"]}
        check(set(after) == set(before), f"every job is still there after the restart: {after}")
        c2 = api.wait(c["id"], {"succeeded", "failed"}, 240, "(after restart)")
        check(c2["state"] == "succeeded", f"{c['id']} finished after the restart: {c2['message']}")
        events = [e["kind"] for e in c2["events"]]
        details = "; ".join(f"{e['kind']}: {e.get('detail', '')}" for e in c2["events"])
        check(c2["attempt"] == 1 and "lost" not in events,
              f"it was re-attached, not restarted (attempt {c2['attempt']}, events: {details})")
        sharded_plan_across_nodes(api, work)
        resize_from_a_checkpoint(api, work, env)
        status, metrics = 0, ""
        with urllib.request.urlopen(api.base + "/metrics", timeout=10) as r:
            metrics = r.read().decode()
        check('frenzy_jobs{state="succeeded"} 4' in metrics, "metrics count the finished jobs")
    finally:
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
        subprocess.run([os.path.join(ROOT, "scripts", "slurm-down.sh"), os.path.join(work, "slurm")],
                       capture_output=True)


def run_logs(work, job_id):
    """What the job's runs printed (one slurm-<id>.out per attempt), in attempt order."""
    outs = sorted(glob.glob(os.path.join(work, "runs", job_id, "slurm-*.out")),
                  key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    return [open(p, errors="replace").read() for p in outs]


def sharded_plan_across_nodes(api, work):
    """llama-2-13b's weights, gradients and Adam states are 13e9 x 16 bytes = 208 GB: more than
    two 80 GB GPUs hold, so the bundled entry point runs it sharded (ZeRO-2/3) over all four
    A100-80GB, two on each A100 node: four ranks of examples/train.py through one srun."""
    status, j = api.call("POST", "/v1/jobs", dict(spec(40000, "sharded"), model="llama-2-13b"))
    check(status == 201, f"submitted {j.get('id')} (llama-2-13b)")
    j = api.wait(j["id"], {"running", "failed"}, 60, "(sharded)")
    plan, nodes = j["plan"], sorted(n for n, _ in j["allocation"])
    check(plan["gpu"] == "A100-80GB" and plan["gpus"] == 4 and plan["zero"] >= 2 and
          plan["tp"] == plan["pp"] == plan["cp"] == 1 and nodes == ["a100-0", "a100-1"],
          f"planned sharded across both A100 nodes: {plan['gpus']} x {plan['gpu']}, ZeRO "
          f"{plan['zero']}, on {nodes}")
    j = api.wait(j["id"], {"succeeded", "failed"}, 240, "(sharded)")
    check(j["state"] == "succeeded", f"{j['id']} succeeded: {j['message']}")
    log = run_logs(work, j["id"])[-1]
    shard = "full shard over 4 of 4 ranks" if plan["zero"] == 3 else f"zero {plan['zero']}"
    check(f"dp 4 " in log and shard in log,
          f"its four ranks trained sharded ({shard})")


def resize_from_a_checkpoint(api, work, env):
    """A node lost mid-run: the job resumes from its checkpoint on the GPU that is left, one
    instead of two (opt-2.7b's 43 GB of states fit one A100-80GB; a one-sequence job holds the
    other node's second GPU)."""
    status, one = api.call("POST", "/v1/jobs", {"model": "opt-2.7b", "tokens": 400000,
                                                "global_batch": 1, "seq_len": 64,
                                                "name": "one-gpu"})
    one = api.wait(one["id"], {"running"}, 60, "(one-gpu)")
    status, r = api.call("POST", "/v1/jobs", {"model": "opt-2.7b", "tokens": 200000,
                                              "global_batch": 8, "seq_len": 64,
                                              "name": "resized"})
    r = api.wait(r["id"], {"running"}, 60, "(resized)")
    node = r["allocation"][0][0]
    check(one["plan"]["gpus"] == 1 and r["plan"]["gpus"] == 2 and len(r["allocation"]) == 1 and
          node != one["allocation"][0][0],
          f"{r['id']} runs on 2 GPUs of {node}, {one['id']} on 1 of {one['allocation'][0][0]}")
    deadline = time.time() + 90
    while time.time() < deadline and api.job(r["id"])["progress"]["step"] < 8:
        time.sleep(0.3)  # checkpoints every 4 steps: one is written
    # DOWN kills the node's jobs (NODE_FAIL); DRAIN keeps it out once slurmd answers again.
    for state in ("DOWN", "DRAIN"):
        subprocess.run(["scontrol", "update", f"NodeName={node}", f"State={state}",
                        "Reason=frenzy-e2e"], env=env, check=True, capture_output=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            r2 = api.job(r["id"])
            if r2["attempt"] >= 2 and r2["state"] == "running":
                break
            time.sleep(0.3)
        events = [e["kind"] for e in r2["events"]]
        check(r2["attempt"] == 2 and "node_lost" in events and r2["plan"]["gpus"] == 1 and
              r2["allocation"][0][0] != node,
              f"after {node} went down it was requeued and resized: 1 GPU on "
              f"{r2['allocation'][0][0]} (events: {', '.join(events)})")
        r3 = api.wait(r["id"], {"succeeded", "failed"}, 240, "(resized)")
        check(r3["state"] == "succeeded", f"{r['id']} finished on one GPU: {r3['message']}")
        logs = run_logs(work, r["id"])
        resumed = [line for line in logs[-1].splitlines() if line.startswith("resumed from step")]
        check(len(logs) == 2 and resumed and int(resumed[0].split()[3]) >= 4 and
              "dp 1 " in logs[-1] and "dp 2 " in logs[0],
              f"the second run ({resumed[0] if resumed else 'no resume'}) read the two-rank run's "
              "checkpoint as one rank")
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env,
                       capture_output=True)
    status, _ = api.call("DELETE", f"/v1/jobs/{one['id']}")
    check(status == 200, f"{one['id']} cancelled")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzyd")
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--live-test", help="SlurmBackend's live GoogleTest binary to run too")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="frenzy-e2e-")
    os.makedirs(work, exist_ok=True)
    try:
        run(os.path.abspath(a.frenzyd), work, a.live_test and os.path.abspath(a.live_test))
    except Exception as e:  # report, show the daemon's log tail, fail
        print(f"FAILED: {e}", file=sys.stderr)
        logf = os.path.join(work, "frenzyd.log")
        if os.path.exists(logf):
            print("--- frenzyd.log (tail)", file=sys.stderr)
            print("".join(open(logf, errors="replace").readlines()[-30:]), file=sys.stderr)
        # What each run printed (a crash names its cause there) and what Slurm logged.
        logs = sorted(glob.glob(os.path.join(work, "runs", "*", "slurm-*.out")))
        logs += sorted(glob.glob(os.path.join(work, "slurm", "log", "*.log")))
        for out in logs:
            print(f"--- {os.path.relpath(out, work)} (tail)", file=sys.stderr)
            print("".join(open(out, errors="replace").readlines()[-15:]), file=sys.stderr)
        return 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("slurm e2e: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
