#!/usr/bin/env python3
"""Every CTest entry of a build tree has a label and a timeout.

Labels pick what `scripts/test.sh --fast` runs (`ctest -L fast`) and what
only the full suite runs (`slow`) or the sanitizer builds (`sanitize`); a timeout turns a hang
into a failure with the test's name instead of a stalled CI job.

usage: check_ctest_properties.py CTEST BUILD_DIR   exit 0 / 1 / 2
"""
import json
import subprocess
import sys

# Exactly one tier per entry: what --fast runs, what only the full suite
# runs, or the sanitizer builds.
TIERS = {"fast", "slow", "sanitize"}
KNOWN_LABELS = TIERS | {"repo", "python",
                "lit", "unit", "example", "install"}


def main():
    if len(sys.argv) != 3:
        print("usage: check_ctest_properties.py CTEST BUILD_DIR", file=sys.stderr)
        return 2
    out = subprocess.run([sys.argv[1], "--test-dir", sys.argv[2],
                          "--show-only=json-v1"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        print(f"check_ctest_properties: ctest failed: {out.stderr.strip()}",
              file=sys.stderr)
        return 2
    tests = json.loads(out.stdout).get("tests", [])
    problems = []
    for test in tests:
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        labels = properties.get("LABELS", [])
        if not labels:
            problems.append(f"{test['name']}: no LABELS")
        unknown = sorted(set(labels) - KNOWN_LABELS)
        if unknown:
            problems.append(f"{test['name']}: unknown label(s) {', '.join(unknown)}")
        tiers = sorted(set(labels) & TIERS)
        if len(tiers) != 1:
            problems.append(f"{test['name']}: tiers {tiers or 'none'}; expected "
                            f"exactly one of {', '.join(sorted(TIERS))}")
        if float(properties.get("TIMEOUT", 0) or 0) <= 0:
            problems.append(f"{test['name']}: no TIMEOUT")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"check_ctest_properties: {len(tests)} tests, each labelled and "
          "with a timeout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
