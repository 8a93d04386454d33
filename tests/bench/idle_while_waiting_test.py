#!/usr/bin/python3
"""bench/idle_while_waiting.py on a three-job replay worked out by hand.

Cluster: 4 GPUs of type A, 4 of type B. Job 1 runs on 4 A in [0, 100); job 2 arrives at 0,
waits, runs on 4 A in [100, 200); job 3 runs on 2 B in [0, 300) and is the only one that ever
ran on B. So A is contended in [0, 100) (job 2 waits and fits A's 4 GPUs) and nothing else is:
A spends 800 GPU-seconds, 400 of them contended; B 600, none contended. Idle: A's 4 GPUs in
[200, 300) (400, nobody waiting), B's 2 free GPUs throughout (600), and no idle GPU while a job
that fits it waits (in [0, 100) A has none free and job 2 does not fit B).

usage: idle_while_waiting_test.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import idle_while_waiting as iw  # noqa: E402


def run(job, start, end, gpu, gpus):
    return {"policy": "p", "job_id": job, "start_s": str(start), "end_s": str(end), "gpu": gpu,
            "gpus": str(gpus), "end": "finish"}


def main():
    runs = [run("1", 0, 100, "A", 4), run("2", 100, 200, "A", 4), run("3", 0, 300, "B", 2)]
    jobs = {"1": {"submit_s": "0", "finish_s": "100"}, "2": {"submit_s": "0", "finish_s": "200"},
            "3": {"submit_s": "0", "finish_s": "300"}}
    cap = {"A": 4, "B": 4}
    can = iw.smallest_runs({"p": runs})
    checks = []
    used, contended = iw.gpu_hours_split(runs, jobs, can, cap, {"1", "2", "3"})
    checks += [("used A", used["A"], 800), ("contended A", contended["A"], 400),
               ("used B", used["B"], 600), ("contended B", contended["B"], 0)]
    used, _ = iw.gpu_hours_split(runs, jobs, can, cap, {"1", "3"})  # job 2 not common
    checks.append(("used A, jobs 1 and 3", used["A"], 400))
    idle, gap = iw.idle_while_waiting(runs, jobs, can, cap)
    checks += [("idle A", idle["A"], 400), ("idle B", idle["B"], 600),
               ("gap A", gap["A"], 0), ("gap B", gap["B"], 0)]
    bad = [f"{name}: {got} != {want}" for name, got, want in checks if abs(got - want) > 1e-9]
    print("\n".join(bad) or "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
