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

    def test_tensor_parallelism_is_refused(self):
        result = train(plan(tp=2, gpus=2, dp=1), self.dir)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("tensor/pipeline/context parallelism needs Megatron; this script "
                      "supports data parallelism only", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse((self.dir / "checkpoint.pt").exists())

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


if __name__ == "__main__":
    unittest.main()
