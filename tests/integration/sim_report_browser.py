#!/usr/bin/env python3
"""The simulator's index.html in a real browser: `frenzy simulate --out DIR` on a small bundled
workload (lab-synthetic on the lab cluster, five policies, about a second), then headless
Chromium opens DIR/index.html as a person would, offline from disk, and the test checks that:

  * the DOM holds the comparison table (a <th scope="row"> per policy, in the order run, every
    column headed by a <th scope="col">), the common-jobs table, and the three figures (JCT CDF,
    utilisation, queue length), each an inline SVG named by its <title> with a line per policy;
  * as laid out at 1400 x 1000 (a laptop): no text of a plot overlaps another or leaves its
    plot, plot text is at least 10 px tall, the page does not scroll sideways, and the JCT CDF
    and the utilisation plot stand side by side. A probe script measures that in a copy of the
    page (probe.html; the page itself has no script);
  * a screenshot (DIR/index.png, kept as an artifact) is a 1400 x 1000 PNG.

It fails, and does not skip, when Chromium is missing: scripts/install-deps.sh installs it.

usage: tests/integration/sim_report_browser.py FRENZY --chromium PATH [--out DIR]
(DIR is emptied first and kept; without it a temporary folder is used, kept on failure)

Stdlib only.
"""
import argparse
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

POLICIES = ["fifo-static", "tiresias", "gavel", "sia", "frenzy"]
FIGURES = {"jct-cdf": "Job completion time", "utilisation": "GPU utilisation",
           "queue": "Queue length"}
WINDOW = (1400, 1000)
TIMEOUT_S = 120


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)
    print(f"  ok: {what}", flush=True)


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.text = [], ""

    def all(self, tag):
        """Every descendant named tag, in document order."""
        for c in self.children:
            if c.tag == tag:
                yield c
            yield from c.all(tag)

    def find(self, tag, **attrs):
        return next((n for n in self.all(tag)
                     if all(n.attrs.get(k) == v for k, v in attrs.items())), None)

    def content(self):
        return self.text + "".join(c.content() for c in self.children)


class Tree(html.parser.HTMLParser):
    """The DOM as Chromium serialised it (SVG elements close explicitly there)."""
    VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        # Text after a child element belongs to the parent; a text node of its own keeps order.
        if self.cur.children:
            t = Node("#text", {}, self.cur)
            t.text = data
            self.cur.children.append(t)
        else:
            self.cur.text += data


def parse(dom):
    t = Tree()
    t.feed(dom)
    return t.root


def chromium(binary, profile, *args):
    cmd = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if r.returncode != 0:
        raise Failure(f"chromium exited {r.returncode}: {r.stderr[-1500:]}")
    return r.stdout


# Measures the laid-out page and writes what it found into <pre id="probe"> as JSON.
PROBE = """<script>
(() => {
  const found = {problems: [], min_text_px: 1e9, figures: {}};
  const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1 &&
      r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
      Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
  for (const fig of document.querySelectorAll('figure')) {
    const svg = fig.querySelector('svg');
    const box = svg.getBoundingClientRect();
    const scale = box.width / svg.viewBox.baseVal.width;
    found.figures[fig.id] = {left: box.left, top: box.top, width: box.width, height: box.height};
    const texts = [...svg.querySelectorAll('text')].map(t => ({
      text: t.textContent, r: t.getBoundingClientRect(),
      px: parseFloat(t.getAttribute('font-size')) * scale}));
    for (const t of texts) {
      found.min_text_px = Math.min(found.min_text_px, t.px);
      if (!inside(t.r, box)) found.problems.push(`${fig.id}: "${t.text}" leaves the plot`);
    }
    for (let i = 0; i < texts.length; ++i)
      for (let j = i + 1; j < texts.length; ++j)
        if (overlap(texts[i].r, texts[j].r))
          found.problems.push(`${fig.id}: "${texts[i].text}" overlaps "${texts[j].text}"`);
  }
  found.page_width = document.documentElement.scrollWidth;
  found.window_width = window.innerWidth;
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(found);
  document.body.appendChild(pre);
})();
</script>"""


def check_dom(root):
    table = root.find("table", id="comparison")
    check(table is not None, "index.html has the comparison table")
    heads = [th.content().strip() for th in table.find("thead").all("th")]
    check(all(th.attrs.get("scope") == "col" for th in table.find("thead").all("th"))
          and len(heads) >= 10, f"every column is headed by a <th scope=col> ({len(heads)})")
    rows = [th.content().strip() for th in table.find("tbody").all("th")
            if th.attrs.get("scope") == "row"]
    check(rows == POLICIES, f"a row per policy in the order run: {rows}")
    for tr in table.find("tbody").all("tr"):
        cells = list(tr.all("td"))
        check(len(cells) == len(heads) - 1 and all(c.content().strip() for c in cells),
              f"{tr.find('th').content()}: every column filled")
    common = root.find("table", id="common")
    check(common is not None and [th.content().strip() for th in common.find("tbody").all("th")]
          == POLICIES, "the common-jobs table has a row per policy")
    for fid, title in FIGURES.items():
        fig = root.find("figure", id=fid)
        check(fig is not None, f"figure {fid} is there")
        svg = fig.find("svg")
        check(svg is not None and svg.attrs.get("role") == "img", f"{fid}: an inline SVG image")
        name = svg.find("title")
        check(name is not None and name.content().startswith(title),
              f"{fid}: named by its <title> ({name.content() if name else None!r})")
        lines = list(svg.all("polyline"))
        check(len(lines) == len(POLICIES), f"{fid}: a line per policy ({len(lines)})")
        legend = [t.content() for t in svg.all("text")]
        check(all(p in legend for p in POLICIES), f"{fid}: every policy in the legend")
        check(fig.find("figcaption") is not None, f"{fid}: a caption")
    check(root.find("script") is None, "the page has no script")


def check_layout(found):
    for p in found["problems"][:20]:
        print(f"  layout: {p}", flush=True)
    check(not found["problems"], "no plot text overlaps another or leaves its plot")
    check(found["min_text_px"] >= 10, f"plot text is at least 10 px ({found['min_text_px']:.1f})")
    check(found["page_width"] <= found["window_width"],
          f"the page does not scroll sideways ({found['page_width']} px in "
          f"{found['window_width']})")
    cdf, util = found["figures"]["jct-cdf"], found["figures"]["utilisation"]
    check(abs(cdf["top"] - util["top"]) < 2 and util["left"] > cdf["left"] + cdf["width"] - 2,
          "the JCT CDF and the utilisation plot stand side by side")


def check_png(path):
    with open(path, "rb") as f:
        head = f.read(24)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is a PNG")
    width, height = struct.unpack(">II", head[16:24])
    check((width, height) == WINDOW, f"the screenshot is {width} x {height}")


def run(frenzy, browser, out):
    r = subprocess.run([frenzy, "simulate", "--cluster", "lab", "--workload", "lab-synthetic",
                        "--policy", ",".join(POLICIES), "--out", out, "--no-progress"],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    check(r.returncode == 0, f"frenzy simulate ran (exit {r.returncode}) {r.stderr[-500:]}")
    check("index.html" in r.stdout.splitlines()[-1], "the 'wrote ...' line names index.html")
    for f in ["jobs.csv", "timeline.csv", "summary.json", "jct_cdf.svg", "timeline.svg",
              "index.html"]:
        check(os.path.getsize(os.path.join(out, f)) > 0, f"{f} written")
    profile = os.path.join(out, "chromium-profile")
    index = os.path.join(out, "index.html")
    check_dom(parse(chromium(browser, profile, "--dump-dom", "file://" + index)))
    page = open(index, encoding="utf-8").read()
    probe = os.path.join(out, "probe.html")
    with open(probe, "w", encoding="utf-8") as f:
        f.write(page.replace("</body>", PROBE + "\n</body>"))
    pre = parse(chromium(browser, profile, "--dump-dom", "file://" + probe)).find("pre",
                                                                                 id="probe")
    check(pre is not None, "the layout probe ran")
    check_layout(json.loads(pre.content()))
    png = os.path.join(out, "index.png")
    chromium(browser, profile, f"--screenshot={png}", "file://" + index)
    check_png(png)
    shutil.rmtree(profile, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("frenzy")
    ap.add_argument("--chromium", required=True, help="the Chromium binary (CMake finds it)")
    ap.add_argument("--out", help="work in this folder (emptied first) and keep it")
    a = ap.parse_args()
    browser = a.chromium
    if not (os.path.isfile(browser) and os.access(browser, os.X_OK)):
        print(f"FAILED: Chromium not found ({browser!r}); this test needs it: "
              "scripts/install-deps.sh installs it (apt-get install chromium), then re-run "
              "CMake", file=sys.stderr)
        return 1
    if a.out:
        shutil.rmtree(a.out, ignore_errors=True)
        os.makedirs(a.out)
    out = os.path.abspath(a.out or tempfile.mkdtemp(prefix="frenzy-report-browser-"))
    try:
        run(os.path.abspath(a.frenzy), browser, out)
    except (Failure, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"FAILED: {e}\n(the run's files, and the screenshot if taken, are in {out})",
              file=sys.stderr)
        return 1
    if a.out:
        print(f"sim report browser: all checks passed (screenshot: {out}/index.png)")
    else:
        shutil.rmtree(out, ignore_errors=True)
        print("sim report browser: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
