#!/usr/bin/env python3
"""Runs every distinct configuration of a bundle compiled from AITER CSVs on
the CPU emulator at the table's own dimensions, against the oracle.

For each configuration that some compiled AITER row selects, one
`moec run BUNDLE --config ID --m M --emulate` (the stored kernel IR, at the
row's H, I, E and top-k; M source tokens, small so that it runs in minutes)
and one line of the summary: the rows it serves, the kernels' knobs that
matter, PASS/FAIL, seconds and peak memory. Exit 0 when every run passed.

Usage: scripts/aiter-emulate.py BUNDLE [--m M] [--moec PATH] [--only ID,...]
                                [--log DIR]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--m", type=int, default=2,
                        help="source tokens per run (default 2)")
    parser.add_argument("--moec", default=os.path.join(
        os.path.dirname(__file__), "..", "build", "bin", "moec"))
    parser.add_argument("--only", default="",
                        help="comma-separated configuration ids")
    parser.add_argument("--log", default="",
                        help="directory for each run's full output")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        extracted = os.path.join(tmp, "x")
        subprocess.run([args.moec, "extract", args.bundle, "-o", extracted],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(extracted, "manifest.json")) as f:
            manifest = json.load(f)
    rows = manifest.get("aiter_rows", [])
    if not rows:
        sys.exit(f"aiter-emulate: {args.bundle}: no AITER rows in the manifest")
    sources = manifest.get("sources", [])
    configs = manifest["configs"]
    kernels = manifest["kernels"]
    serving, problems = {}, {}
    for row in rows:
        if row.get("skipped") or "config" not in row:
            continue
        src = sources[row["source"]] if row["source"] < len(sources) else {}
        name = os.path.basename(src.get("path", "?"))
        serving.setdefault(row["config"], []).append(f"{name}:{row['line']}")
        problems[row["config"]] = (f"H {row['model_dim']} I {row['inter_dim']} "
                                   f"E {row['expert']} top-{row['topk']}")
    only = set(filter(None, args.only.split(",")))
    if args.log:
        os.makedirs(args.log, exist_ok=True)

    failures = 0
    print("| config | rows | problem | w13 | w2 | result | seconds | peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for index in sorted(serving):
        config = configs[index]
        if only and config["id"] not in only:
            continue
        stages = {kernels[k]["stage"]: kernels[k] for k in config["kernels"]}
        w13 = stages.get("w13", {}).get("symbol", "?")
        w2 = stages.get("w2", {}).get("symbol", "?")
        problem = problems[index]
        start = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        run = subprocess.run(
            [args.moec, "run", args.bundle, "--config", config["id"], "--m",
             str(args.m), "--emulate"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seconds = time.monotonic() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # ru_maxrss of children is the largest so far: report it only when
        # this run raised it, else "<= previous".
        peak_text = f"{peak / 1024:.0f}" if peak > before else f"<= {before / 1024:.0f}"
        verdict = "PASS" if run.returncode == 0 else f"FAIL (exit {run.returncode})"
        failures += run.returncode != 0
        if args.log:
            with open(os.path.join(args.log, config["id"] + ".txt"), "w") as f:
                f.write(run.stdout)
        if run.returncode != 0:
            sys.stderr.write(run.stdout[-3000:])
        rows_text = ", ".join(serving[index][:3]) + (
            f" (+{len(serving[index]) - 3})" if len(serving[index]) > 3 else "")
        def tile(symbol):
            # The knob part of a symbol: from the tile on.
            part = symbol.removesuffix(".kd")
            return part[part.find("_t"):] if "_t" in part else part
        print(f"| {config['id']} | {rows_text} | {problem} | {tile(w13)} | "
              f"{tile(w2)} | {verdict} | {seconds:.1f} | {peak_text} |",
              flush=True)
    total = len(serving) if not only else len(only)
    print(f"aiter-emulate: {total - failures} of {total} configurations passed "
          f"at m {args.m}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
