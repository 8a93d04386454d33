#!/usr/bin/env python3
"""Check that functions and files under src/ stay small enough to read.

A function longer than --max-function lines, or a file longer than --max-file
lines, is an error unless the file carries a comment saying why:
    // size: <reason>          (file-wide, anywhere in the file)
    // size-ok: <reason>       (in the comment right above a long function)
Prints every offender with file:line and exits 1 if there is any.
"""
import argparse
import os
import re
import sys


def strip(text):
    """Blank out comments, string and char literals, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000) is not a char literal.
            if c == "'" and i > 0 and text[i - 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^;(){}]*$")


def functions(text):
    """Yield (start_line, length, head) for each function body."""
    code = strip(text)
    stack = []  # entries: ("container"|"body"|"block", start_line)
    line = 1
    last = 0  # index after the last ; { or }
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c == "{":
            head = code[last:i]
            in_body = any(k != "container" for k, _ in stack)
            if in_body:
                stack.append(("block", line))
            elif CONTAINER.search(head.strip()) or "=" in head.split(")")[-1] and ")" not in head:
                stack.append(("container", line))
            elif ")" in head:
                start = line - head.count("\n", head.find(head.strip()[:1])) if head.strip() else line
                stack.append(("body", start))
            else:
                stack.append(("container", line))
            last = i + 1
        elif c == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "body":
                    yield start, line - start + 1
            last = i + 1
        elif c == ";":
            last = i + 1


def self_test():
    """The checker finds a long function, a long file and honours the comments (else exit 1)."""
    import tempfile
    body = "\n".join(f"  x += {i};" for i in range(130))
    cases = {
        "long.cc": (f"int f(int x) {{\n{body}\n  return x;\n}}\n", 1),
        "ok.cc": (f"// size-ok: a table\nint f(int x) {{\n{body}\n  return x;\n}}\n", 0),
        "short.cc": ("namespace a {\nstruct S { int g() { return 1; } };\n}\n", 0),
        "big.h": ("\n".join("int v%d = 0;" % i for i in range(900)) + "\n", 1),
        "big_ok.h": ("// size: generated table\n" +
                     "\n".join("int v%d = 0;" % i for i in range(900)) + "\n", 0),
    }
    failed = False
    for name, (text, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
            got = check(d, 120, 800, 0, quiet=True)
        if got != want:
            print(f"self-test: {name}: exit {got}, want {want}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-function", type=int, default=120)
    ap.add_argument("--max-file", type=int, default=800)
    ap.add_argument("--list", type=int, default=0, help="print the N longest functions")
    ap.add_argument("--self-test", action="store_true", help="check the checker, then exit")
    ap.add_argument("root", nargs="?", default="src")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return check(args.root, args.max_function, args.max_file, args.list)


def check(root, max_function, max_file, list_n, quiet=False):
    bad = []
    found = []
    for dirpath, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            if not name.endswith((".cc", ".h")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.split("\n")
            file_ok = "// size:" in text
            if len(lines) > max_file and not file_ok:
                bad.append(f"{path}:1: file is {len(lines)} lines (limit {max_file}); "
                           "split it or say why in a '// size:' comment")
            for start, length in functions(text):
                found.append((length, path, start))
                if length <= max_function:
                    continue
                # The comment block right above the function may say why it is long.
                k = start - 2
                comment = []
                while k >= 0 and lines[k].strip().startswith("//"):
                    comment.append(lines[k])
                    k -= 1
                if any("size-ok:" in c for c in comment):
                    continue
                bad.append(f"{path}:{start}: function is {length} lines "
                           f"(limit {max_function})")
    if list_n:
        for length, path, start in sorted(found, reverse=True)[:list_n]:
            print(f"{length:5d} {path}:{start}")
    if not quiet:
        for b in bad:
            print(b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
