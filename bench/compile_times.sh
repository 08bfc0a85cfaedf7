#!/bin/sh
# Cold compile of every shipped tuning table (no cache, one job) and the
# distribution of per-kernel compile times from `moec compile
# --timings-json`: per table, then all tables pooled, overall, per phase
# and per stage (nearest-rank median and p90, as moec prints them).
#
# Usage: bench/compile_times.sh [MOEC] [OUTDIR] [TABLE...]
#   MOEC    the compiler (default build/bin/moec)
#   OUTDIR  where bundles and timing JSON go (default a new temporary dir)
#   TABLE   tables to compile (default tuning_tables/*.table)
# Run from the repository root.
set -eu
MOEC=${1:-build/bin/moec}
OUT=${2:-$(mktemp -d)}
[ $# -gt 2 ] && shift 2 || set -- tuning_tables/*.table
mkdir -p "$OUT"
for table in "$@"; do
  name=$(basename "$table" .table)
  start=$(date +%s.%N)
  "$MOEC" compile "$table" -o "$OUT/$name.moeb" --no-cache -j 1 -q \
    --timings-json "$OUT/$name.timings.json"
  end=$(date +%s.%N)
  echo "$name $start $end" >> "$OUT/process-wall.txt"
done
python3 - "$OUT" "$@" <<'PY'
import json
import math
import os
import sys

out, tables = sys.argv[1], sys.argv[2:]


def rank(values, p):
    values = sorted(values)
    return values[max(1, math.ceil(p * len(values))) - 1]


def row(label, values):
    if not values:
        return "%-26s %5d %9s %9s %9s %9s" % (label, 0, "-", "-", "-", "-")
    return "%-26s %5d %9.4f %9.4f %9.4f %9.3f" % (
        label, len(values), rank(values, 0.5), rank(values, 0.9), max(values), sum(values))


wall = {}
for line in open(os.path.join(out, "process-wall.txt")):
    name, start, end = line.split()
    wall[name] = float(end) - float(start)
header = "%-26s %5s %9s %9s %9s %9s" % ("seconds per kernel", "n", "median", "p90", "max", "total")
pooled = []
print("cold compile, --no-cache -j 1, %s" % out)
print("%-22s %7s %7s %9s %9s %9s %9s %9s" % ("table", "table k", "unique", "process s",
                                              "front s", "median", "p90", "sum"))
for table in tables:
    name = os.path.basename(table)[:-len(".table")]
    data = json.load(open(os.path.join(out, name + ".timings.json")))
    totals = [k["total_s"] for k in data["kernels"]]
    pooled += data["kernels"]
    print("%-22s %7d %7d %9.2f %9.3f %9.4f %9.4f %9.3f" % (
        name, data["table_kernels"], data["unique_kernels"], wall[name],
        data["front_end_s"], rank(totals, 0.5), rank(totals, 0.9), sum(totals)))
print("%-22s %7s %7d %9.2f" % ("all", "", len(pooled), sum(wall.values())))
print()
print("all tables pooled")
print(header)
print(row("kernel", [k["total_s"] for k in pooled]))
print(row("  kernel IR", [k["ir_s"] for k in pooled]))
print(row("  cache", [k["cache_s"] for k in pooled]))
print(row("  code generation", [k["codegen_s"] for k in pooled if not k["from_cache"]]))
print(row("  resources", [k["resources_s"] for k in pooled]))
for stage in sorted({k["stage"] for k in pooled}):
    print(row("stage " + stage, [k["total_s"] for k in pooled if k["stage"] == stage]))
PY
