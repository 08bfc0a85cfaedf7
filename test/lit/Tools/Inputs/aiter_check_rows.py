#!/usr/bin/env python3
"""For every row of AITER CSVs and several M in its token bucket, `moec select
--where` must answer that row: its line (source_row) when compiled, a refusal
naming the row otherwise. Expected rows come from the CSV text alone: AITER's
rules (_tag == flydsl_fallback dropped, first of a duplicate key kept,
gfx from cu_num 256)."""
import csv, json, subprocess, sys

moec, bundle, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
KEY = ["gfx", "cu_num", "model_dim", "inter_dim", "expert", "topk", "act_type",
       "dtype", "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1"]
FH = ["shared_expert_id", "hidden_pad", "intermediate_pad", "gate_mode"]
seen, checked, failures = set(), 0, []
for path in paths:
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        for line, fields in enumerate(reader, start=2):
            row = dict(zip(header, fields + [""] * (len(header) - len(fields))))
            if row.get("_tag", "") == "flydsl_fallback":
                continue
            if not row.get("gfx"):
                row["gfx"] = "gfx950" if row["cu_num"] == "256" else ""
            fh = all(c in row for c in FH)
            cols = KEY + (FH if fh else [])
            key = tuple(row[c] for c in cols) + (row["token"],)
            if key in seen:
                continue
            seen.add(key)
            t = int(row["token"])
            ms = {32768: [32768, 65536, 131071], 131072: [131072, 400000]}.get(
                t, sorted({max(0, t // 2 + 1) if t > 1 else 0, t, (t // 2 + 1 + t) // 2}))
            where = [a for c in cols for a in ("--where", f"{c}={row[c]}")]
            for m in ms:
                out = subprocess.run([moec, "select", bundle, "--m", str(m), "--json"] + where,
                                     capture_output=True, text=True)
                checked += 1
                if out.returncode == 0:
                    got = json.loads(out.stdout)
                    if got["source_row"] != line or got["rule"] != "exact":
                        failures.append(f"{path}:{line} m={m}: got {got['source_row']} {got['rule']}")
                elif out.returncode == 1:
                    if f"selects AITER row {path.split('/')[-1]}:{line}, which was not compiled" not in out.stderr:
                        failures.append(f"{path}:{line} m={m}: {out.stderr.strip()}")
                else:
                    failures.append(f"{path}:{line} m={m}: exit {out.returncode} {out.stderr.strip()}")
for f in failures:
    print("FAIL", f)
print(f"checked {checked} selections, {len(failures)} failures")
sys.exit(1 if failures else 0)
