// RUN: moe-opt %s | FileCheck %s
// RUN: moe-opt %s | moe-opt | FileCheck %s

// Knobs left at their defaults are elided when printed.
// CHECK-LABEL: moe.w2 @w2_defaults
// CHECK-SAME: problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>)
// CHECK-SAME: tile(#moe.tile<m = 32, n = 128>)
moe.w2 @w2_defaults problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN,
    weight = f4E2M1FN, output = bf16>)
    tile(#moe.tile<m = 32, n = 128, k = 256, waves = 4>)

// CHECK-LABEL: moe.w2 @w2_all_knobs
// CHECK-SAME: tile(#moe.tile<m = 128, n = 256, k = 128, waves = 8, mfma = m32n32k64, orientation = b_major, b_cache = nt>)
moe.w2 @w2_all_knobs problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 2, activation = f8E4M3FN,
    weight = f4E2M1FN, output = bf16>)
    tile(#moe.tile<m = 128, n = 256, k = 128, waves = 8, mfma = m32n32k64,
                   orientation = b_major, b_cache = nt>)

// ep defaults to 1 (a tensor-parallel layer owns every expert).
// CHECK-LABEL: moe.w2 @w2_tp
// CHECK-SAME: #moe.problem<hidden = 5120, intermediate = 640, experts = 384, top_k = 6, activation
moe.w2 @w2_tp problem(#moe.problem<hidden = 5120, intermediate = 640,
    experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN,
    output = bf16>) tile(#moe.tile<m = 16, n = 128, k = 128>)

// CHECK-LABEL: moe.w13 @w13_flash
// CHECK-SAME: tile(#moe.tile<m = 32, n = 128, orientation = b_major>) {swiglu_limit = 1.000000e+01 : f32}
moe.w13 @w13_flash problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN,
    weight = f4E2M1FN, output = f8E4M3FN>)
    tile(#moe.tile<m = 32, n = 128, orientation = b_major>) {swiglu_limit = 10.0 : f32}

// CHECK-LABEL: moe.w13 @w13_tp
// CHECK-SAME: {gate_up_interleave = 16 : i64}
moe.w13 @w13_tp problem(#moe.problem<hidden = 5120, intermediate = 640,
    experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN,
    output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 128>) {gate_up_interleave = 16 : i64}

// CHECK-LABEL: moe.combine @combine_persistent
// CHECK-SAME: tile(#moe.combine_tile<blocks = 256, waves = 8>)
moe.combine @combine_persistent problem(#moe.problem<hidden = 5120,
    intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = bf16,
    weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = 256, waves = 8>)

// CHECK-LABEL: moe.sort @sort_m32
// CHECK-SAME: {m_tile = 32 : i64}
moe.sort @sort_m32 problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN,
    weight = f4E2M1FN, output = bf16>) {m_tile = 32 : i64}

// The default waves (4) is left out.
// CHECK-LABEL: moe.quant @quant_w4
// CHECK-NOT: waves
// CHECK-LABEL: moe.quant @quant_w8
// CHECK-SAME: {waves = 8 : i64}
moe.quant @quant_w4 problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 4, activation = bf16,
    weight = f4E2M1FN, output = f8E4M3FN>)
moe.quant @quant_w8 problem(#moe.problem<hidden = 5120, intermediate = 2304,
    experts = 384, top_k = 6, ep = 4, activation = bf16,
    weight = f4E2M1FN, output = f8E4M3FN>) {waves = 8 : i64}
