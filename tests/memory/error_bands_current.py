#!/usr/bin/python3
"""data/measurements/error_bands.json is what tools/compare_published.py --bands writes with the
MARP of this build: a change to the memory model that moves a published error needs the bands
rewritten (the command below), so `predict` and `plan --safe-margin` never report stale ones.

usage: error_bands_current.py FRENZY_BIN
refresh: python3 tools/compare_published.py build/bin/frenzy --bands data/measurements/error_bands.json
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    frenzy = sys.argv[1]
    committed = json.load(open(os.path.join(ROOT, "data", "measurements", "error_bands.json")))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bands.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "compare_published.py"),
                        frenzy, "--bands", out], check=True, capture_output=True)
        now = json.load(open(out))
    if now != committed:
        print("data/measurements/error_bands.json is stale:\n  committed: "
              f"{json.dumps(committed['frameworks'])}\n  now:       {json.dumps(now['frameworks'])}\n"
              "refresh: python3 tools/compare_published.py build/bin/frenzy --bands "
              "data/measurements/error_bands.json")
        return 1
    print("error bands current:", ", ".join(f"{f} {b['rows']} rows [{b['min_error']:+.3f}, "
                                             f"{b['max_error']:+.3f}]"
                                             for f, b in now["frameworks"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
