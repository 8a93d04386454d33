#!/usr/bin/python3
"""frenzy_alloc_replay (bench/alloc_replay.cc) and the event files tools/measure_memory.py
--events-out writes for it.

1. A sequence worked out by hand with the caching allocator's rules (memory/caching_allocator.h):
   30 MiB allocated and freed; 20 MiB splits that block (10 MiB left free); 15 MiB fits no free
   block, so a 16 MiB segment (rounded to 2 MiB) is reserved and handed out whole (1 MiB would
   be left, not more than 1 MiB); 4 MiB splits the 10 MiB remainder; the 20 MiB block is freed
   but its neighbour is in use, so 24 MiB needs a segment of its own. Reserved 30 + 16 + 24 =
   70 MiB; at most 16 + 4 + 24 = 44 MiB allocated.
2. Malformed files and arguments are refused with the line that is wrong.
3. A real step's file (a tiny Llama on CPU): every free names an earlier live allocation, and the
   running sum of the file's bytes peaks at the step's measured peak over the states it started
   from, to the byte.

usage: alloc_replay_test.py FRENZY_ALLOC_REPLAY_BIN
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20
TINY = {"model_type": "llama", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 344,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True)


def main():
    binary = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "events.txt")
        with open(path, "w") as f:
            f.write(f"{30 * MIB} -1\n0 0\n{20 * MIB} -1\n{15 * MIB} -1\n{4 * MIB} -1\n0 2\n"
                    f"{24 * MIB} -1\n")
        r = run(binary, path)
        got = json.loads(r.stdout) if r.returncode == 0 else {}
        if got.get("reserved_bytes") != 70 * MIB or got.get("peak_allocated_bytes") != 44 * MIB:
            failures.append(f"hand-worked sequence: {r.stdout or r.stderr}")

        for text, where in (("100 -1\n0 5\n", "line 2"), ("100 -1\n0 0\n0 0\n", "line 3"),
                            ("-4 -1\n", "line 1"), ("100 -1\nabc\n", "line 2")):
            with open(path, "w") as f:
                f.write(text)
            r = run(binary, path)
            if r.returncode == 0 or where not in r.stderr:
                failures.append(f"{text!r} not refused at {where}: {r.stdout}{r.stderr}")
        r = run(binary, path, "0")
        if r.returncode == 0 or "STEPS" not in r.stderr:
            failures.append(f"STEPS 0 not refused: {r.stderr}")

        cfg = os.path.join(tmp, "tiny.json")
        with open(cfg, "w") as f:
            json.dump(TINY, f)
        events = os.path.join(tmp, "step.txt")
        m = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "measure_memory.py"),
                            "--config", cfg, "--device", "cpu", "--micro-batch", "2",
                            "--seq-len", "64", "--recompute", "full", "--steps", "2",
                            "--events-out", events, "--json"],
                           capture_output=True, text=True)
        if m.returncode != 0:
            failures.append(f"measure_memory.py --events-out failed: {m.stderr[-400:]}")
        else:
            measured = json.loads(m.stdout)
            live, cur, peak, ok = {}, 0, 0, True
            with open(events) as f:
                for i, line in enumerate(f):
                    n, of = map(int, line.split())
                    if of < 0:
                        live[i] = n
                        cur += n
                    elif of in live:
                        cur -= live.pop(of)
                    else:
                        ok = False
                    peak = max(peak, cur)
            want = measured["peak_bytes"] - measured["baseline_bytes"]
            if not ok or live or peak != want:
                failures.append(f"real step's events: well-formed {ok}, left alive {len(live)}, "
                                f"peak {peak} against the measured {want}")
            r = run(binary, events, "3")
            if r.returncode != 0 or json.loads(r.stdout)["peak_allocated_bytes"] < peak:
                failures.append(f"replay of the real step: {r.stdout}{r.stderr}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
