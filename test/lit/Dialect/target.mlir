// The chip moe ops are for is the closest `moe.target` around them (gfx950
// without one); the verifiers check each op against its facts, and the
// moe-verify-target pass checks a module against any chip, reporting every
// problem of every op.
// RUN: moe-opt %s -split-input-file -verify-diagnostics
// RUN: moe-opt %s -split-input-file -verify-diagnostics --moe-verify-target
// (Every op is verified against its own chip at parse; the pass without a
// chip option then finds nothing more.)

// gfx950 by default: this W13 tile is valid.
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 128, n = 256, waves = 8>)

// -----
// The same op on gfx942: every missing feature and exceeded limit.
module attributes {moe.target = "gfx942"} {
  // expected-error @+3 {{gfx942 has no MXFP4 scaled MFMA (V_MFMA_SCALE_F32_16X16X128_F8F6F4)}}
  // expected-error @+2 {{gfx942 has no OCP FP8 conversion}}
  // expected-error @+1 {{'moe.w13' op tile (m 128, n 256, k 256) needs 131072 bytes of LDS; gfx942 has 65536}}
  moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 128, n = 256, waves = 8>)
}

// -----
// gfx942 has more CUs: 9000 persistent workgroups are resident there (not
// on gfx950, whose 8192 wave slots invalid.mlir checks).
module attributes {moe.target = "gfx942"} {
  moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = 9000>)
}

// -----
// ... but its LDS is 64 KiB.
module attributes {moe.target = "gfx942"} {
  // expected-error @+1 {{problem.experts / problem.ep (16384 local experts) needs 132100 bytes of LDS for the counts; gfx942 has 65536}}
  moe.sort @s problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 16384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) {m_tile = 16 : i64}
}

// -----
module attributes {moe.target = "gfx1100"} {
  // expected-error @+1 {{moe.target = "gfx1100" is not a chip moec knows (gfx950, gfx942, mi350p)}}
  moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = 0>)
}
