"""Checks a `moec compile --timings-json` file against itself: every
kernel's phases fit in its total, the statistics are the nearest-rank
median and p90, max and sum of the kernels' times, and a kernel has code
generation time exactly when it did not come from the cache. Prints one
line per check that held; exits 1 at the first that does not."""
import json
import math
import sys

PHASES = ["ir_s", "cache_s", "codegen_s", "resources_s"]


def nearest_rank(values, p):
    values = sorted(values)
    return values[max(1, math.ceil(p * len(values))) - 1]


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


data = json.load(open(sys.argv[1]))
kernels = data["kernels"]
if len(kernels) != data["unique_kernels"]:
    fail("%d kernel entries, %d unique kernels" % (len(kernels), data["unique_kernels"]))
for k in kernels:
    if any(k[p] < 0 for p in PHASES) or sum(k[p] for p in PHASES) > k["total_s"] + 1e-9:
        fail("%s: phases do not fit in its total" % k["symbol"])
    if k["from_cache"] != (k["codegen_s"] == 0):
        fail("%s: from_cache %s with codegen_s %g" % (k["symbol"], k["from_cache"], k["codegen_s"]))
print("ok: %d kernels, phases within each total" % len(kernels))
if sum(k["from_cache"] for k in kernels) != data["kernels_from_cache"]:
    fail("kernels_from_cache")
print("ok: %d from the cache" % data["kernels_from_cache"])

columns = {"kernel": ("total_s", False), "kernel IR": ("ir_s", False),
           "cache": ("cache_s", False), "code generation": ("codegen_s", True),
           "resources": ("resources_s", False)}
for stage in sorted({k["stage"] for k in kernels}):
    columns["stage " + stage] = ("total_s", False, stage)
for name, spec in columns.items():
    field, compiled_only = spec[0], spec[1]
    values = [k[field] for k in kernels
              if not (compiled_only and k["from_cache"])
              and (len(spec) < 3 or k["stage"] == spec[2])]
    s = data["stats"][name]
    if s["n"] != len(values):
        fail("%s: n %d, expected %d" % (name, s["n"], len(values)))
    if values:
        expected = {"median_s": nearest_rank(values, 0.5), "p90_s": nearest_rank(values, 0.9),
                    "max_s": max(values), "total_s": sum(values)}
        for key, value in expected.items():
            if abs(s[key] - value) > 1e-9:
                fail("%s: %s %g, expected %g" % (name, key, s[key], value))
    print("ok: %s n=%d" % (name, len(values)))
if data["wall_s"] < data["front_end_s"]:
    fail("wall time below the front end's")
print("ok: wall time not below the front end's")
