#!/usr/bin/env python3
"""Hostile clients against a real frenzyd: every probe models one attack (or one mistake) that
a daemon listening on a socket and keeping its state on disk must survive.

Each probe starts its own frenzyd on loopback (sim backend, a temporary folder as its working
directory, a random token unless the probe says otherwise), attacks it, and kills it whatever
happens. One line per probe: PASS or FAIL, the probe's name and what was seen. Exits 1 if any
probe failed, 0 otherwise.

usage: tests/integration/hostile_clients.py FRENZYD [PROBE ...]
(with probe names, e.g. `slowloris deep_json`, runs only those; HOSTILE_VERBOSE=1 prints every
check as it is made)

Stdlib only. Raw sockets are used wherever an HTTP library would normalise the attack away
(slow or huge headers, a forged Host, a giant request target). Timeouts that are not what a
probe measures are generous: the script also runs against an AddressSanitizer build.
"""
import http.client
import json
import os
import re
import secrets
import select
import selectors
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRENZYD = None  # set by main()
# gpt2's learned position table holds 1024 positions: the default sequence (2048) does not fit.
VALID_SPEC = {"model": "gpt2", "tokens": 1e6, "global_batch": 8, "seq_len": 1024}
DEEP = 60_000  # nesting depth of the "deep JSON" attacks
VERBOSE = os.environ.get("HOSTILE_VERBOSE") == "1"  # print every check as it is made
STARTUP_S = 40  # how long a daemon may take to answer /healthz (sanitizer builds are slow)

_live = []  # every daemon started, killed at exit whatever happens


# ---------------------------------------------------------------------------------------------
# HTTP over raw sockets


class Response:
    """What came back: status (None if no answer), headers (lower-case names), body (bytes),
    elapsed seconds, and error (why there was no answer)."""

    def __init__(self, status=None, headers=None, body=b"", elapsed=0.0, error=None):
        self.status = status
        self.headers = headers or {}
        self.body = body
        self.elapsed = elapsed
        self.error = error

    def json(self):
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None

    def error_obj(self):
        """The body's "error" object, or None if the body is not `{"error": {...}}`."""
        j = self.json()
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return j["error"]
        return None

    def has_error_code(self):
        e = self.error_obj()
        return e is not None and isinstance(e.get("code"), str) and e["code"] != ""

    def __str__(self):
        if self.status is None:
            return f"no answer ({self.error}) after {self.elapsed:.2f} s"
        text = self.body[:160].decode("utf-8", "replace").replace("\n", " ")
        return f"{self.status} in {self.elapsed:.2f} s: {text}"


def _read_response(sock, deadline):
    buf = b""

    def more():
        nonlocal buf
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("timed out")
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return False
        buf += chunk
        return True

    while b"\r\n\r\n" not in buf:
        if not more():
            if not buf:
                raise ConnectionError("connection closed before any answer")
            raise ConnectionError(f"connection closed inside the answer's head: {buf[:80]!r}")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    buf = rest
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n and more():
            pass
        return status, headers, buf[:n]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            while b"\r\n" not in buf:
                if not more():
                    return status, headers, body
            size_line, _, buf = buf.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                return status, headers, body
            while len(buf) < size + 2:
                if not more():
                    return status, headers, body + buf
            body += buf[:size]
            buf = buf[size + 2:]
    try:
        while more():
            pass
    except socket.timeout:
        pass
    return status, headers, buf


def raw_request(port, data, timeout=10.0, source=None):
    """Sends `data` (the whole request, bytes) on a new connection and reads one answer."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if source:
            sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        send_error = None
        try:
            # In pieces, watching for an early answer: a server may answer a huge body or head
            # (413, 431) before reading it all, and close.
            view = memoryview(data)
            while view:
                readable, _, _ = select.select([sock], [], [], 0)
                if readable:
                    break
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                n = sock.send(view[:65536])
                view = view[n:]
        except OSError as e:
            send_error = e
        try:
            status, headers, body = _read_response(sock, deadline)
        except (OSError, ValueError, IndexError) as e:
            why = f"{type(e).__name__}: {e}"
            if send_error is not None:
                why += f" (sending failed first: {type(send_error).__name__}: {send_error})"
            return Response(error=why, elapsed=time.monotonic() - t0)
        return Response(status, headers, body, time.monotonic() - t0)
    except OSError as e:
        return Response(error=f"{type(e).__name__}: {e}", elapsed=time.monotonic() - t0)
    finally:
        sock.close()


AUTO = object()


def request(port, method, path, body=None, token=AUTO, headers=None, timeout=10.0,
            daemon=None, source=None):
    """One HTTP/1.1 request on a new connection ("Connection: close").

    body: a dict/list (sent as JSON), str or bytes (sent as is), or None. token: the bearer
    token (AUTO: the daemon's own; None: no Authorization header). headers: extra (name, value)
    pairs; a name given here replaces the default header of that name (Host, Content-Type...).
    """
    if daemon is not None:
        port = daemon.port
        if token is AUTO:
            token = daemon.token
    if token is AUTO:
        token = None
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
    elif isinstance(body, str):
        data = body.encode()
    else:
        data = body
    extra = list(headers or [])
    names = {k.lower() for k, _ in extra}
    hdrs = []
    if "host" not in names:
        hdrs.append(("Host", f"127.0.0.1:{port}"))
    if "connection" not in names:
        hdrs.append(("Connection", "close"))
    if data is not None:
        if "content-type" not in names:
            hdrs.append(("Content-Type", "application/json"))
        if "content-length" not in names:
            hdrs.append(("Content-Length", str(len(data))))
    if token is not None and "authorization" not in names:
        hdrs.append(("Authorization", "Bearer " + token))
    hdrs += extra
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs) + "\r\n"
    return raw_request(port, head.encode("latin-1") + (data or b""), timeout=timeout,
                       source=source)


# ---------------------------------------------------------------------------------------------
# Daemons


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A frenzyd in a temporary folder: `base/work` is its cwd (and holds frenzy.db unless told
    otherwise), `base/stderr.log` and `base/stdout.log` its output.

    token: RANDOM (a fresh random token), None (no --token), or a string. env: extra or
    removed (value None) environment variables; FRENZY_TOKEN is always removed unless given.
    """

    RANDOM = object()

    def __init__(self, token=RANDOM, port=None, db=None, cwd=None, extra=(), env=None):
        self.base = tempfile.mkdtemp(prefix="frenzy-hostile-")
        self.cwd = cwd or os.path.join(self.base, "work")
        os.makedirs(self.cwd, exist_ok=True)
        self.port = port or free_port()
        self.db = db or os.path.join(self.cwd, "frenzy.db")
        self.token = secrets.token_hex(16) if token is Daemon.RANDOM else token
        self.extra = list(extra)
        self.env = dict(os.environ)
        self.env.pop("FRENZY_TOKEN", None)
        for k, v in (env or {}).items():
            if v is None:
                self.env.pop(k, None)
            else:
                self.env[k] = v
        self.proc = None
        self.starts = 0

    @property
    def stderr_path(self):
        return os.path.join(self.base, "stderr.log")

    def argv(self):
        cmd = [FRENZYD, "--backend", "sim", "--listen", f"127.0.0.1:{self.port}", "--db", self.db]
        if self.token is not None:
            cmd += ["--token", self.token]
        return cmd + self.extra

    def spawn(self):
        """Starts the process without waiting for it to answer."""
        self.starts += 1
        with open(os.path.join(self.base, "stdout.log"), "ab") as out, \
                open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.argv(), cwd=self.cwd, stdout=out, stderr=err,
                                         env=self.env, stdin=subprocess.DEVNULL)
        _live.append(self)
        return self

    def start(self):
        """Starts it and waits until GET /healthz answers 200."""
        self.spawn()
        wait_healthy(self)
        return self

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def stderr_text(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_tail(self, n=300):
        return self.stderr_text()[-n:].replace("\n", " | ")

    def req(self, method, path, body=None, **kw):
        return request(self.port, method, path, body, daemon=self, **kw)

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False


def wait_healthy(d, timeout=STARTUP_S):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if d.proc.poll() is not None:
            raise Failure(f"frenzyd exited with {d.proc.returncode} before answering /healthz: "
                          f"{d.stderr_tail()}")
        last = request(d.port, "GET", "/healthz", token=None, timeout=3)
        if last.status == 200:
            return
        time.sleep(0.1)
    raise Failure(f"frenzyd did not answer /healthz within {timeout} s: {last}")


def wait_exit_or_serve(d, timeout):
    """For a daemon that must refuse to start: waits until it exits (returns its exit code) or
    answers /healthz (returns "serving") or `timeout` passes (returns "running")."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = d.proc.poll()
        if rc is not None:
            return rc
        if request(d.port, "GET", "/healthz", token=None, timeout=1).status == 200:
            time.sleep(0.3)  # it might still be on its way out
            rc = d.proc.poll()
            return rc if rc is not None else "serving"
        time.sleep(0.1)
    return "running"


# ---------------------------------------------------------------------------------------------
# Checks


class Failure(Exception):
    pass


class Checks:
    """Collects a probe's checks; the probe fails if any did. `ok(cond, what)`."""

    def __init__(self):
        self.failed = []
        self.passed = []

    def ok(self, cond, what):
        (self.passed if cond else self.failed).append(what)
        if VERBOSE:
            print(f"    {'ok  ' if cond else 'FAIL'} {what}", flush=True)
        return bool(cond)

    def result(self):
        if self.failed:
            raise Failure(f"{len(self.failed)} of {len(self.failed) + len(self.passed)} checks "
                          f"failed: " + "; ".join(self.failed))
        return f"{len(self.passed)} checks: " + "; ".join(self.passed)


def short(text, n=120):
    text = str(text).replace("\n", " ")
    return text if len(text) <= n else text[:n] + "..."


def deep_array(depth):
    return "[" * depth + "]" * depth


def llama_config():
    """An HF config.json of a llama model, from the zoo's files (data/models)."""
    folder = os.path.join(ROOT, "data", "models")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(folder, name)) as f:
            doc = json.load(f)
        cfg = doc.get("config", doc)
        if cfg.get("model_type") == "llama":
            return cfg
    raise Failure(f"no llama config in {folder}")


def inline_spec_with(x_json):
    """A job spec with an inline llama config whose extra field "x" is the JSON text x_json."""
    cfg = dict(llama_config(), x="__X__")
    spec = {"model": cfg, "tokens": 1e9, "global_batch": 8}
    return json.dumps(spec).replace('"__X__"', x_json)


def healthz_fast(port, tries=10, limit_s=1.0, gap_s=0.0, source=None):
    """`tries` sequential GET /healthz on new connections; stops at the first slow or failed
    one. Returns (all fast, description)."""
    times = []
    for i in range(tries):
        r = request(port, "GET", "/healthz", token=None, timeout=limit_s + 2, source=source)
        times.append(r.elapsed)
        if r.status != 200 or r.elapsed >= limit_s:
            return False, f"try {i + 1}: {r}"
        time.sleep(gap_s)
    return True, f"max {max(times) * 1000:.0f} ms"


# ---------------------------------------------------------------------------------------------
# Probes


def probe_slowloris():
    """Slowloris: 80 connections from 127.0.0.2 start a request and send one header line every
    0.5 s, never finishing it, to hold the server's workers. Other clients must still be served
    at once, and the server must cut a connection whose header takes over 10 s to arrive."""
    c = Checks()
    with Daemon() as d:
        d.start()
        n = 80
        socks, started, closed = [], {}, {}
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", d.port))
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\n")
            s.setblocking(False)
            started[s] = time.monotonic()
            socks.append(s)
        stop_at = min(started.values()) + 15.5
        done = threading.Event()

        def drip():
            sel = selectors.DefaultSelector()
            for s in socks:
                sel.register(s, selectors.EVENT_READ)
            next_drip = time.monotonic() + 0.5
            while time.monotonic() < stop_at and len(closed) < n:
                for key, _ in sel.select(timeout=max(0.0, min(0.1, next_drip - time.monotonic()))):
                    s = key.fileobj
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:  # EOF or reset: the server cut it
                        closed[s] = time.monotonic()
                        sel.unregister(s)
                if time.monotonic() >= next_drip:
                    next_drip += 0.5
                    for s in socks:
                        if s in closed:
                            continue
                        try:
                            s.send(b"X-a: b\r\n")
                        except BlockingIOError:
                            pass
                        except OSError:
                            closed[s] = time.monotonic()
                            sel.unregister(s)
            sel.close()
            done.set()

        t = threading.Thread(target=drip, daemon=True)
        t.start()
        time.sleep(0.5)
        fast, how = healthz_fast(d.port, tries=10, limit_s=1.0, gap_s=0.35)
        c.ok(fast, f"/healthz from 127.0.0.1 while 80 connections drip: {how}")
        t.join(timeout=30)
        lifetimes = [closed[s] - started[s] for s in closed]
        c.ok(len(closed) == n and max(lifetimes) <= 15.0,
             f"dripping connections closed by the server within 15 s: {len(closed)} of {n}"
             + (f", after {min(lifetimes):.1f}..{max(lifetimes):.1f} s" if lifetimes else ""))
        for s in socks:
            s.close()
    return c.result()


def probe_idle_flood():
    """Idle flood: 300 connections from 127.0.0.3 that send nothing, to exhaust the server's
    connections or threads. Clients elsewhere must still be served at once, and one address
    gets at most 128 connections: the rest are closed at once."""
    c = Checks()
    with Daemon() as d:
        d.start()
        socks, refused = [], 0
        for _ in range(300):
            s = socket.socket()
            s.bind(("127.0.0.3", 0))
            s.settimeout(3)
            try:
                s.connect(("127.0.0.1", d.port))
                s.setblocking(False)
                socks.append(s)
            except OSError:
                refused += 1
                s.close()
        t_connected = time.monotonic()
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        closed = set()
        while time.monotonic() < t_connected + 2.0 and len(closed) < len(socks):
            for key, _ in sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    closed.add(s)
                    sel.unregister(s)
        sel.close()
        still_open = len(socks) - len(closed)
        fast, how = healthz_fast(d.port, tries=10, limit_s=1.0)
        c.ok(fast, f"/healthz from 127.0.0.1 beside 300 idle connections: {how}")
        c.ok(len(closed) + refused > 0 and still_open <= 128,
             f"idle connections from one address: {len(closed)} closed and {refused} refused "
             f"within 2 s, {still_open} still open (at most 128)")
        for s in socks:
            s.close()
    return c.result()


def probe_deep_json():
    """Deep JSON: 60,000 nested arrays hidden in a field that validation never looks at, to blow
    the stack of a recursive parser, serialiser or destructor. Each endpoint that takes a body
    must answer 400 (`field: "body"`) and keep running."""
    c = Checks()
    deep = deep_array(DEEP)
    bodies = [
        ("POST", "/v1/plan", inline_spec_with(deep)),
        ("POST", "/v1/jobs", inline_spec_with(deep)),
        ("POST", "/v1/nodes/n1/heartbeat", '{"gpus":[{"gpu":"A100-80GB","x":' + deep + '}]}'),
        ("POST", "/v1/jobs/j-000001/report", '{"step":1,"tokens":1,"x":' + deep + '}'),
    ]
    daemons = []

    def fresh():
        daemons.append(Daemon().start())
        return daemons[-1]

    try:
        d = fresh()
        for method, path, body in bodies:
            r = d.req(method, path, body, timeout=20)
            e = r.error_obj() or {}
            c.ok(r.status == 400 and e.get("code") == "invalid_argument"
                 and e.get("field") == "body",
                 f"{path} with {DEEP} nested arrays: {short(r)}")
            time.sleep(0.2)
            alive = d.alive()
            cluster = d.req("GET", "/v1/cluster", timeout=10) if alive else None
            healthy = alive and cluster.status == 200
            c.ok(healthy, f"alive after {path}: " + (
                f"/v1/cluster {short(cluster, 60)}" if alive else
                f"exited {d.proc.returncode}: {d.stderr_tail(100)}"))
            if not healthy:  # give the next endpoint a daemon (and database) of its own
                d.cleanup()
                d = fresh()
        # 65 levels in all: the body's object, the model's object and 63 arrays.
        r = d.req("POST", "/v1/plan", inline_spec_with(deep_array(63)), timeout=20)
        e = r.error_obj() or {}
        c.ok(r.status == 400 and e.get("field") == "body", f"depth 65 refused: {short(r)}")
        # 10 levels: the body's object, the model's object and 8 arrays.
        r = d.req("POST", "/v1/plan", inline_spec_with(deep_array(8)), timeout=20)
        e = r.error_obj() or {}
        c.ok(r.status is not None and not (r.status == 400 and e.get("field") == "body"),
             f"depth 10 not refused for depth: {short(r)}")
        big = b"{" + b" " * (2 << 20) + b"}"
        r = d.req("POST", "/v1/jobs", big, timeout=30)
        c.ok(r.status == 413 and r.has_error_code(), f"2 MiB body: {short(r)}")
    finally:
        for d in daemons:
            d.cleanup()
    return c.result()


def probe_poison_rows():
    """Poison rows on disk: a database edited behind the daemon's back (a bad migration, a
    hand-edit, a disk error) holds a job spec nested 60,000 deep, a spec that is not JSON and a
    node whose readings are nested 60,000 deep. The daemon must start, quarantine the rows
    (frenzy_quarantined_rows in /metrics), serve every read and take new jobs, twice."""
    c = Checks()
    with Daemon() as d:
        d.start()
        r = d.req("POST", "/v1/jobs", VALID_SPEC)
        if r.status != 201:
            raise Failure(f"the setup submit failed: {r}")
        job_id = r.json()["id"]
        d.kill()
        deep = deep_array(DEEP)
        db = sqlite3.connect(d.db)
        with db:
            db.execute("UPDATE jobs SET spec = ?, state = 'queued' WHERE id = ?", (deep, job_id))
            now = time.time()
            db.execute("INSERT INTO jobs (id, seq, spec, model, state, submitted_s, updated_s) "
                       "VALUES ('j-001000', 1000, '{this is not json', 'gpt2', 'queued', ?, ?)",
                       (now, now))
            db.execute("INSERT INTO nodes (name, gpu, gpus, up, last_seen_s, readings) VALUES "
                       "('n-poison', 'A100-80GB', 8, 1, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                       "readings = excluded.readings", (now, deep))
        db.close()
        for attempt in (1, 2):
            label = f"restart {attempt}"
            try:
                d.start()
            except Failure as e:
                c.ok(False, f"{label}: {e}")
                break
            c.ok(d.req("GET", "/healthz", token=None).status == 200, f"{label}: /healthz 200")
            r = d.req("GET", "/v1/cluster", token=None, timeout=20)
            c.ok(r.status == 200, f"{label}: GET /v1/cluster {short(r, 60)}")
            r = d.req("GET", "/v1/jobs", timeout=20)
            c.ok(r.status == 200, f"{label}: GET /v1/jobs {short(r, 60)}")
            r = d.req("GET", "/metrics", timeout=20) if d.alive() else Response(error="dead")
            m = re.search(rb"^frenzy_quarantined_rows(?:\{[^}]*\})?\s+([0-9.eE+]+)\s*$", r.body,
                          re.M) if r.status == 200 else None
            n = float(m.group(1)) if m else None
            c.ok(n is not None and n >= 2, f"{label}: frenzy_quarantined_rows = {n}")
            r = d.req("POST", "/v1/jobs", VALID_SPEC, timeout=20) if d.alive() else \
                Response(error="dead")
            c.ok(r.status == 201, f"{label}: a new valid job {short(r, 60)}")
            alive = d.alive()
            c.ok(alive, f"{label}: still running" if alive else
                 f"{label}: exited {d.proc.returncode}: {d.stderr_tail(160)}")
            d.kill()
    return c.result()


def probe_second_instance():
    """Second instance: an operator starts a second daemon on the same database (two schedulers
    would launch every job twice), or on a port in use (it would silently share the port).
    Both must refuse to start; the first keeps serving."""
    c = Checks()
    with Daemon() as a, Daemon(db=None) as b, Daemon() as cc:
        a.start()
        b.db = a.db  # same database, another folder and port
        b.spawn()
        rc = wait_exit_or_serve(b, 10)
        err = b.stderr_text()
        c.ok(isinstance(rc, int) and rc != 0,
             f"a second daemon on the same database: {rc}")
        c.ok("lock" in err.lower() and str(a.pid) in err,
             f"its stderr names the lock and the first daemon's pid {a.pid}: "
             f"{short(err.strip()[-200:], 200)!r}")
        b.kill()
        cc.port = a.port  # another database, the same port
        cc.spawn()
        # /healthz on the shared port reaches A, so only the exit tells C's fate.
        deadline = time.monotonic() + 10
        while cc.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        rc = cc.proc.poll()
        rc = "running" if rc is None else rc
        c.ok(isinstance(rc, int) and rc != 0, f"a second daemon on the same port: {rc} "
             f"{short(cc.stderr_text().strip()[-120:])!r}")
        cc.kill()
        ok = all(request(a.port, "GET", "/healthz", token=None, timeout=5).status == 200
                 for _ in range(3))
        c.ok(ok and a.alive(), "the first daemon still answers /healthz")
    return c.result()


def probe_files_through_api():
    """Files through the API: model names that are really paths on the daemon's machine (a
    secret, a symlink to /etc/passwd, a folder with a config, the database, a FIFO). The API
    must not read them, leak them, block on them, or tell an existing file from a missing one."""
    c = Checks()
    with Daemon() as d:
        w = d.cwd
        with open(os.path.join(w, "secret.txt"), "w") as f:
            f.write('"sk-THISISASECRET"')
        os.symlink("/etc/passwd", os.path.join(w, "passwd"))
        os.makedirs(os.path.join(w, "folder"))
        with open(os.path.join(w, "folder", "config.json"), "w") as f:
            json.dump(llama_config(), f)
        os.mkfifo(os.path.join(w, "fifo"))
        d.start()
        names = ["secret.txt", "passwd", "folder", "frenzy.db", "nonexistent-file",
                 "../secret.txt", "./secret.txt"]
        answers = {}

        def judge(r, what):
            text = r.body.decode("utf-8", "replace")
            good = (r.status in (400, 404) and r.has_error_code() and r.elapsed < 2.0
                    and "sk-" not in text and "root:" not in text)
            c.ok(good, f"{what}: {short(r, 100)}")

        for path in ("/v1/jobs", "/v1/plan"):
            for name in names:
                r = d.req("POST", path, dict(VALID_SPEC, model=name), timeout=4)
                answers[(path, name)] = r
                judge(r, f"{path} model={name!r}")
            a, b = answers[(path, "secret.txt")], answers[(path, "nonexistent-file")]
            ea, eb = a.error_obj() or {}, b.error_obj() or {}
            ma = str(ea.get("message", "")).replace("secret.txt", "")
            mb = str(eb.get("message", "")).replace("nonexistent-file", "")
            c.ok(a.status == b.status and ea.get("code") == eb.get("code") and ma == mb
                 and a.status is not None,
                 f"{path}: an existing file and a missing one look alike: "
                 f"{a.status} {ea.get('code')} {short(ma, 60)!r} vs "
                 f"{b.status} {eb.get('code')} {short(mb, 60)!r}")
        for path in ("/v1/jobs", "/v1/plan"):
            box = {}
            t = threading.Thread(daemon=True, target=lambda: box.setdefault(
                "r", d.req("POST", path, dict(VALID_SPEC, model="fifo"), timeout=4)))
            t.start()
            time.sleep(0.2)
            h = d.req("GET", "/healthz", token=None, timeout=3)
            c.ok(h.status == 200 and h.elapsed < 1.0,
                 f"/healthz during {path} model='fifo': {short(h, 40)}")
            if path == "/v1/jobs":
                s = d.req("POST", "/v1/jobs", VALID_SPEC, timeout=3)
                c.ok(s.status == 201 and s.elapsed < 1.0,
                     f"a valid submit during {path} model='fifo': {short(s, 40)}")
            t.join(timeout=6)
            judge(box.get("r", Response(error="no answer")), f"{path} model='fifo'")
        r = d.req("POST", "/v1/jobs", VALID_SPEC, timeout=5)
        c.ok(r.status == 201, f"the zoo name gpt2 still submits: {short(r, 40)}")
    return c.result()


def probe_report_bounds():
    """Report bounds: a training process (or anyone with the token) reports absurd numbers:
    1e300 steps or tokens or bytes, negatives, strings. Each is refused naming the field, and
    the job's progress stays sane. A wrong token is refused."""
    c = Checks()
    # Time scale 1 and many tokens: the job stays running while it is reported on.
    with Daemon(extra=["--time-scale", "1"]) as d:
        d.start()
        r = d.req("POST", "/v1/jobs", dict(VALID_SPEC, tokens=1e12))
        if r.status != 201:
            raise Failure(f"the setup submit failed: {r}")
        job_id = r.json()["id"]
        deadline = time.monotonic() + 20
        state = None
        while time.monotonic() < deadline:
            j = d.req("GET", f"/v1/jobs/{job_id}").json() or {}
            state = j.get("state")
            if state == "running":
                break
            time.sleep(0.2)
        c.ok(state == "running", f"{job_id} is running before the reports ({state})")
        bad = [
            ({"step": 1e300, "tokens": 1, "peak_bytes": 1}, "step"),
            ({"step": 1, "tokens": 1e300}, "tokens"),
            ({"step": 1, "tokens": 1, "peak_bytes": 1e300}, "peak_bytes"),
            ({"step": -1, "tokens": 1}, "step"),
            ({"step": "x", "tokens": 1}, "step"),
        ]
        for body, field in bad:
            r = d.req("POST", f"/v1/jobs/{job_id}/report", body)
            e = r.error_obj() or {}
            c.ok(r.status is not None and 400 <= r.status < 500 and e.get("field") == field,
                 f"report {json.dumps(body)}: {short(r, 90)}")
        j = d.req("GET", f"/v1/jobs/{job_id}").json() or {}
        p = j.get("progress") or {}
        frac, step = p.get("fraction"), p.get("step")
        c.ok(isinstance(frac, (int, float)) and 0 <= frac <= 1 and isinstance(step, int)
             and step >= 0, f"progress afterwards: fraction {frac}, step {step}")
        r = d.req("POST", f"/v1/jobs/{job_id}/report", {"step": 2, "tokens": 2},
                  token=secrets.token_hex(16))
        c.ok(r.status in (401, 403), f"a report with a wrong token: {short(r, 60)}")
    return c.result()


def probe_heartbeat_types():
    """Heartbeat type errors: an agent (or an attacker) sends GPUs of the wrong JSON types.
    Each is a 400 naming the field under "gpus", never a 500 from a type exception."""
    c = Checks()
    with Daemon() as d:
        d.start()
        for body in ({"gpus": [{"gpu": 5}]}, {"gpus": "x"},
                     {"gpus": [{"gpu": "A100-80GB", "memory_total_bytes": "x"}]}):
            r = d.req("POST", "/v1/nodes/n1/heartbeat", body)
            e = r.error_obj() or {}
            c.ok(r.status == 400 and str(e.get("field", "")).startswith("gpus"),
                 f"heartbeat {json.dumps(body)}: {short(r, 90)}")
    return c.result()


def probe_no_token_forgery():
    """No-token forgery: a daemon without a token trusts loopback, so a web page in the user's
    browser could POST to it (a "simple" text/plain request, or DNS rebinding with a foreign
    Host, or a cross-site Origin). Those are refused; a real local client is not."""
    c = Checks()
    with Daemon(token=None) as d:
        d.start()
        body = json.dumps(VALID_SPEC)
        loop_host = f"127.0.0.1:{d.port}"
        r = d.req("POST", "/v1/jobs", body, headers=[("Content-Type", "text/plain")])
        c.ok(r.status == 415, f"Content-Type text/plain: {short(r, 60)}")
        r = d.req("POST", "/v1/jobs", body, headers=[("Host", "evil.example")])
        c.ok(r.status in (403, 421), f"Host evil.example: {short(r, 60)}")
        r = d.req("POST", "/v1/jobs", body,
                  headers=[("Host", loop_host), ("Origin", "http://evil.example")])
        c.ok(r.status == 403, f"Origin http://evil.example: {short(r, 60)}")
        r = d.req("POST", "/v1/jobs", body,
                  headers=[("Host", loop_host), ("Content-Type", "application/json")])
        c.ok(r.status == 201, f"a local client: {short(r, 60)}")
        jobs = (d.req("GET", "/v1/jobs").json() or {}).get("jobs")
        c.ok(isinstance(jobs, list) and len(jobs) == 1,
             f"jobs stored: {len(jobs) if isinstance(jobs, list) else jobs}")
    return c.result()


def probe_blank_token():
    """Blank token: FRENZY_TOKEN=' ' (a templated secret that came out empty) or --token ' '
    would guard the API with a token anyone can guess. frenzyd must refuse to start."""
    c = Checks()
    for label, kw in (("FRENZY_TOKEN=' '", dict(token=None, env={"FRENZY_TOKEN": " "})),
                      ("--token ' '", dict(token=" "))):
        with Daemon(**kw) as d:
            d.spawn()
            rc = wait_exit_or_serve(d, 10)
            err = d.stderr_text()
            c.ok(isinstance(rc, int) and rc != 0 and "token" in err.lower(),
                 f"{label}: {rc} {short(err.strip()[-120:])!r}")
    return c.result()


def probe_error_bodies():
    """Error bodies: clients that hit unknown paths, wrong methods, giant request targets and
    giant headers get the right status and the API's JSON error, not an empty page."""
    c = Checks()
    with Daemon() as d:
        d.start()
        r = d.req("GET", "/nope")
        c.ok(r.status == 404 and r.has_error_code(), f"GET /nope: {short(r, 70)}")
        r = d.req("PUT", "/healthz", "")
        c.ok(r.status == 405 and r.has_error_code(), f"PUT /healthz: {short(r, 70)}")
        target = "/" + "a" * 19_999
        r = d.req("GET", target)
        c.ok(r.status == 414 and r.has_error_code(), f"a 20,000-byte target: {short(r, 70)}")
        pad = [(f"X-Pad-{i}", "p" * 500) for i in range(40)]  # 40 lines, 20 KB in all
        r = d.req("GET", "/healthz", headers=pad)
        c.ok(r.status == 431 and r.has_error_code(), f"20 KB of headers: {short(r, 70)}")
        # A plain client writes its whole body before it reads: the daemon answers 413 after
        # the headers, and must drain the rest before closing, or the client gets a reset
        # (EPIPE) in place of the answer.
        conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        try:
            conn.request("POST", "/v1/jobs", body=b"{" + b" " * (16 << 20) + b"}",
                         headers={"Content-Type": "application/json",
                                  "Authorization": "Bearer " + d.token})
            resp = conn.getresponse()
            body = resp.read()
            got = f"{resp.status} {body[:60]!r}"
            ok = resp.status == 413 and b'"too_large"' in body
        except OSError as e:
            got, ok = f"{type(e).__name__}: {e}", False
        finally:
            conn.close()
        c.ok(ok, f"a 16 MiB body from http.client: {got}")
    return c.result()


def probe_heavy_plan():
    """Heavy plan: one client asks for an expensive plan (the largest zoo model, a huge
    sequence). Planning must not hold the daemon's lock: submits meanwhile stay fast (median
    under 100 ms, none over 500 ms)."""
    c = Checks()
    with Daemon() as d:
        d.start()
        heavy = {"model": "llama-3.1-405b", "tokens": 1e12, "global_batch": 1024,
                 "seq_len": 10_000_000}
        plans, done = [], threading.Event()

        def plan_again_and_again():  # the submits below must all overlap a plan
            while not done.is_set():
                plans.append(d.req("POST", "/v1/plan", heavy, timeout=120))

        t = threading.Thread(daemon=True, target=plan_again_and_again)
        t.start()
        time.sleep(0.1)
        lat = []
        for _ in range(20):
            r = d.req("POST", "/v1/jobs", VALID_SPEC, timeout=60)
            lat.append(r.elapsed if r.status == 201 else float("inf"))
        done.set()
        med = statistics.median(lat)
        last = f"the first: {short(plans[0], 40)}" if plans else "none finished"
        # The max matters most: a plan holding the lock delays the submit that arrives during
        # it by the whole plan (seconds), while the ones after may slip in between two plans.
        c.ok(med < 0.1 and max(lat) < 0.5,
             f"median submit latency during heavy plans {med * 1000:.0f} ms "
             f"(max {max(lat) * 1000:.0f} ms; {len(plans)} plans done meanwhile, {last})")
    return c.result()


def probe_db_deleted():
    """Database deleted under a running daemon (a cleanup script, a wrong `rm`): it would go on
    writing to an unlinked file and lose everything at the next restart. It must exit non-zero,
    saying the database is gone."""
    c = Checks()
    with Daemon() as d:
        d.start()
        r = d.req("POST", "/v1/jobs", VALID_SPEC)
        c.ok(r.status == 201, f"a job submitted: {short(r, 40)}")
        before = len(d.stderr_text())  # what it logged before: "database" there proves nothing
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(d.db + suffix)
            except FileNotFoundError:
                pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and d.alive():
            time.sleep(0.1)
        rc = d.proc.poll()
        err = d.stderr_text()[before:]
        c.ok(rc is not None and rc != 0, f"exit code after the delete: {rc}")
        c.ok("database" in err.lower(), f"stderr says so: {short(err.strip()[-120:])!r}")
    return c.result()


PROBES = [
    ("slowloris", probe_slowloris),
    ("idle_flood", probe_idle_flood),
    ("deep_json", probe_deep_json),
    ("poison_rows", probe_poison_rows),
    ("second_instance", probe_second_instance),
    ("files_through_api", probe_files_through_api),
    ("report_bounds", probe_report_bounds),
    ("heartbeat_types", probe_heartbeat_types),
    ("no_token_forgery", probe_no_token_forgery),
    ("blank_token", probe_blank_token),
    ("error_bodies", probe_error_bodies),
    ("heavy_plan", probe_heavy_plan),
    ("db_deleted", probe_db_deleted),
]


def main():
    global FRENZYD
    if len(sys.argv) < 2:
        print("usage: hostile_clients.py FRENZYD [PROBE ...]", file=sys.stderr)
        return 2
    FRENZYD = os.path.abspath(sys.argv[1])
    if not os.access(FRENZYD, os.X_OK):
        print(f"not an executable: {FRENZYD}", file=sys.stderr)
        return 2
    only = set(sys.argv[2:])
    unknown = only - {name for name, _ in PROBES}
    if unknown:
        print(f"unknown probes: {sorted(unknown)}", file=sys.stderr)
        return 2
    failed = 0
    t_all = time.monotonic()
    for name, probe in PROBES:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        try:
            detail, ok = probe(), True
        except Failure as e:
            detail, ok = str(e), False
        except Exception as e:  # a bug in the probe, or an answer it could not parse
            detail, ok = f"probe error: {type(e).__name__}: {e}", False
        finally:
            for d in list(_live):
                d.kill()
            _live.clear()
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - t0:.1f} s): {detail}",
              flush=True)
    print(f"{failed} probe(s) failed in {time.monotonic() - t_all:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        for d in _live:
            d.kill()
