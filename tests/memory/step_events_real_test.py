#!/usr/bin/python3
"""MARP's replayed step against real allocation sequences (bench/step_events_check.py's single
steps, their sequences stored in tests/data/step_events/).

Each file is what PyTorch allocated and freed, op by op, in one CPU training step of a small
Llama (`tools/measure_memory.py --device cpu --events-out`, 2026-12-07; the configs are
bench/step_events/). Replayed through the allocator model (frenzy_alloc_replay), it reserves
some bytes above its allocated peak; MARP's `step_excess_bytes` is the same difference for the
step it builds from its account. The bounds are what the synthetic step is known to reach
(bench/RESULTS.md, 2026-12-07), so that a change that loses them is seen:
  * one sequence a step: within 5% of the real excess (252-323 MB real; 1.5-1.9% off now);
  * two sequences, checkpointed: at least 40% of it (46-74% now: the synthetic step cuts a
    backward step's bytes into tensors of one size, the real ones vary) and never above it.

usage: step_events_real_test.py FRENZY_BIN FRENZY_ALLOC_REPLAY_BIN
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import step_events_check as check  # noqa: E402

EVENTS = os.path.join(ROOT, "tests", "data", "step_events")


def main():
    frenzy, replay = sys.argv[1], sys.argv[2]
    failures = []
    cases = [c for c in check.CASES if c[3] is not None]
    for name, cfg, mb, seq, rc, mflags, pflags in cases:
        path = os.path.join(EVENTS, name + ".txt")
        if not os.path.exists(path):
            failures.append(f"{name}: no stored sequence {path}")
            continue
        # The stored file is used as it is: no measurement runs (python3-torch not needed).
        reserved, peak = check.real_reserve(None, replay, cfg, mb, seq, rc, mflags, path)
        real = reserved - peak
        pred = check.marp(frenzy, cfg, mb, seq, rc, pflags)
        print(f"{name}: real {real / 1e6:.1f} MB, MARP {pred / 1e6:.1f} MB")
        if real <= 0:
            failures.append(f"{name}: the real sequence reserves nothing above its peak")
        elif mb == 1 and abs(pred - real) > 0.05 * real:
            failures.append(f"{name}: MARP {pred} bytes, more than 5% from the real {real}")
        elif mb > 1 and not 0.4 * real <= pred <= real:
            failures.append(f"{name}: MARP {pred} bytes, outside [40%, 100%] of the real {real}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
