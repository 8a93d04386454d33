#!/usr/bin/env python3
"""How much of the caching allocator's reserve FSDP1's initialisation leaves behind (a diagnostic).

FSDP1 with `sync_module_states=True` and the model in host memory on rank 0 (Answer.AI's
fsdp_qlora with its default `low_memory`; Accelerate's `fsdp_cpu_ram_efficient_loading`)
initialises its units one after another, innermost first (the adapters' Linear modules, then each
decoder layer, then the root). For each unit, PyTorch 2.x's FSDP1 (`_init_param_handle_from_module`):
  1. moves the unit's own tensors to the GPU one by one (`_move_module_to_device`);
  2. broadcasts them from rank 0 (`_sync_module_params_and_buffers` -> `dist._broadcast_coalesced`
     with 250 MiB buckets: a bucket closes once it reaches 250 MiB, a bucket of several tensors is
     flattened into a copy, one of a single tensor is a view, at most two buckets in flight);
  3. flattens them into one FlatParameter (a copy of the whole unit), clones this rank's shard,
     frees the unsharded flat parameter and, when the unit's function returns, the moved tensors.
The caching allocator keeps every freed block, so the reserve after wrapping is the shards plus the
blocks the transients left, split by the shards allocated among them.

This script replays that sequence through a model of PyTorch's CUDA caching allocator (the rules
of c10/cuda/CUDACachingAllocator.cpp as its comments and PyTorch's "CUDA semantics: memory
management" notes give them: 512-byte rounding, a small pool for requests up to 1 MiB and a large
pool per stream, best fit, splitting when more than 1 MiB would be left in the large pool, 2 MiB /
20 MiB / rounded-to-2-MiB segments, freed blocks merged with free neighbours) and compares, on the
held-out Answer.AI fsdp_qlora rows (data/measurements/heldout.csv, ho022-ho033), MARP's reserved
prediction with a bound that counts the initialisation's reserve:
    after = init_reserved + max(0, compute - init_free) + gathered
where `compute` is MARP's allocated peak less the states the initialisation left and the gathered
units (all-gathered on FSDP's unshard stream, whose pool the compute stream cannot reuse), and
`init_free` is the cache the compute stream may reuse (optimistically all of it).

usage: tools/fsdp_init_replay.py FRENZY_BIN [--loss-chain]
(--loss-chain: the HF loss's vocabulary-sized tensors alone through the allocator, a diagnostic
of the step's reserve; bench/RESULTS.md.)
Nothing here is fitted. bench/RESULTS.md (2026-12-06) records what it prints. MARP now runs the
same replay (`frenzy predict --fsdp-init host|host-sync`, src/memory/fsdp_init.h); this script,
written apart from it, is the independent implementation its test compares with (the table's
"MARP reserved" column is whatever MARP predicts for the row, with or without the flag).
"""
import bisect
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_published  # noqa: E402  (the held-out rows' predict arguments)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
GIB = 1 << 30
BROADCAST_BUCKET = 250 * MIB  # torch.distributed.fsdp._init_utils.PARAM_BROADCAST_BUCKET_SIZE


class CachingAllocator:
    """PyTorch's CUDA caching allocator, default settings, no empty_cache."""

    def __init__(self):
        self.free = {}  # (stream, small) -> sorted [(size, id)]
        self.blocks = {}  # id -> [size, stream, small, free, prev, next]
        self.next_id = 0
        self.allocated = self.reserved = 0

    @staticmethod
    def round_size(n):
        return 512 if n < 512 else (n + 511) // 512 * 512

    @staticmethod
    def segment_size(n):
        if n <= MIB:
            return 2 * MIB
        if n < 10 * MIB:
            return 20 * MIB
        return (n + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)

    def _new(self, size, stream, small, prev=None, nxt=None):
        i = self.next_id
        self.next_id += 1
        self.blocks[i] = [size, stream, small, True, prev, nxt]
        return i

    def malloc(self, n, stream=0):
        size = self.round_size(n)
        small = size <= MIB
        pool = self.free.setdefault((stream, small), [])
        k = bisect.bisect_left(pool, (size, -1))
        if k < len(pool):
            _, b = pool.pop(k)
        else:
            b = self._new(self.segment_size(size), stream, small)
            self.reserved += self.blocks[b][0]
        blk = self.blocks[b]
        rest = blk[0] - size
        if (rest >= 512) if small else (rest > MIB):
            r = self._new(rest, stream, small, prev=b, nxt=blk[5])
            if blk[5] is not None:
                self.blocks[blk[5]][4] = r
            blk[5] = r
            blk[0] = size
            bisect.insort(pool, (rest, r))
        blk[3] = False
        self.allocated += blk[0]
        return b

    def release(self, b):
        blk = self.blocks[b]
        self.allocated -= blk[0]
        blk[3] = True
        pool = self.free[(blk[1], blk[2])]
        p = blk[4]
        if p is not None and self.blocks[p][3]:
            pool.remove((self.blocks[p][0], p))
            self.blocks[p][0] += blk[0]
            self.blocks[p][5] = blk[5]
            if blk[5] is not None:
                self.blocks[blk[5]][4] = p
            del self.blocks[b]
            b, blk = p, self.blocks[p]
        n = blk[5]
        if n is not None and self.blocks[n][3]:
            pool.remove((self.blocks[n][0], n))
            blk[0] += self.blocks[n][0]
            blk[5] = self.blocks[n][5]
            if blk[5] is not None:
                self.blocks[blk[5]][4] = b
            del self.blocks[n]
        bisect.insort(pool, (blk[0], b))

    def cached_free(self, stream=0):
        return sum(s for (st, _), pool in self.free.items() if st == stream for s, _ in pool)


def init_unit(a, params, kept, shards, offload):
    """One FSDP1 unit from host memory: move, broadcast, flatten, shard (module order)."""
    for k in kept:  # non-parameter state moved with the module and kept (NF4 statistics)
        a.malloc(k)
    moved = [a.malloc(p) for p in params]
    buckets, cur, size = [], [], 0
    for p in params:
        cur.append(p)
        size += p
        if size >= BROADCAST_BUCKET:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    in_flight = []
    for bucket in buckets:
        if len(in_flight) >= 2:
            done = in_flight.pop(0)
            if done is not None:
                a.release(done)
        in_flight.append(a.malloc(sum(bucket)) if len(bucket) > 1 else None)
    for done in in_flight:
        if done is not None:
            a.release(done)
    flat = a.malloc(sum(params))
    shard = a.malloc((sum(params) + shards - 1) // shards)
    a.release(flat)
    for m in moved:
        a.release(m)
    if offload:  # CPUOffload(offload_params=True): the shard goes back to host memory
        a.release(shard)


def llama_units(cfg, weight_bytes, nf4, lora_rank, targets, adapter_bytes):
    """The FSDP units of a Llama-type model as fsdp_qlora wraps it: every adapter Linear, every
    decoder layer (its base weights and norms), then the root (embeddings, final norm, output)."""
    h, ffn = cfg["hidden_size"], cfg["intermediate_size"]
    kv = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * (h // cfg["num_attention_heads"])
    vocab, layers = cfg["vocab_size"], cfg["num_hidden_layers"]
    linears = [("q_proj", h, h), ("k_proj", h, kv), ("v_proj", h, kv), ("o_proj", h, h),
               ("gate_proj", h, ffn), ("up_proj", h, ffn), ("down_proj", ffn, h)]
    # bitsandbytes NF4 with double quantisation: 0.5 byte a weight packed into the 16-bit
    # storage FSDP flattens, and per linear its statistics (uint8 absmax per 64 weights, fp32 per
    # 256 absmax), moved with the module but not flattened.
    units = []
    for _ in range(layers):
        for name, i, o in linears:
            if lora_rank and name in targets:
                units.append(([i * lora_rank * adapter_bytes], []))
                units.append(([lora_rank * o * adapter_bytes], []))
        params = [int(i * o * (0.5 if nf4 else weight_bytes)) for _, i, o in linears]
        kept = [int(i * o / 64 + i * o / 64 / 256 * 4) for _, i, o in linears] if nf4 else []
        units.append((params + [h * weight_bytes, h * weight_bytes], kept))
    root = [vocab * h * weight_bytes, h * weight_bytes]
    if not cfg.get("tie_word_embeddings", False):
        root.insert(0, vocab * h * weight_bytes)  # lm_head comes first in FSDP's walk
    units.append((root, []))
    return units


def hf_loss_chain(b, s, vocab, keep_logits=True, a=None, upcast=True):
    """The vocabulary-sized tensors of an HF causal-LM loss as transformers ~4.38 computes it
    (`logits.float()`, `logits[..., :-1, :].contiguous()`, CrossEntropyLoss = log_softmax + nll)
    and its backward, replayed alone through the allocator (or through `a`, which then keeps
    what earlier steps cached): (reserved, live after backward).
    The shifted slice has one position fewer than the logits, so none of its blocks can hold the
    full-size gradient that the slice's backward allocates. upcast=False: the loss in the
    model's 16-bit dtype (Qwen's remote code of 2023: no `.float()`), the logits freed when the
    loss returns."""
    a = a if a is not None else CachingAllocator()
    n, shifted = b * s * vocab, b * (s - 1) * vocab
    e = 4 if upcast else 2
    half = a.malloc(2 * n)  # lm_head output, bf16
    full = None
    if upcast:
        full = a.malloc(4 * n)  # .float(): kept by the loop (output.logits) until after backward
        a.release(half)
    copy = a.malloc(e * shifted)  # the shifted slice made contiguous
    logp = a.malloc(e * shifted)  # log_softmax output, saved for backward
    a.release(copy)
    if not upcast:
        a.release(half)  # the model's output goes when the loss returns
    g_logp = a.malloc(e * shifted)  # nll_loss backward
    g_shift = a.malloc(e * shifted)  # log_softmax backward
    a.release(g_logp)
    a.release(logp)
    g_full = a.malloc(e * n)  # the slice's backward: zeros of the logits' size
    a.release(g_shift)
    if upcast:
        g_half = a.malloc(2 * n)  # .float()'s backward
        a.release(g_full)
        a.release(g_half)
        if not keep_logits:
            a.release(full)
    else:
        a.release(g_full)
    return a.reserved, a.allocated


def main():
    frenzy = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/bin/frenzy")
    if "--loss-chain" in sys.argv:
        print("| row | b x s | three fp32 logits-sized tensors (about what is live at once) | "
              "reserved by the chain alone |")
        print("|---|---|---|---|")
        with open(os.path.join(ROOT, "data/measurements/heldout.csv")) as f:
            for r in csv.DictReader(f):
                if "fsdp_qlora" not in r["source_url"]:
                    continue
                b, s = int(r["micro_batch"]), int(r["seq_len"])
                n = b * s * 32000
                reserved, _ = hf_loss_chain(b, s, 32000)
                # logits kept (4n), the log-softmax output and one gradient (4n each, near enough)
                print(f"| {r['id']} | {b} x {s} | {3 * 4 * n / GIB:.2f} GiB | "
                      f"{reserved / GIB:.2f} GiB |")
        return
    print("| row | setting | measured GiB | MARP reserved | init: reserved / free / live GiB "
          "| with the init bound | ")
    print("|---|---|---|---|---|---|")
    with open(os.path.join(ROOT, "data/measurements/heldout.csv")) as f:
        rows = [r for r in csv.DictReader(f) if "fsdp_qlora" in r["source_url"]]
    for r in rows:
        est = compare_published.predict_row(frenzy, r)
        with open(os.path.join(ROOT, "data/models", r["model"] + ".json")) as f:
            cfg = json.load(f)["config"]
        args = r["args"].split()
        nf4 = "qlora" in args
        offload = "--offload" in args
        targets = args[args.index("--lora-targets") + 1].split(",")
        rank = int(args[args.index("--lora-rank") + 1])
        shards = int(r["dp"])
        a = CachingAllocator()
        for params, kept in llama_units(cfg, 2, nf4, rank, targets, 2):
            init_unit(a, params, kept, shards, offload)
        h = cfg["hidden_size"]
        bare = llama_units(cfg, 2, nf4, 0, [], 2)  # without adapter units: layers, then root
        layer, root = sum(bare[0][0]), sum(bare[-1][0])
        gathered = root + 2 * layer  # the root through the step and two layers (prefetch)
        peak = est["peak_bytes"]
        compute = max(0, peak - a.allocated - gathered)
        after = a.reserved + max(0, compute - a.cached_free()) + gathered
        bound = max(est["peak_reserved_bytes"], after)
        m = float(r["measured_gib"])
        marp = est["peak_reserved_bytes"] / GIB
        setting = (f"{'QLoRA' if nf4 else 'LoRA'} b{r['micro_batch']} s{r['seq_len']}"
                   f"{' offload' if offload else ''} ({r['model']}, h {h})")
        print(f"| {r['id']} | {setting} | {m:.2f} | {marp:.2f} ({(marp / m - 1) * 100:+.1f}%) | "
              f"{a.reserved / GIB:.2f} / {a.cached_free() / GIB:.2f} / {a.allocated / GIB:.2f} | "
              f"{bound / GIB:.2f} ({(bound / GIB / m - 1) * 100:+.1f}%) |")


if __name__ == "__main__":
    main()
