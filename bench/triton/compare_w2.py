#!/usr/bin/env python3
"""Compile time and resources of moec's W2 kernel and a Triton W2 GEMM on
the same gfx950 tiles, both single-threaded on one core.

Tiles: M 16/32/64/128 x N 64/128/256/512 x K 256 x 4/8 waves, on the Flash
EP4 down projection (N = hidden 5120, K = intermediate 2304, 96 experts per
rank). Per tile and tool: the median of --reps compile times, VGPR, AGPR,
SGPR, LDS bytes and spills.

- Triton: triton.compile() of the kernel below for GPUTarget("hip",
  "gfx950", 64) (AOT: no AMD GPU needed), timed in-process after one
  warm-up compile, with the kernel cache off (a fresh cache directory per
  compile), so imports and LLVM's start-up are not counted.
- moec: a whole `moec compile` process per one-kernel table, --no-cache,
  --jobs 1, so start-up, table parsing and the bundle write are counted.

The Triton kernel is a plain MX GEMM: FP8 E4M3 rows with E8M0 scales times
packed E2M1 weight rows with E8M0 scales (tl.dot_scaled), BF16 out. moec's
W2 kernel also gathers each tile's routed rows through the sorted route
list, so it does more per tile.

Run where Triton 3.6 is installed (see bench/triton/README.md):
  python3 bench/triton/compare_w2.py --moec PATH/moec --out DIR [--cpu 2]
Writes DIR/w2_compare.json and DIR/w2_compare.md and prints the table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HIDDEN, INTER, EXPERTS, TOP_K, EP = 5120, 2304, 384, 6, 4
TILES = [(m, n, w) for w in (4, 8) for m in (16, 32, 64, 128)
         for n in (64, 128, 256, 512)]
BLOCK_K = 256


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--moec", required=True, help="moec binary (static build)")
    p.add_argument("--out", required=True, help="directory for results")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--cpu", type=int, default=2, help="core to pin both to")
    p.add_argument("--limit", type=int, default=0, help="first N tiles only")
    return p.parse_args()


# --- Triton ---------------------------------------------------------------

def triton_compiler():
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def w2_mx_gemm(a_ptr, a_scale_ptr, b_ptr, b_scale_ptr, c_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        k_bytes = tl.arange(0, BLOCK_K)
        k_packed = tl.arange(0, BLOCK_K // 2)
        k_blocks = tl.arange(0, BLOCK_K // 32)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rows[:, None] * K + (k + k_bytes)[None, :],
                        mask=rows[:, None] < M, other=0.0)
            a_s = tl.load(a_scale_ptr + rows[:, None] * (K // 32)
                          + (k // 32 + k_blocks)[None, :],
                          mask=rows[:, None] < M, other=0)
            b = tl.load(b_ptr + cols[None, :] * (K // 2)
                        + (k // 2 + k_packed)[:, None])
            b_s = tl.load(b_scale_ptr + cols[:, None] * (K // 32)
                          + (k // 32 + k_blocks)[None, :])
            acc = tl.dot_scaled(a, a_s, "e4m3", b, b_s, "e2m1", acc)
        tl.store(c_ptr + rows[:, None] * N + cols[None, :],
                 acc.to(tl.bfloat16), mask=rows[:, None] < M)

    signature = {"a_ptr": "*fp8e4nv", "a_scale_ptr": "*u8", "b_ptr": "*u8",
                 "b_scale_ptr": "*u8", "c_ptr": "*bf16", "M": "i32",
                 "N": "i32", "K": "i32", "BLOCK_M": "constexpr",
                 "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    target = GPUTarget("hip", "gfx950", 64)

    def compile_tile(m, n, waves):
        src = ASTSource(fn=w2_mx_gemm, signature=signature,
                        constexprs={"BLOCK_M": m, "BLOCK_N": n,
                                    "BLOCK_K": BLOCK_K})
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TRITON_CACHE_DIR"] = cache
            try:
                triton.knobs.cache.dir = cache
            except AttributeError:
                pass
            start = time.perf_counter()
            kernel = triton.compile(src, target=target,
                                    options={"num_warps": waves})
            seconds = time.perf_counter() - start
        return seconds, kernel

    return triton.__version__, compile_tile


def note_value(text, key):
    found = re.search(r"^\s*\." + key + r":\s*(\d+)", text, re.M)
    return int(found.group(1)) if found else None


def triton_resources(kernel):
    text = kernel.asm.get("amdgcn", "")
    vgpr = note_value(text, "vgpr_count")
    agpr = note_value(text, "agpr_count") or 0
    return {
        # .vgpr_count is the unified count (AGPRs included), as in moec.
        "vgpr": None if vgpr is None else vgpr - agpr,
        "agpr": agpr,
        "sgpr": note_value(text, "sgpr_count"),
        # The code object's LDS size; Triton's own count as a cross-check.
        "lds": note_value(text, "group_segment_fixed_size"),
        "lds_metadata": getattr(kernel.metadata, "shared", None),
        "vgpr_spill": note_value(text, "vgpr_spill_count") or 0,
        "sgpr_spill": note_value(text, "sgpr_spill_count") or 0,
        "scratch": note_value(text, "private_segment_fixed_size") or 0,
    }


# --- moec -----------------------------------------------------------------

def moec_table(m, n, waves):
    # One kernel, one config and one selection row: the smallest table
    # `moec compile` accepts.
    return (f"moec-table 1\n"
            f"problem flash_ep4 family=megamoe hidden={HIDDEN} "
            f"intermediate={INTER} experts={EXPERTS} top_k={TOP_K} ep={EP}\n"
            f"kernel w2 stage=w2 problem=flash_ep4 m={m} n={n} k={BLOCK_K} "
            f"waves={waves} orientation=b_major\n"
            f"config c kernels=w2 provenance=model-ranked\n"
            f"select network=bench family=megamoe ep={EP} workspace=1024 "
            f"transport=fixed_slot\n"
            f"row m=1 config=c provenance=model-ranked model=bench "
            f"predicted_us=1\n")


def moec_compile(moec, cpu, table, bundle):
    start = time.perf_counter()
    proc = subprocess.run(["taskset", "-c", str(cpu), moec, "compile", table,
                           "-o", bundle, "--no-cache", "--jobs", "1", "-q"],
                          capture_output=True, text=True)
    return time.perf_counter() - start, proc


def moec_resources(moec, bundle):
    out = subprocess.run([moec, "inspect", bundle, "--json"], check=True,
                         capture_output=True, text=True).stdout
    k = json.loads(out)[0]
    return {"vgpr": k["arch_vgpr"], "agpr": k["agpr"], "sgpr": k["sgpr"],
            "lds": k["lds_bytes"], "vgpr_spill": k["vgpr_spill"],
            "sgpr_spill": k["sgpr_spill"],
            "scratch": k["private_segment_bytes"]}


def startup_breakdown(moec, cpu, work, reps=10):
    """Where a one-kernel `moec compile` process spends its time, from
    medians of `reps` runs of three commands: `moec --help` (exec, dynamic
    loader, static constructors, CLI set-up), a compile whose kernel is in
    the compile cache (adds the MLIR context and dialect registration,
    table parsing, building and hashing the kernel IR, the bundle write)
    and one with --no-cache (adds LLVM's AMDGPU code generation and the
    lld link)."""
    table = os.path.join(work, "startup.table")
    with open(table, "w") as f:
        f.write(moec_table(16, 128, 4))
    bundle = os.path.join(work, "startup.moeb")
    cache = os.path.join(work, "startup-cache")

    def median_of(argv):
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            subprocess.run(["taskset", "-c", str(cpu), moec] + argv,
                           capture_output=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    help_s = median_of(["--help"])
    subprocess.run([moec, "compile", table, "-o", bundle, "--cache-dir",
                    cache, "-q"], check=True)
    warm_s = median_of(["compile", table, "-o", bundle, "--cache-dir", cache,
                        "-q", "--jobs", "1"])
    cold_s = median_of(["compile", table, "-o", bundle, "--no-cache", "-q",
                        "--jobs", "1"])
    return {"reps": reps, "process_start_s": help_s,
            "context_parse_ir_write_s": warm_s - help_s,
            "codegen_link_s": cold_s - warm_s, "whole_cold_s": cold_s,
            "whole_warm_s": warm_s}


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.sched_setaffinity(0, {args.cpu})
    version, compile_tile = triton_compiler()
    compile_tile(16, 64, 4)  # warm-up: imports, LLVM and backend start-up
    tiles = TILES[:args.limit] if args.limit else TILES
    results = []
    work = tempfile.mkdtemp(prefix="w2cmp")
    for m, n, waves in tiles:
        row = {"m": m, "n": n, "k": BLOCK_K, "waves": waves}
        times, kernel, error = [], None, None
        for _ in range(args.reps):
            try:
                seconds, kernel = compile_tile(m, n, waves)
                times.append(seconds)
            except Exception as e:  # a tile Triton refuses is reported
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                break
        row["triton"] = ({"error": error} if error else
                         {"seconds": statistics.median(times), "times": times,
                          **triton_resources(kernel)})
        table = os.path.join(work, f"w2_{m}_{n}_{waves}.table")
        bundle = os.path.join(work, f"w2_{m}_{n}_{waves}.moeb")
        with open(table, "w") as f:
            f.write(moec_table(m, n, waves))
        times, proc = [], None
        for _ in range(args.reps):
            seconds, proc = moec_compile(args.moec, args.cpu, table, bundle)
            if proc.returncode != 0:
                break
            times.append(seconds)
        if proc.returncode != 0:
            row["moec"] = {"error": proc.stderr.strip().splitlines()[-1][:160]}
        else:
            row["moec"] = {"seconds": statistics.median(times), "times": times,
                           **moec_resources(args.moec, bundle)}
        if "seconds" in row["triton"] and "seconds" in row["moec"]:
            row["ratio"] = row["triton"]["seconds"] / row["moec"]["seconds"]
        results.append(row)
        print(json.dumps(row), flush=True)
    both = [r for r in results if "ratio" in r]
    summary = {
        "date": time.strftime("%Y-%m-%d"), "triton": version,
        "cpu": args.cpu, "reps": args.reps, "tiles": len(results),
        "tiles_both": len(both),
        "triton_median_s": statistics.median(
            r["triton"]["seconds"] for r in both) if both else None,
        "moec_median_s": statistics.median(
            r["moec"]["seconds"] for r in both) if both else None,
        "ratio_median": statistics.median(r["ratio"] for r in both)
        if both else None,
        "ratio_min": min((r["ratio"] for r in both), default=None),
        "ratio_max": max((r["ratio"] for r in both), default=None),
        "ratio_total": (sum(r["triton"]["seconds"] for r in both) /
                        sum(r["moec"]["seconds"] for r in both))
        if both else None,
        "triton_spilling_tiles": sum(
            1 for r in results if r["triton"].get("vgpr_spill", 0) or
            r["triton"].get("scratch", 0)),
        "moec_spilling_tiles": sum(
            1 for r in results if r["moec"].get("vgpr_spill", 0) or
            r["moec"].get("scratch", 0)),
    }
    summary["moec_startup"] = startup_breakdown(args.moec, args.cpu, work)
    with open(os.path.join(args.out, "w2_compare.json"), "w") as f:
        json.dump({"summary": summary, "tiles": results}, f, indent=1)
    lines = ["| M | N | waves | Triton s | moec s | ratio | Triton V/A/S | "
             "moec V/A/S | Triton LDS | moec LDS | Triton spills | "
             "moec spills |", "|" + " --- |" * 12]
    for r in results:
        t, mo = r["triton"], r["moec"]

        def cell(x, key, fmt="{}"):
            return fmt.format(x[key]) if key in x and x[key] is not None \
                else x.get("error", "-")[:40]

        def regs(x):
            return (f"{x['vgpr']}/{x['agpr']}/{x['sgpr']}" if "vgpr" in x
                    else "refused")

        def spills(x):
            return (f"{x['vgpr_spill']}/{x['sgpr_spill']}"
                    if "vgpr_spill" in x else "-")
        lines.append(
            f"| {r['m']} | {r['n']} | {r['waves']} | "
            f"{cell(t, 'seconds', '{:.3f}')} | {cell(mo, 'seconds', '{:.3f}')}"
            f" | {r['ratio']:.1f}x |" if "ratio" in r else
            f"| {r['m']} | {r['n']} | {r['waves']} | "
            f"{cell(t, 'seconds', '{:.3f}')} | {cell(mo, 'seconds', '{:.3f}')}"
            f" | - |")
        lines[-1] += (f" {regs(t)} | {regs(mo)} | {t.get('lds', '-')} | "
                      f"{mo.get('lds', '-')} | {spills(t)} | {spills(mo)} |")
    text = "\n".join(lines) + "\n\n" + json.dumps(summary, indent=1) + "\n"
    with open(os.path.join(args.out, "w2_compare.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
