#!/usr/bin/env python3
"""Checks a `moec selftest --save DIR` directory against the run's stdout.

Every PASS/FAIL line printed is in manifest.json; every case directory holds
exactly the files its entry lists, with the shapes and dtypes docs/cli.md
gives; and the relative L2 recomputed here from the saved outputs and the
saved oracle output equals the one selftest reported (so the files are the
tensors it compared, not others). Standard library only.

  selftest_saved_check.py DIR STDOUT_FILE
"""
import ast
import json
import math
import os
import struct
import sys


def read_npy(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x93NUMPY\x01\x00", path
    (length,) = struct.unpack("<H", data[8:10])
    header = ast.literal_eval(data[10:10 + length].decode("latin1"))
    body = data[10 + length:]
    code = {"<u2": "H", "<i4": "i", "<f4": "f"}[header["descr"]]
    count = math.prod(header["shape"])
    assert len(body) == count * struct.calcsize(code), path
    return header["descr"], tuple(header["shape"]), struct.unpack("<%d%s" % (count, code), body)


def bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def main():
    directory, stdout = sys.argv[1], open(sys.argv[2]).read()
    manifest = json.load(open(os.path.join(directory, "manifest.json")))
    assert manifest["format"] == "moec-selftest-save 1", manifest["format"]
    lines = [l for l in stdout.splitlines() if l.startswith(("PASS ", "FAIL "))]
    assert manifest["lines"] == lines, (manifest["lines"], lines)
    assert manifest["passed"] == sum(l.startswith("PASS") for l in lines)
    assert manifest["failed"] == sum(l.startswith("FAIL") for l in lines)
    cases = manifest["cases"]
    assert len(cases) == len(lines) and cases, (len(cases), len(lines))
    case_dirs = sorted(d for d in os.listdir(directory) if d.startswith("case-"))
    assert case_dirs == sorted(c["case"] for c in cases), case_dirs
    checked = 0
    for case in cases:
        path = os.path.join(directory, case["case"])
        assert sorted(os.listdir(path)) == sorted(case["files"]), case["case"]
        m, ep = case["m"], case["ep"]
        own = "rank0_hidden.npy" in case["files"]
        arrays = {f[:-4]: read_npy(os.path.join(path, f)) for f in case["files"]}
        prefixes = ["rank%d_" % r for r in range(ep)] if own else [""]
        for p in prefixes:
            descr, shape, _ = arrays[p + "hidden"]
            assert descr == "<u2" and shape[0] == m, (case["case"], shape)
            hidden = shape[1]
            assert arrays[p + "topk_ids"][0] == "<i4"
            assert arrays[p + "topk_weights"][0] == "<f4"
            assert arrays[p + "topk_ids"][1] == arrays[p + "topk_weights"][1]
        outs = [arrays["rank%d_out" % r] for r in range(ep)]
        assert all(o[0] == "<u2" and o[1] == (m, hidden) for o in outs)
        if case["scenario"] == "overflow":
            assert "rel_l2" not in case and "rank0_oracle.npy" not in case["files"]
            assert (case["result"] == "PASS") == (
                case["expected_overflow"] > 0 and
                case["overflow"] == case["expected_overflow"]), case["case"]
            continue
        # The layer's output against the oracle, as selftest compares them:
        # each rank's own (fused), or the sum of the ranks' partials.
        # Non-finite elements are counted, not summed (max() would drop a
        # NaN), and any of them fails the case.
        worst = 0.0
        non_finite = 0
        for r in range(ep if own else 1):
            oracle = arrays["rank%d_oracle" % r if own else "oracle"]
            assert oracle[0] == "<f4" and oracle[1] == (m, hidden)
            parts = [outs[r]] if own else outs
            err = ref = 0.0
            for i, want in enumerate(oracle[2]):
                got = sum(bf16(o[2][i]) for o in parts)
                if not math.isfinite(got):
                    non_finite += 1
                    continue
                err += (got - want) ** 2
                ref += want * want
            rel = math.sqrt(err / ref) if ref > 0 else math.sqrt(err)
            if not rel <= worst:
                worst = rel
        assert non_finite == case["non_finite"], (case["case"], non_finite)
        assert math.isclose(worst, case["rel_l2"], rel_tol=1e-9, abs_tol=1e-12), (
            case["case"], worst, case["rel_l2"])
        # A clamp case (GPT-OSS kernels) must also be far from the oracle
        # without the clamp.
        assert (case["result"] == "PASS") == (worst <= case["bound"] and
                                              non_finite == 0 and
                                              case["zero_rows_wrong"] == 0 and
                                              case["unwritten"] == 0 and
                                              case["overflow"] == 0 and
                                              case.get("unclamped_rel_l2", math.inf) >
                                              case["bound"])
        checked += 1
    assert checked > 0
    print("saved cases: %d, rel L2 recomputed for %d" % (len(cases), checked))


if __name__ == "__main__":
    main()
