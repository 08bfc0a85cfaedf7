#!/usr/bin/env python3
"""The selection rules (docs/selection.md) checked on a compiled shipped
table through `moec select`, against the rules applied here by hand to the
table file itself.

    ep8_select_check.py MOEC TABLE BUNDLE MAX_M

Reads TABLE's `select` blocks (network, ep, workspace, above_max, rows) and
its kernels' max_tokens (a table's capacity is the smallest max_tokens of
the kernels its rows' configurations launch; none when no kernel has one).
For every M in 0..MAX_M the expected outcome is computed by brute force:
the row with the smallest |m - M|, the larger m on a tie; above the largest
row a miss when M exceeds the capacity, else the largest row flagged as a
fallback under above_max=largest, a miss under above_max=error. Then:

  * `moec select --ranges` of every table must serve each M exactly as
    expected (row, configuration, fallback), every M once;
  * `moec select --m M --json` at each token bucket an engine asks for
    (1, 2, 4, ..., 16384), at each tie between two adjacent rows, at each
    table's largest row and one above it, and at 1<<20 must give the
    expected row, exact flag, status and workspace class, or exit 1 with
    the documented one-line miss;
  * requests for workspaces below, at and above each class must get the
    smallest class >= the request, or the documented miss above the largest.

Prints one summary line per table and per check; a mismatch is printed and
the exit status is 1.
"""

import json
import re
import subprocess
import sys


def parse_table(path):
    kernels, configs, tables = {}, {}, []
    for line in open(path):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        fields = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        if words[0] == "kernel":
            kernels[words[1]] = fields
        elif words[0] == "config":
            configs[words[1]] = fields["kernels"].split(",")
        elif words[0] == "select":
            tables.append(dict(network=fields["network"], ep=int(fields["ep"]),
                               workspace=int(fields["workspace"]),
                               above_max=fields.get("above_max", "largest"), rows=[]))
        elif words[0] == "row":
            tables[-1]["rows"].append((int(fields["m"]), fields["config"]))
    for table in tables:
        caps = [int(kernels[k]["max_tokens"]) for _, c in table["rows"] for k in configs[c]
                if "max_tokens" in kernels[k]]
        table["capacity"] = min(caps) if caps else None
    return tables


def expected(table, m):
    """('hit'|'fallback', row_m, config) or ('miss', reason)."""
    rows = table["rows"]
    largest = max(r for r, _ in rows)
    name = "%s ep%d ws%d" % (table["network"], table["ep"], table["workspace"])
    if m > largest:
        if table["capacity"] is not None and m > table["capacity"]:
            return ("miss", "%s: m %d is above the table's capacity of %d tokens per rank"
                    % (name, m, table["capacity"]))
        if table["above_max"] == "error":
            return ("miss", "%s: m %d is above the largest row (m %d) and above_max is 'error'"
                    % (name, m, largest))
        return ("fallback", largest, dict(rows)[largest])
    best = None
    for r, config in rows:
        key = (abs(r - m), -r)
        if best is None or key < best[0]:
            best = (key, r, config)
    return ("hit", best[1], best[2])


def moec(binary, *args):
    p = subprocess.run([binary] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


RANGE = re.compile(r"^m (\d+)\.\.(\d+)(\+ \(fallback above\)| and up to (\d+) "
                   r"\(fallback above the row\))? -> row m=(\d+) config (\S+)")


def check_ranges(binary, bundle, table, max_m, problems):
    status, out, err = moec(binary, "select", bundle, "--network", table["network"], "--ep",
                            table["ep"], "--workspace", table["workspace"], "--ranges")
    if status != 0:
        problems.append("--ranges exit %d: %s" % (status, err.strip()))
        return
    served = {}
    for line in out.splitlines():
        match = RANGE.match(line)
        if not match:
            problems.append("unparsed --ranges line: " + line)
            continue
        low, high, above, upto, row, config = match.groups()
        high = int(high)
        if above and above.startswith("+"):
            high = max_m  # every M above, as a fallback
        elif upto:
            high = int(upto)
        for m in range(int(low), min(high, max_m) + 1):
            kind = "fallback" if above and m > int(row) else "hit"
            if m in served:
                problems.append("m %d served twice" % m)
            served[m] = (kind, int(row), config)
    counts = {"hit": 0, "fallback": 0, "miss": 0}
    for m in range(max_m + 1):
        want = expected(table, m)
        got = served.get(m)
        counts[want[0]] += 1
        if want[0] == "miss":
            if got is not None:
                problems.append("m %d: --ranges serves row %d, expected a miss" % (m, got[1]))
        elif got != want:
            problems.append("m %d: --ranges %s, expected %s" % (m, got, want))
    return counts


def probes(table):
    ms = {1 << k for k in range(15)}  # the token buckets 1..16384
    rows = sorted(r for r, _ in table["rows"])
    # Between the first two rows of each spacing (1, 2, 6, ...) and the
    # last two rows: the midpoint (an exact tie when the spacing is even)
    # and the M on each side of it.
    spacings = {}
    for a, b in zip(rows, rows[1:]):
        spacings.setdefault(b - a, (a, b))
    for a, b in list(spacings.values()) + [(rows[-2], rows[-1])]:
        ms.update({(a + b) // 2, (a + b) // 2 + 1, (a + b + 1) // 2 - 1})
    ms.update({0, rows[-1], rows[-1] + 1, 1 << 20})
    if table["capacity"]:
        ms.update({table["capacity"], table["capacity"] + 1})
    return sorted(ms)


def check_probe(binary, bundle, table, m, problems):
    want = expected(table, m)
    status, out, err = moec(binary, "select", bundle, "--network", table["network"], "--ep",
                            table["ep"], "--workspace", table["workspace"], "--m", m, "--json")
    if want[0] == "miss":
        if status != 1 or want[1] not in err:
            problems.append("m %d: exit %d '%s', expected exit 1 '%s'" %
                            (m, status, err.strip(), want[1]))
        return
    if status != 0:
        problems.append("m %d: exit %d %s" % (m, status, err.strip()))
        return
    s = json.loads(out)
    got = (s["status"], s["row_m"], s["config"], s["exact"], s["workspace_class"])
    if got != (want[0], want[1], want[2], want[1] == m, table["workspace"]):
        problems.append("m %d: %s, expected %s" % (m, got, want))


def check_workspaces(binary, bundle, tables, problems):
    lines = []
    for network in sorted({t["network"] for t in tables}):
        classes = sorted(t["workspace"] for t in tables if t["network"] == network)
        asks = sorted({1} | {c + d for c in classes for d in (-1, 0, 1)})
        for ask in asks:
            bigger = [c for c in classes if c >= ask]
            status, out, err = moec(binary, "select", bundle, "--network", network, "--ep", 8,
                                    "--workspace", ask, "--m", 1, "--json")
            if bigger:
                got = json.loads(out)["workspace_class"] if status == 0 else err.strip()
                if got != bigger[0]:
                    problems.append("%s workspace %d: %s, expected class %d" %
                                    (network, ask, got, bigger[0]))
            else:
                want = ("no selection table for network '%s' ep 8 with workspace class >= %d "
                        "(largest is %d)" % (network, ask, classes[-1]))
                if status != 1 or want not in err:
                    problems.append("%s workspace %d: exit %d '%s', expected '%s'" %
                                    (network, ask, status, err.strip(), want))
        lines.append("%s workspaces %s -> classes %s" % (
            network, ",".join(map(str, asks)), ",".join(map(str, classes))))
    return lines


def main():
    binary, table_path, bundle, max_m = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tables = parse_table(table_path)
    problems = []
    for table in tables:
        before = len(problems)
        counts = check_ranges(binary, bundle, table, max_m, problems)
        ms = probes(table)
        for m in ms:
            check_probe(binary, bundle, table, m, problems)
        print("%s ep%d ws%d above_max=%s capacity=%s: m 0..%d: %d hit %d fallback %d miss; "
              "%d probes; %d problems" % (
                  table["network"], table["ep"], table["workspace"], table["above_max"],
                  table["capacity"] or "none", max_m, counts["hit"], counts["fallback"],
                  counts["miss"], len(ms), len(problems) - before))
    before = len(problems)
    for line in check_workspaces(binary, bundle, tables, problems):
        print(line)
    for problem in problems:
        print("PROBLEM: " + problem)
    print("%d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
