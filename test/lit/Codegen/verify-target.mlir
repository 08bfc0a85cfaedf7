// moe-verify-target checks every stage op against one chip and reports
// every problem of every op, one error each (docs/targets.md); it changes
// nothing. Against the ops' own chip (gfx950 here) it passes.
// RUN: moe-opt %s --moe-verify-target=chip=gfx942 -verify-diagnostics
// RUN: moe-opt %s --moe-verify-target | FileCheck %s
// RUN: not moe-opt %s --moe-verify-target=chip=gfx1100 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK: moe.w2 @w2
// CHECK: moe.w13 @w13
// CHECK: moe.sort @sort
// UNKNOWN: moe-verify-target: chip 'gfx1100' is not a chip moec knows (gfx950, gfx942, mi350p)

// expected-error @+2 {{gfx942 has no MXFP4 scaled MFMA (V_MFMA_SCALE_F32_32X32X64_F8F6F4)}}
// expected-error @+1 {{gfx942 has no 16-byte LDS DMA (tile.async_a needs BUFFER_LOAD_DWORDX4 with LDS; at most 4 bytes per lane)}}
moe.w2 @w2 problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 64, n = 256, waves = 4, mfma = m32n32k64, async_a = true>)

// expected-error @+3 {{gfx942 has no MXFP4 scaled MFMA (V_MFMA_SCALE_F32_16X16X128_F8F6F4)}}
// expected-error @+2 {{gfx942 has no OCP FP8 conversion (problem.output f8E4M3FN; gfx942's V_CVT_PK_FP8_F32 writes E4M3FNUZ)}}
// expected-error @+1 {{'moe.w13' op tile (m 64, n 256, k 256) needs 81920 bytes of LDS; gfx942 has 65536}}
moe.w13 @w13 problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 64, n = 256, waves = 4>)

// The routing sort needs nothing gfx942 lacks.
moe.sort @sort problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) {m_tile = 32 : i64}
