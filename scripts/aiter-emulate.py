#!/usr/bin/env python3
"""Runs every distinct configuration of a bundle compiled from AITER CSVs on
the CPU emulator at the table's own dimensions, against the oracle.

For each configuration that some compiled AITER row selects, one
`moec run BUNDLE --config ID --m M --emulate` (the stored kernel IR, at the
row's H, I, E and top-k; M source tokens, small so that it runs in minutes)
and one line of the summary: the rows it serves, the kernels' knobs that
matter, PASS/FAIL, seconds and peak memory. Exit 0 when every run passed.

Usage: scripts/aiter-emulate.py BUNDLE [--m M] [--moec PATH] [--only ID,...]
                                [--log DIR] [--jobs N]

With --jobs N, N runs at a time (each emulator run uses one core); the
summary keeps the configuration order, and each line's peak is that run's
own resident set (os.wait4), so parallel runs do not blur it.
"""

import argparse
import concurrent.futures
import json
import os
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
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at a time (default 1)")
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

    def run_one(config_id):
        """One `moec run --emulate`: (exit status, seconds, peak MiB, output)."""
        with tempfile.TemporaryFile(mode="w+") as out:
            start = time.monotonic()
            child = subprocess.Popen(
                [args.moec, "run", args.bundle, "--config", config_id, "--m",
                 str(args.m), "--emulate"],
                stdout=out, stderr=subprocess.STDOUT, text=True)
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
            seconds = time.monotonic() - start
            out.seek(0)
            return child.returncode, seconds, usage.ru_maxrss / 1024, out.read()

    def tile(symbol):
        # The knob part of a symbol: from the tile on.
        part = symbol.removesuffix(".kd")
        return part[part.find("_t"):] if "_t" in part else part

    chosen = [index for index in sorted(serving)
              if not only or configs[index]["id"] in only]
    failures = 0
    print("| config | rows | problem | w13 | w2 | result | seconds | peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = [pool.submit(run_one, configs[index]["id"]) for index in chosen]
        # Lines come out in configuration order, each as soon as it and
        # every earlier one have finished.
        for index, future in zip(chosen, runs):
            config = configs[index]
            returncode, seconds, peak, output = future.result()
            stages = {kernels[k]["stage"]: kernels[k] for k in config["kernels"]}
            w13 = stages.get("w13", {}).get("symbol", "?")
            w2 = stages.get("w2", {}).get("symbol", "?")
            verdict = "PASS" if returncode == 0 else f"FAIL (exit {returncode})"
            failures += returncode != 0
            if args.log:
                with open(os.path.join(args.log, config["id"] + ".txt"), "w") as f:
                    f.write(output)
            if returncode != 0:
                sys.stderr.write(output[-3000:])
            rows_text = ", ".join(serving[index][:3]) + (
                f" (+{len(serving[index]) - 3})" if len(serving[index]) > 3 else "")
            print(f"| {config['id']} | {rows_text} | {problems[index]} | {tile(w13)} | "
                  f"{tile(w2)} | {verdict} | {seconds:.1f} | {peak:.0f} |",
                  flush=True)
    total = len(chosen)
    print(f"aiter-emulate: {total - failures} of {total} configurations passed "
          f"at m {args.m}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
