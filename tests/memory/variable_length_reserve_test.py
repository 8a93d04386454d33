#!/usr/bin/python3
"""tools/variable_length_reserve.py: the epoch replay on cases worked out by hand, and the length
draws' stated properties.

Loss chain in 16 bits (Qwen's remote code), b = 1, vocabulary V = 151,936, layers' checkpoints
of hidden 4,096 (16-bit). At L = 2,048 the logits-sized tensors are 2 x 2,048 x V = 622,329,856
bytes and the shifted ones 2 x 2,047 x V = 622,025,984; both round up to the same 2 MiB segment,
297 x 2 MiB = 622,854,144 bytes. The chain (lm_head output A; shifted copy B; log-softmax output
C; B and A freed; the nll gradient takes A, the log-softmax gradient B, neither leaving a
remainder over 1 MiB; A and C freed; the slice's full-size gradient fits A) reserves three
segments: 1,868,562,432 bytes. At L = 1,024 the segment is 149 x 2 MiB = 312,475,648 (311,164,928
rounded up), three of them 937,426,944. No 1,024 block holds a 2,048 tensor, so the epoch
[1,024, 2,048] reserves both sets, 2,805,989,376; the epoch [2,048, 1,024] only the first, since
the shorter step fits the cached blocks. A layer's checkpoint at 2,048 is 2 x 2,048 x 4,096 =
16,777,216 bytes, its own 16 MiB segment (at least 10 MiB: rounded to 2 MiB): two layers add
33,554,432.

usage: variable_length_reserve_test.py
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import variable_length_reserve as vlr  # noqa: E402

V, H = 151936, 4096
failures = []


def check(name, got, want):
    if got != want:
        failures.append(f"{name}: got {got}, want {want}")


check("one step at 2048", vlr.replay_epoch([2048], 1, H, 0, V, False), 1868562432)
check("repeated steps reuse the cache", vlr.replay_epoch([2048] * 3, 1, H, 0, V, False),
      1868562432)
check("one step at 1024", vlr.replay_epoch([1024], 1, H, 0, V, False), 937426944)
check("a longer step after a shorter one", vlr.replay_epoch([1024, 2048], 1, H, 0, V, False),
      2805989376)
check("a shorter step after a longer one", vlr.replay_epoch([2048, 1024], 1, H, 0, V, False),
      1868562432)
check("two layers' checkpoints", vlr.replay_epoch([2048], 1, H, 2, V, False),
      1868562432 + 33554432)
check("batches padded to their longest", vlr.batch_lengths([3, 1, 4, 1, 5], 2), [3, 4, 5])

# Gamma draws: the stated mean within 2% over 20,000 samples, `lo` respected, longer samples
# dropped or cut.
drawn = vlr.gamma_lengths(20000, 3234.4, 2547.5, 91, 10**9, True, seed=7)
mean = sum(drawn) / len(drawn)
if abs(mean - 3234.4) > 0.02 * 3234.4:
    failures.append(f"gamma mean {mean:.0f}, want 3234.4 within 2%")
if min(drawn) < 91:
    failures.append(f"a draw below the minimum: {min(drawn)}")
dropped = vlr.gamma_lengths(5000, 3234.4, 2547.5, 91, 2048, True, seed=7)
cut = vlr.gamma_lengths(5000, 3234.4, 2547.5, 91, 2048, False, seed=7)
if not dropped or max(dropped) > 2048 or len(dropped) >= 5000:
    failures.append("dropping: every kept sample at most 2048, some dropped")
if len(cut) != 5000 or max(cut) != 2048:
    failures.append("cutting: every sample kept, the longest cut to 2048")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("ok")
