#!/usr/bin/env python3
"""Checks each folder's PROVENANCE.md against the CSV files beside it
(tuning_tables/aiter: AITER's tables; tuning_tables/published: published
measurements).

Every CSV in the folder must have a row in the provenance table, with the
file's SHA-256 and its count of data lines (the header excluded); every row
must name a file that exists. So a table changed, added or removed without
its provenance fails the suite.

usage: check_provenance.py FOLDER...  exit 0 consistent, 1 not, 2 bad usage
"""
import hashlib
import os
import re
import sys

ROW = re.compile(r"^\| (\S+\.csv) \| (\S+) \| .* \| (\d+) \| ([0-9a-f]{64}) \|$")


def check(folder):
    """Prints each mismatch of `folder`; returns True when there is none."""
    provenance = os.path.join(folder, "PROVENANCE.md")
    listed = {}
    with open(provenance) as f:
        for number, line in enumerate(f, 1):
            match = ROW.match(line.rstrip("\n"))
            if match:
                listed[match.group(1)] = (number, int(match.group(3)),
                                          match.group(4))
    problems = []
    present = sorted(n for n in os.listdir(folder) if n.endswith(".csv"))
    for name in present:
        if name not in listed:
            problems.append(f"{provenance}: no row for {name}")
            continue
        line, rows, digest = listed[name]
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        actual_rows = max(0, len(data.splitlines()) - 1)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            problems.append(f"{provenance}:{line}: {name}: SHA-256 {actual}, "
                            f"the table says {digest}")
        if actual_rows != rows:
            problems.append(f"{provenance}:{line}: {name}: {actual_rows} rows, "
                            f"the table says {rows}")
    for name, (line, _, _) in sorted(listed.items()):
        if name not in present:
            problems.append(f"{provenance}:{line}: {name}: no such file")
    for p in problems:
        print(p)
    if not problems:
        print(f"check_provenance: {len(present)} tables match {provenance}")
    return not problems


def main():
    folders = sys.argv[1:]
    if not folders or not all(os.path.isdir(f) for f in folders):
        print("usage: check_provenance.py FOLDER...", file=sys.stderr)
        return 2
    results = [check(folder) for folder in folders]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
