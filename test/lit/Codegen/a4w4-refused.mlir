// MXFP4 activations (A4W4) are a problem the dialect admits; until the
// kernels load FP4 A tiles and write MXFP4 rows, lowering refuses each stage
// by name instead of emitting an FP8 kernel for it.
// RUN: moe-opt %s -split-input-file | FileCheck %s
// RUN: moe-opt %s -split-input-file --moe-lower-to-kernel -verify-diagnostics

// CHECK: activation = f4E2M1FN, weight = f4E2M1FN, output = f4E2M1FN
// expected-error @+1 {{'moe.w13' op MXFP4 activations (f4E2M1FN, A4W4) are not lowered to a kernel yet}}
moe.w13 @w13 problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = f4E2M1FN>) tile(#moe.tile<m = 32, n = 64>)

// -----
// CHECK: activation = f4E2M1FN, weight = f4E2M1FN, output = f8E4M3FN
// expected-error @+1 {{'moe.w13' op MXFP4 activations (f4E2M1FN, A4W4) are not lowered to a kernel yet}}
moe.w13 @w13 problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 64>)

// -----
// CHECK: activation = f4E2M1FN, weight = f4E2M1FN, output = bf16
// expected-error @+1 {{'moe.w2' op MXFP4 activations (f4E2M1FN, A4W4) are not lowered to a kernel yet}}
moe.w2 @w2 problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// CHECK: activation = bf16, weight = f4E2M1FN, output = f4E2M1FN
// expected-error @+1 {{'moe.quant' op MXFP4 token rows (problem.output f4E2M1FN, A4W4) are not lowered to a kernel yet}}
moe.quant @q problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = bf16, weight = f4E2M1FN, output = f4E2M1FN>)
