#!/usr/bin/python3
"""Tests of examples/train.py, the reference training entry point frenzyd launches.

Run from anywhere:

    /usr/bin/python3 tests/examples/train_test.py        # add -v for test names

Each test starts train.py as real processes (one per rank, with the environment frenzyd's
backends set) on a deliberately tiny model (2 layers, hidden 32, byte vocabulary), so the whole
file takes about half a minute on two CPU cores. Progress reports go to a small HTTP server
running inside the test.
"""

import http.server
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
PYTHON = sys.executable
TIMEOUT_S = 120  # per process; a hung rank fails the test instead of hanging it

# The smallest model that still learns the corpus within a few dozen steps. One step consumes
# global_batch * seq_len = 64 tokens.
TINY = {"layers": 2, "hidden": 32, "heads": 4, "seq_len": 32, "micro_batch": 2,
        "global_batch": 2, "precision": "fp32"}
TOKENS_PER_STEP = 2 * 32

STEP_LINE = re.compile(r"^step (\d+) tokens (\d+) loss (\S+) tokens/s (\S+) peak_bytes (\d+)",
                       re.MULTILINE)


def plan(**fields):
    return {**TINY, **fields}


def clean_env(**extra):
    """The test's environment without anything that would make train.py think it is part of a
    distributed run or a frenzyd job, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FRENZY_") and k not in (
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT")}
    env.update(extra)
    return env


def train(plan_fields, workdir, *args, **env):
    """Runs one single-process training to completion; the plan goes in FRENZY_PLAN."""
    return subprocess.run(
        [PYTHON, str(TRAIN), "--workdir", str(workdir), *args],
        env=clean_env(FRENZY_PLAN=json.dumps(plan_fields), **env),
        capture_output=True, text=True, timeout=TIMEOUT_S)


def step_lines(stdout):
    """(step, tokens, loss) of every progress line."""
    return [(int(m[1]), int(m[2]), float(m[3])) for m in STEP_LINE.finditer(stdout)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(fields, ranks, workdir, *args, local_world=None, report_url=None):
    """Runs `ranks` processes of train.py (one per rank, the launcher's environment, ranks of a
    node numbered together) to completion; returns [(returncode, stdout, stderr)] by rank."""
    port, procs = free_port(), []
    local_world = local_world or ranks
    for rank in range(ranks):
        env = clean_env(RANK=str(rank), WORLD_SIZE=str(ranks),
                        LOCAL_RANK=str(rank % local_world), LOCAL_WORLD_SIZE=str(local_world),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
                        FRENZY_PLAN=json.dumps(fields), FRENZY_WORKDIR=str(workdir),
                        **({"FRENZY_REPORT_URL": report_url} if report_url else {}))
        procs.append(subprocess.Popen([PYTHON, str(TRAIN), "--dist-timeout", "60", *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outputs


class ReportServer:
    """Collects the JSON bodies and Authorization headers POSTed to it."""

    def __init__(self):
        self.reports = []  # (authorization header, body)
        reports = self.reports

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                reports.append((self.headers.get("Authorization"), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):  # keep the test output quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/jobs/j-000001/progress"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def load_checkpoint(workdir):
    return torch.load(pathlib.Path(workdir) / "checkpoint.pt", map_location="cpu")


class TrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="frenzy-train-test-")
        self.dir = pathlib.Path(self.tmp.name)
        self.server = ReportServer()

    def tearDown(self):
        self.server.close()
        self.tmp.cleanup()

    def assertSucceeded(self, result):
        self.assertEqual(result.returncode, 0,
                         f"train.py failed\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")

    def test_single_process_run_checkpoints_and_reports(self):
        # 10 steps; the plan comes from a file this time.
        plan_file = self.dir / "plan.json"
        plan_file.write_text(json.dumps(plan(tokens=10 * TOKENS_PER_STEP, gpu="A100-80GB")))
        result = subprocess.run(
            [PYTHON, str(TRAIN), "--plan", str(plan_file), "--report-every", "4"],
            env=clean_env(FRENZY_WORKDIR=str(self.dir), FRENZY_REPORT_URL=self.server.url,
                          FRENZY_TOKEN="s3cret"),
            capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertSucceeded(result)

        # One printed line per report: every 4 steps and at the end.
        lines = step_lines(result.stdout)
        self.assertEqual([(s, t) for s, t, _ in lines],
                         [(4, 4 * TOKENS_PER_STEP), (8, 8 * TOKENS_PER_STEP),
                          (10, 10 * TOKENS_PER_STEP)])

        # The same reports reached the server, authenticated and complete.
        self.assertEqual(len(self.server.reports), 3)
        for auth, body in self.server.reports:
            self.assertEqual(auth, "Bearer s3cret")
            for field in ("step", "tokens", "loss", "peak_bytes", "peak_source",
                          "tokens_per_s", "rank_peaks", "final"):
                self.assertIn(field, body)
            self.assertEqual(body["tokens"], body["step"] * TOKENS_PER_STEP)
            self.assertGreater(body["loss"], 0)
            self.assertGreater(body["tokens_per_s"], 0)
            self.assertEqual(body["peak_source"], "cpu_max_rss")
            self.assertEqual(body["rank_peaks"], [body["peak_bytes"]])
            # A real RSS: more than the bare interpreter, less than the machine.
            self.assertGreater(body["peak_bytes"], 10 << 20)
            self.assertLess(body["peak_bytes"], 64 << 30)
        bodies = [body for _, body in self.server.reports]
        self.assertEqual([b["step"] for b in bodies], [4, 8, 10])
        self.assertEqual([b["final"] for b in bodies], [False, False, True])
        for body, (_, _, printed) in zip(bodies, lines):
            self.assertAlmostEqual(body["loss"], printed, delta=1e-4)  # printed with 4 decimals

        # The checkpoint holds the finished state, and the atomic write left nothing behind.
        ckpt = load_checkpoint(self.dir)
        self.assertEqual((ckpt["step"], ckpt["tokens"]), (10, 10 * TOKENS_PER_STEP))
        self.assertIn("embed.weight", ckpt["model"])
        self.assertTrue(ckpt["optimizer"]["state"], "optimizer state missing")
        self.assertEqual(len(ckpt["rng"]), 1)
        self.assertEqual(ckpt["plan"]["gpu"], "A100-80GB")
        self.assertEqual(sorted(p.name for p in self.dir.iterdir()),
                         ["checkpoint.pt", "plan.json"])

    def test_resume_continues_and_matches_an_uninterrupted_run(self):
        goal = plan(tokens=8 * TOKENS_PER_STEP)
        straight, interrupted = self.dir / "straight", self.dir / "interrupted"
        self.assertSucceeded(train(goal, straight))

        # Stopped after 4 of 8 steps (as a preempted run would have been), then relaunched.
        first = train(goal, interrupted, "--max-steps", "4", "--report-every", "2")
        self.assertSucceeded(first)
        self.assertEqual(load_checkpoint(interrupted)["step"], 4)
        second = train(goal, interrupted, "--report-every", "2",
                       FRENZY_REPORT_URL=self.server.url)
        self.assertSucceeded(second)
        self.assertIn("resumed from step 4", second.stdout)
        steps = [s for s, _, _ in step_lines(second.stdout)]
        self.assertEqual(steps, [6, 8])
        reported = [body["step"] for _, body in self.server.reports]
        self.assertEqual(reported, [6, 8])
        self.assertTrue(all(s > 4 for s in reported))

        # The checkpoint carries everything that shapes training (weights, optimizer moments,
        # the data stream's position): stopping and resuming changes nothing.
        a, b = load_checkpoint(straight), load_checkpoint(interrupted)
        self.assertEqual((b["step"], b["tokens"]), (8, 8 * TOKENS_PER_STEP))
        for name, tensor in a["model"].items():
            self.assertTrue(torch.equal(tensor, b["model"][name]), f"{name} differs")

        # Relaunching a finished run trains nothing more and still succeeds.
        again = train(goal, interrupted)
        self.assertSucceeded(again)
        self.assertIn("resumed from step 8", again.stdout)
        self.assertEqual(load_checkpoint(interrupted)["step"], 8)

    def test_two_rank_ddp_with_sharded_optimizer(self):
        # dp 2, 2 micro-batches of 2 per rank per step (global batch 8), ZeRO-1 under gloo.
        ranks, port = 2, free_port()
        fields = plan(dp=2, gpus=2, micro_batch=2, global_batch=8, zero=1,
                      tokens=6 * 8 * 32)
        procs = []
        for rank in range(ranks):
            env = clean_env(RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                            LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
                            FRENZY_PLAN=json.dumps(fields), FRENZY_WORKDIR=str(self.dir),
                            FRENZY_REPORT_URL=self.server.url)
            procs.append(subprocess.Popen(
                [PYTHON, str(TRAIN), "--report-every", "3", "--dist-timeout", "60"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outputs = []
        try:
            for p in procs:
                outputs.append(p.communicate(timeout=TIMEOUT_S))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for rank, (p, (out, err)) in enumerate(zip(procs, outputs)):
            self.assertEqual(p.returncode, 0, f"rank {rank} failed\n{out}\n{err}")

        # Rank 0 alone prints and reports; the tokens count both ranks.
        self.assertEqual([(s, t) for s, t, _ in step_lines(outputs[0][0])],
                         [(3, 3 * 256), (6, 6 * 256)])
        self.assertEqual(step_lines(outputs[1][0]), [])
        self.assertEqual(len(self.server.reports), 2)
        for _, body in self.server.reports:
            self.assertEqual(len(body["rank_peaks"]), 2)
            self.assertEqual(body["peak_bytes"], max(body["rank_peaks"]))
            self.assertEqual(body["world_size"], 2)

        # One checkpoint, with the full (consolidated) optimizer state and each rank's own data
        # stream: the ranks must not train on the same windows.
        ckpt = load_checkpoint(self.dir)
        self.assertEqual(ckpt["step"], 6)
        n_params = len(list(ckpt["model"]))
        self.assertEqual(len(ckpt["optimizer"]["state"]), n_params - 1)  # head tied to embed
        self.assertEqual(len(ckpt["rng"]), 2)
        self.assertFalse(torch.equal(ckpt["rng"][0]["data"], ckpt["rng"][1]["data"]))

    def assertRanksSucceeded(self, outputs):
        for rank, (code, out, err) in enumerate(outputs):
            self.assertEqual(code, 0, f"rank {rank} failed\n{out}\n{err}")

    def test_sharded_runs_follow_the_unsharded_run(self):
        # The same 2-rank job (same data on each rank, fp32, AdamW with clipping) three ways:
        # DDP with torch's AdamW is the reference; ZeRO-2 and ZeRO-3 (this script's own
        # sharding, sharding.py) must follow its loss curve and end on the same weights, with
        # an unsharded checkpoint (the model's state_dict, torch AdamW's state_dict).
        fields = plan(dp=2, gpus=2, micro_batch=2, global_batch=8, tokens=6 * 8 * 32,
                      recompute="full")
        runs = {}
        for zero in (0, 2, 3):
            workdir = self.dir / f"zero{zero}"
            outputs = run_ranks(dict(fields, zero=zero), 2, workdir, "--report-every", "2")
            self.assertRanksSucceeded(outputs)
            runs[zero] = (step_lines(outputs[0][1]), load_checkpoint(workdir), outputs[0][1])
        self.assertIn("zero 3 (full shard over 2 of 2 ranks)", runs[3][2])
        ref_lines, ref, _ = runs[0]
        self.assertEqual([s for s, _, _ in ref_lines], [2, 4, 6])
        for zero in (2, 3):
            lines, ckpt, _ = runs[zero]
            self.assertEqual([s for s, _, _ in lines], [2, 4, 6])
            for (_, _, want), (_, _, got) in zip(ref_lines, lines):
                self.assertAlmostEqual(got, want, delta=2e-4)
            self.assertEqual(sorted(ckpt["model"]), sorted(ref["model"]))
            for name, tensor in ref["model"].items():
                torch.testing.assert_close(ckpt["model"][name], tensor, atol=1e-5, rtol=1e-4,
                                           msg=f"zero {zero}: {name}")
            self.assertEqual(sorted(ckpt["optimizer"]["state"]), sorted(ref["optimizer"]["state"]))
            for index, want in ref["optimizer"]["state"].items():
                got = ckpt["optimizer"]["state"][index]
                self.assertEqual(float(got["step"]), float(want["step"]))
                torch.testing.assert_close(got["exp_avg"], want["exp_avg"], atol=1e-6, rtol=1e-3)

    def test_hybrid_shard_and_resume_on_another_layout(self):
        # 4 ranks as 2 nodes of 2: hybrid sharding (a copy per node) against the same job under
        # DDP; then the hybrid run's checkpoint resumes as a 2-rank full-shard run and as a
        # single process: every layout reads every other's checkpoint.
        fields = plan(dp=4, gpus=4, micro_batch=1, global_batch=4, tokens=4 * 4 * 32)
        ref_dir, hybrid_dir = self.dir / "ddp", self.dir / "hybrid"
        # Without clipping, which would hide a wrongly scaled gradient (as Adam's update does).
        ref_out = run_ranks(fields, 4, ref_dir, "--report-every", "2", "--clip-grad", "0",
                            local_world=2)
        self.assertRanksSucceeded(ref_out)
        outputs = run_ranks(dict(fields, zero=3, shard_group=2), 4, hybrid_dir, "--report-every",
                            "2", "--clip-grad", "0", local_world=2)
        self.assertRanksSucceeded(outputs)
        self.assertIn("zero 3 (hybrid shard over 2 of 4 ranks)", outputs[0][1])
        want_lines, got_lines = step_lines(ref_out[0][1]), step_lines(outputs[0][1])
        self.assertEqual([s for s, _, _ in got_lines], [2, 4])
        self.assertEqual([s for s, _, _ in want_lines], [2, 4])
        for (_, _, want), (_, _, got) in zip(want_lines, got_lines):
            self.assertAlmostEqual(got, want, delta=2e-4)
        ref, hybrid = load_checkpoint(ref_dir), load_checkpoint(hybrid_dir)
        for name, tensor in ref["model"].items():
            torch.testing.assert_close(hybrid["model"][name], tensor, atol=1e-5, rtol=1e-4,
                                       msg=name)
        # Adam's update hides a gradient's scale; its moments do not.
        for index, want in ref["optimizer"]["state"].items():
            torch.testing.assert_close(hybrid["optimizer"]["state"][index]["exp_avg"],
                                       want["exp_avg"], atol=1e-6, rtol=1e-3)

        longer = dict(fields, tokens=6 * 4 * 32)
        resumed = run_ranks(dict(longer, dp=2, gpus=2, global_batch=4, micro_batch=2, zero=3),
                            2, hybrid_dir, "--report-every", "2")
        self.assertRanksSucceeded(resumed)
        self.assertIn("resumed from step 4", resumed[0][1])
        self.assertEqual([s for s, _, _ in step_lines(resumed[0][1])], [6])
        single = train(dict(longer, tokens=8 * 4 * 32, micro_batch=4, dp=1, gpus=1),
                       hybrid_dir)
        self.assertSucceeded(single)
        self.assertIn("resumed from step 6", single.stdout)
        self.assertEqual(load_checkpoint(hybrid_dir)["step"], 8)

    def test_bad_shard_groups_are_refused(self):
        for fields, message in (
                (plan(dp=2, gpus=2, global_batch=4, zero=1, shard_group=1),
                 "needs zero 2 or 3"),
                (plan(dp=4, gpus=4, global_batch=8, zero=3, shard_group=3),
                 "shard_group 3 does not divide dp 4")):
            outputs = run_ranks(fields, fields["dp"], self.dir)
            for code, _, err in outputs:
                self.assertEqual(code, 2, err)
                self.assertIn(message, err)
                self.assertNotIn("Traceback", err)

    def test_tensor_parallelism_is_refused(self):
        result = train(plan(tp=2, gpus=2, dp=1), self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("tensor/pipeline/context parallelism needs Megatron; this script "
                      "supports data parallelism only", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse((self.dir / "checkpoint.pt").exists())

    def test_what_this_script_cannot_run_is_refused(self):
        for fields, message in ((plan(ep=2), "expert parallelism"),
                                (plan(offload="optimizer"), "plan offloads"),
                                (plan(offload_activations=True), "plan offloads")):
            result = train(fields, self.dir)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(message, result.stderr)
            self.assertNotIn("Traceback", result.stderr)
        self.assertFalse((self.dir / "checkpoint.pt").exists())
        # What the planner writes for a plan that offloads nothing passes.
        self.assertSucceeded(train(plan(tokens=2 * TOKENS_PER_STEP, offload="none",
                                        offload_activations=False, ep=1), self.dir))

    def run_per_rank_data(self, fields, corpora, workdir):
        """Like run_ranks, with rank r reading corpus corpora[r]."""
        port, procs = free_port(), []
        for rank, corpus in enumerate(corpora):
            env = clean_env(RANK=str(rank), WORLD_SIZE=str(len(corpora)), LOCAL_RANK=str(rank),
                            LOCAL_WORLD_SIZE=str(len(corpora)), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
                            FRENZY_PLAN=json.dumps(fields), FRENZY_WORKDIR=str(workdir))
            procs.append(subprocess.Popen(
                [PYTHON, str(TRAIN), "--dist-timeout", "60", "--report-every", "2", "--data",
                 str(corpus)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        outputs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=TIMEOUT_S)
                outputs.append((p.returncode, out, err))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.assertRanksSucceeded(outputs)
        return outputs

    def test_heterogeneous_data_groups_weigh_gradients_by_their_share_of_the_batch(self):
        # Two corpora of one repeated byte: every window of a corpus is the same sequence, so a
        # step's gradient is the batch's mix of the two sequences' gradients. Heterogeneous data
        # parallelism, rank 0 taking 3 sequences a step (micro-batch 1, accumulation 3) of "a"
        # and rank 1 one sequence of "b", must give the step of four ranks taking one each,
        # three on "a" and one on "b": (3 g_a + g_b) / 4, not the ranks' plain mean
        # (g_a + g_b) / 2. The same weights after 4 steps.
        a, b = self.dir / "a.txt", self.dir / "b.txt"
        a.write_bytes(b"a" * 400)
        b.write_bytes(b"b" * 400)
        tokens = 4 * 4 * 32
        hetero = plan(dp=2, gpus=2, micro_batch=1, global_batch=4, tokens=tokens,
                      data_groups=[{"gpu": "A100-80GB", "dp": 1, "micro_batch": 1, "batch": 3},
                                   {"gpu": "V100-32GB", "dp": 1, "micro_batch": 1, "batch": 1}])
        outputs = self.run_per_rank_data(hetero, [a, b], self.dir / "hetero")
        self.assertIn("rank 0: micro_batch 1 accumulation 3", outputs[0][1])
        self.assertIn("rank 1: micro_batch 1 accumulation 1", outputs[1][1])
        self.assertEqual([(s, t) for s, t, _ in step_lines(outputs[0][1])],
                         [(2, 2 * 128), (4, 4 * 128)])
        homo = plan(dp=4, gpus=4, micro_batch=1, global_batch=4, tokens=tokens)
        self.run_per_rank_data(homo, [a, a, a, b], self.dir / "homo")
        plain = plan(dp=2, gpus=2, micro_batch=1, global_batch=2, tokens=4 * 2 * 32)
        self.run_per_rank_data(plain, [a, b], self.dir / "plain")
        want = load_checkpoint(self.dir / "homo")["model"]
        got = load_checkpoint(self.dir / "hetero")["model"]
        unweighted = load_checkpoint(self.dir / "plain")["model"]
        differs = False
        for name, tensor in want.items():
            torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=1e-4, msg=name)
            differs = differs or not torch.allclose(unweighted[name], tensor, atol=1e-4)
        self.assertTrue(differs, "the plain mean over ranks should train other weights")

    def test_bad_data_groups_are_refused(self):
        base = plan(micro_batch=1, global_batch=4)
        for groups, message in [
                ([{"dp": 1, "micro_batch": 1, "batch": 4}], "two groups or more"),
                ([{"dp": 1, "micro_batch": 2, "batch": 3}, {"dp": 1, "micro_batch": 1, "batch": 1}],
                 "not a multiple of dp 1 x micro_batch 2"),
                ([{"dp": 1, "micro_batch": 1, "batch": 2}, {"dp": 1, "micro_batch": 1, "batch": 1}],
                 "add up to 3; global_batch is 4"),
                ([{"dp": 1, "micro_batch": 1, "batch": 3}, {"dp": 1, "micro_batch": 1, "batch": 1}],
                 "data_groups have 2 ranks; dp is 1")]:
            result = train(dict(base, data_groups=groups), self.dir)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(message, result.stderr)
            self.assertNotIn("Traceback", result.stderr)

    def test_fractional_gradient_accumulation_is_refused(self):
        # 6 sequences per step cannot be made of micro-batches of 4 on one rank.
        result = train(plan(micro_batch=4, global_batch=6), self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("global_batch 6 is not a multiple of micro_batch 4", result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_loss_decreases_on_the_corpus(self):
        # 30 steps of 4 x 32 bytes. An untrained model scores ln(256) = 5.55 nats; a model that
        # only learned the byte frequencies of English-like text scores about 3.5-4.
        # The daemon is unreachable this time (nothing listens on the port): one warning, and
        # training goes on.
        result = train(plan(micro_batch=4, global_batch=4, tokens=30 * 4 * 32), self.dir,
                       "--report-every", "5", "--seed", "7",
                       FRENZY_REPORT_URL=f"http://127.0.0.1:{free_port()}/progress")
        self.assertSucceeded(result)
        self.assertEqual(result.stderr.count("cannot report progress"), 1, result.stderr)
        losses = [loss for _, _, loss in step_lines(result.stdout)]
        self.assertEqual(len(losses), 6)
        self.assertGreater(losses[0], 4.8, losses)   # it starts near chance ...
        self.assertLess(losses[-1], 3.9, losses)     # ... and has learned something real
        self.assertLess(losses[-1], losses[0] - 1.0, losses)
        self.assertLess(losses[-1], min(losses[:3]), losses)


sys.path.insert(0, str(REPO / "examples"))
import sharding  # noqa: E402  (examples/sharding.py, beside train.py)


class ShardedScalerTest(unittest.TestCase):
    """fp16 loss scaling over shards; on one rank (no process group), as its logic is the same."""

    def setUp(self):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
        model.blocks = []  # no decoder blocks: one root unit holds both layers
        self.sharded = sharding.ShardedModel(model, 3, sharding.Mesh(0, 1, 1),
                                             torch.device("cpu"))
        self.unit = self.sharded.root
        self.optimizer = sharding.ShardAdamW(self.sharded.units, 0.1, (0.9, 0.95), 0.0)

    def test_overflow_skips_the_step_and_halves_the_scale(self):
        scaler = sharding.ShardedScaler(True, init_scale=1024.0, growth_interval=3)
        before = self.unit.shard.detach().clone()
        grad = torch.ones_like(self.unit.shard) * 1024.0
        grad[0] = float("inf")
        self.unit.shard.grad = grad
        self.assertTrue(scaler.unscale_and_check(self.optimizer, distributed=False))
        scaler.update(True)
        self.assertEqual(scaler.scale_value, 512.0)
        self.assertTrue(torch.equal(self.unit.shard.detach(), before))  # nothing stepped

        # Finite gradients: unscaled (1024 / 512 = 2), the step taken; the scale doubles after
        # growth_interval good steps in a row.
        for i in range(3):
            self.unit.shard.grad = torch.full_like(self.unit.shard, 2.0 * scaler.scale_value)
            self.assertFalse(scaler.unscale_and_check(self.optimizer, distributed=False))
            self.assertTrue(torch.equal(self.unit.shard.grad,
                                        torch.full_like(self.unit.shard, 2.0)))
            self.optimizer.step()
            scaler.update(False)
        self.assertEqual(scaler.scale_value, 1024.0)
        self.assertFalse(torch.equal(self.unit.shard.detach(), before))
        # torch.cuda.amp.GradScaler's state_dict keys (its documented state).
        self.assertEqual(sorted(scaler.state_dict()), sorted(
            ["scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"]))
        other = sharding.ShardedScaler(True)
        other.load_state_dict(scaler.state_dict())
        self.assertEqual(other.scale_value, 1024.0)

    def test_disabled_scaler_changes_nothing(self):
        scaler = sharding.ShardedScaler(False)
        loss = torch.tensor(3.0)
        self.assertIs(scaler.scale(loss), loss)
        self.unit.shard.grad = torch.full_like(self.unit.shard, float("nan"))
        self.assertFalse(scaler.unscale_and_check(self.optimizer, distributed=False))
        self.assertEqual(scaler.state_dict(), {})


if __name__ == "__main__":
    unittest.main()
