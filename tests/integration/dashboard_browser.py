#!/usr/bin/env python3
"""frenzyd's dashboard in a real browser: a real frenzyd (sim backend, a token, a free loopback
port, its own database and runs folder) with jobs submitted over the API, and headless Chromium
driven through chromedriver (Selenium) as a person would use the page. Checked:

  * the page and its assets carry no token, a Content-Security-Policy and nosniff;
  * Cluster: a row per GPU type with the API's total and free counts, a row per node, the
    utilisation chart;
  * Jobs: a row per submitted job with its model, state, user and, for a placed job, its plan;
    a job name a hostile client chose (an <img> with an onerror handler) is shown as text and
    creates no element; the text filter and a sort (by keyboard) change the rows as they
    should; a job submitted through the page's form (token typed into the page) reaches the API;
  * a job: the options table with the chosen option highlighted and matching the API's plan,
    events, the memory chart, the log tail of its run (a log file written where a run writes it);
  * cancel from the page: the first click only arms the button, the second cancels the job (the
    API says so, and the page shows it);
  * Plan: the form's answer (a table of plans, the Pareto set marked, a chart);
  * no error in the browser's console on any view, no token in localStorage.

Screenshots of each view (1400 x 1000) and of its charts stay in the --out folder as artifacts. It fails, not
skips, when Chromium, chromedriver or Selenium is missing (scripts/install-deps.sh installs them).

usage: tests/integration/dashboard_browser.py FRENZYD --chromium PATH --chromedriver PATH --out DIR
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

TOKEN = "dash-test-token-7f3a"
WINDOW = (1400, 1000)
WAIT_S = 20


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"  ok: {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, frenzyd, out):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(out, "frenzyd.log"), "w")
        # One simulated minute a real second: a 7B job on 8 A100s runs for minutes, long enough
        # to be seen running, queued jobs stay queued.
        self.proc = subprocess.Popen(
            [frenzyd, "--backend", "sim", "--listen", f"127.0.0.1:{self.port}", "--db",
             os.path.join(out, "frenzy.db"), "--runs-dir", os.path.join(out, "runs"),
             "--token", TOKEN, "--time-scale", "60", "--tick-s", "0.2"],
            cwd=out, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + WAIT_S
        while time.time() < deadline:
            try:
                self.get("/healthz")
                return
            except (urllib.error.URLError, ConnectionError):
                if self.proc.poll() is not None:
                    raise Failure(f"frenzyd exited with {self.proc.returncode}")
                time.sleep(0.1)
        raise Failure("frenzyd did not answer /healthz")

    def call(self, method, path, body=None, token=TOKEN, raw=False):
        req = urllib.request.Request(self.base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as r:
            data = r.read().decode()
            return (data, dict(r.headers)) if raw else json.loads(data)

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_for(what, fn, timeout=WAIT_S):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 (the page may be mid-redraw)
            last = e
        time.sleep(0.2)
    raise Failure(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def rows(driver, table_id):
    from selenium.webdriver.common.by import By
    return [[c.text for c in r.find_elements(By.CSS_SELECTOR, "th, td")]
            for r in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def shoot(driver, css, path):
    """A screenshot of one element, scrolled into view first (one is clipped to the window)."""
    from selenium.webdriver.common.by import By
    e = driver.find_element(By.CSS_SELECTOR, css)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", e)
    e.screenshot(path)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def run(args):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    d = Daemon(os.path.abspath(args.frenzyd), out)
    driver = None
    try:
        print("the page carries no token and is locked down", flush=True)
        for path in ["/", "/ui/app.js", "/ui/app.css"]:
            body, headers = d.get(path, token=None, raw=True)
            check(TOKEN not in body, f"{path} holds no token")
        _, headers = d.get("/", token=None, raw=True)
        csp = headers.get("Content-Security-Policy", "")
        check("script-src 'self'" in csp and "default-src 'none'" in csp, f"/ has a CSP ({csp})")
        check(headers.get("X-Content-Type-Options") == "nosniff", "/ is sent with nosniff")

        jobs = []
        for model, user, name in [("llama-2-7b", "alice", "pretrain-7b"),
                                  ("mistral-7b", "bob", "mistral-sft"),
                                  ("llama-2-13b", "carol", "big-13b")]:
            jobs.append(d.call("POST", "/v1/jobs", {"model": model, "tokens": 2e9,
                                                    "global_batch": 64, "seq_len": 2048,
                                                    "user": user, "name": name}))
        # A name a hostile client chose: shown as text, never run as markup.
        hostile = '<img src=x onerror="window.pwned=1">'
        jobs.append(d.call("POST", "/v1/jobs", {"model": "gpt2", "tokens": 1e9, "global_batch": 64,
                                                "seq_len": 1024, "user": "mallory",
                                                "name": hostile}))
        ids = [j["id"] for j in jobs]
        running = wait_for("a running job", lambda: [
            j for j in d.get("/v1/jobs")["jobs"] if j["state"] == "running" and j["plan"]])
        # A run's log where the local and Slurm backends write one (runs/<id>/rank-0.log); the
        # sim backend runs nothing and writes none.
        logged = running[0]["id"]
        os.makedirs(os.path.join(out, "runs", logged), exist_ok=True)
        with open(os.path.join(out, "runs", logged, "rank-0.log"), "w") as f:
            for i in range(100):
                f.write(f"step {i} loss {5 - i / 50:.3f}\n")

        opts = webdriver.ChromeOptions()
        opts.binary_location = args.chromium
        for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars"]:
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(service=Service(args.chromedriver), options=opts)
        driver.set_page_load_timeout(30)
        errors = []

        def view(hash_, shot, ready):
            driver.get(f"{d.base}/#/{hash_}")
            wait_for(f"view {hash_}", ready)
            driver.save_screenshot(os.path.join(out, shot))
            errors.extend(console_errors(driver))

        print("cluster view", flush=True)
        cluster = d.get("/v1/cluster")
        view("cluster", "cluster.png", lambda: len(rows(driver, "types")) == len(cluster["types"]))
        got = {r[0]: r for r in rows(driver, "types")}
        for t in cluster["types"]:
            r = got.get(t["gpu"])
            check(r is not None and r[2] == str(t["gpus"]),
                  f"{t['gpu']}: {t['gpus']} GPUs in the table ({r})")
        check(len(rows(driver, "nodes")) == len(cluster["nodes"]), "a row per node")
        check(len(driver.find_elements(By.CSS_SELECTOR, "svg.chart path")) >= 1,
              "the utilisation chart has lines")

        print("jobs view", flush=True)
        view("jobs", "jobs.png", lambda: len(rows(driver, "jobs")) == len(ids))
        api_jobs = {j["id"]: j for j in d.get("/v1/jobs")["jobs"]}
        by_id = {r[0]: r for r in rows(driver, "jobs")}
        for i in ids:
            r, j = by_id.get(i), api_jobs[i]
            check(r is not None and r[1] == j["name"] and r[2] == j["model"] and r[9] == j["user"],
                  f"{i}: name, model and user in its row ({r})")
            if j["plan"]:
                check(f"{j['plan']['gpus']} × {j['plan']['gpu']}" in r[4],
                      f"{i}: its plan in its row ({r[4]})")
        check(driver.execute_script("return window.pwned === undefined") and
              not driver.find_elements(By.CSS_SELECTOR, "#jobs img"),
              "a hostile job name is shown as text, not run")
        box = driver.find_element(By.ID, "text-filter")
        box.send_keys("mistral")
        wait_for("the filter", lambda: [r[2] for r in rows(driver, "jobs")] == ["mistral-7b"])
        check(True, "the filter keeps the one mistral-7b job")
        box.clear()
        box.send_keys(Keys.BACKSPACE)
        wait_for("the filter cleared", lambda: len(rows(driver, "jobs")) == len(ids))
        model_sort = driver.find_elements(By.CSS_SELECTOR, "#jobs thead th button")[2]
        model_sort.send_keys(Keys.ENTER)  # by keyboard
        models = [r[2] for r in rows(driver, "jobs")]
        check(models == sorted(models), f"Enter on 'Model' sorts by model ({models})")

        print("submit from the page with the token typed in", flush=True)
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        form = driver.find_element(By.ID, "submit-form")
        form.find_element(By.NAME, "model").send_keys("gpt2")
        form.find_element(By.NAME, "seq_len").clear()
        form.find_element(By.NAME, "seq_len").send_keys("1024")
        form.find_element(By.NAME, "name").send_keys("from-the-page")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        said = wait_for("the submitted note", lambda: driver.find_element(By.ID, "submitted").text)
        new_id = said.split()[-1]
        check(d.get(f"/v1/jobs/{new_id}")["name"] == "from-the-page",
              f"the page's submission reached the API as {new_id}")
        check(driver.execute_script("return window.localStorage.length") == 0,
              "nothing in localStorage (the token lives in this tab's sessionStorage)")
        errors.extend(console_errors(driver))

        print("a job's view", flush=True)
        j = d.get(f"/v1/jobs/{logged}")
        view(f"job/{logged}", "job.png", lambda: rows(driver, "options") and rows(driver, "events"))
        chosen = driver.find_elements(By.CSS_SELECTOR, "#options tr.chosen")
        check(len(chosen) == 1, "one option highlighted as chosen")
        cells = [c.text for c in chosen[0].find_elements(By.TAG_NAME, "td")]
        check(cells[0].startswith(j["plan"]["gpu"]) and cells[1] == str(j["plan"]["gpus"]),
              f"the chosen option is the plan's {j['plan']['gpus']} x {j['plan']['gpu']} ({cells})")
        check(len(rows(driver, "options")) == len(j["options"]), "a row per option the job had")
        kinds = [r[1] for r in rows(driver, "events")]
        check(kinds == [e["kind"] for e in j["events"]][:len(kinds)] and "started" in kinds,
              f"the events, in order ({kinds})")
        check(driver.find_elements(By.CSS_SELECTOR, "#job-body svg.chart path"),
              "the memory chart has lines")
        shoot(driver, "#job-body svg.chart", os.path.join(out, "job-memory.png"))
        log = wait_for("the log tail", lambda: driver.find_element(By.CSS_SELECTOR, "#log pre").text)
        lines = log.splitlines()
        check(len(lines) == 40 and lines[-1].startswith("step 99 "),
              f"the log tail shows the last 40 lines ({lines[:1]} ... {lines[-1:]})")

        print("cancel from the page", flush=True)
        target = next(i for i in ids if d.get(f"/v1/jobs/{i}")["state"] in ("queued", "running"))
        view(f"job/{target}", "job-cancel.png", lambda: driver.find_element(By.ID, "cancel"))
        # The page redraws live: a button found just before a redraw is stale, so each click is
        # retried on the button found again.
        wait_for("a click on the button",
                 lambda: driver.find_element(By.ID, "cancel").click() or True)
        wait_for("the armed button", lambda: "Confirm" in driver.find_element(By.ID, "cancel").text)
        check(d.get(f"/v1/jobs/{target}")["state"] != "cancelled", "one click only arms the button")

        def confirm():
            # Armed: this click cancels; disarmed by a redraw: it arms again, the next confirms.
            if d.get(f"/v1/jobs/{target}")["state"] == "cancelled":
                return True
            driver.find_element(By.ID, "cancel").click()
            return False
        wait_for("the cancel", confirm)
        check(True, f"the second click cancelled {target} (API)")
        wait_for("the page's state",
                 lambda: driver.find_element(By.ID, "job-state").text == "cancelled")
        check(True, "the page shows it cancelled")
        errors.extend(console_errors(driver))

        print("plan view", flush=True)
        view("plan", "plan-form.png", lambda: driver.find_element(By.ID, "plan-form"))
        form = driver.find_element(By.ID, "plan-form")
        tokens = form.find_element(By.NAME, "tokens")
        tokens.clear()
        tokens.send_keys("2e9")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        plans = wait_for("the plans", lambda: rows(driver, "plans"))
        answer = d.call("POST", "/v1/plan", {"model": "llama-2-7b", "tokens": 2e9,
                                             "global_batch": 512, "seq_len": 4096})
        api_plans = answer["plans"]
        check(len(plans) == len(api_plans), f"a row per plan ({len(plans)})")
        check(plans[0][1] == f"{api_plans[0]['gpus']} × {api_plans[0]['gpu']}",
              f"the best plan first ({plans[0][1]})")
        check(any(r[-1] == "yes" for r in plans), "the Pareto set is marked")
        front = rows(driver, "pareto")
        check([r[1] for r in front] == [f"{p['gpus']} × {p['gpu']}" for p in answer["pareto"]]
              and len(front) >= 2, f"the Pareto set's table ({[r[1] for r in front]})")
        check(driver.find_elements(By.CSS_SELECTOR, "#plan-result svg.chart circle"),
              "the Pareto chart has points")
        driver.save_screenshot(os.path.join(out, "plan.png"))
        shoot(driver, "#plan-result svg.chart", os.path.join(out, "plan-chart.png"))
        errors.extend(console_errors(driver))

        check(not errors, f"no errors in the browser's console ({errors})")
    finally:
        if driver:
            driver.quit()
        d.stop()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("frenzyd")
    p.add_argument("--chromium", required=True)
    p.add_argument("--chromedriver", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    for what, path in [("chromium", args.chromium), ("chromedriver", args.chromedriver)]:
        if not path or not os.access(path, os.X_OK):
            print(f"FAILED: {what} not found ({path}); scripts/install-deps.sh installs it",
                  file=sys.stderr)
            return 1
    try:
        import selenium  # noqa: F401
    except ImportError:
        print("FAILED: python3-selenium missing; scripts/install-deps.sh installs it",
              file=sys.stderr)
        return 1
    try:
        run(args)
    except Failure as e:
        print(f"FAILED: {e}\n(screenshots and frenzyd.log are in {args.out})", file=sys.stderr)
        return 1
    print(f"dashboard browser: all checks passed (screenshots: {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
