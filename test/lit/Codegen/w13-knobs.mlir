// The W13 kernel: gate and up rows per column, the activation and the FP8
// quantisation epilogue, and what gate_up_interleave and swiglu_limit change.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                  ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>

// One LDS buffer: max(A 32x256 + B 2x128 rows x 128 bytes, FP32 32x128 tile)
// = max(8192 + 32768, 16384) bytes = 10240 dwords. 2 M fragments x 2 N
// fragments per wave, each with a gate and an up accumulator: 8; the clamp (min 10, max -10) before silu; the
// quantisation writes 16-byte FP8 chunks and one scale byte per block.
// CHECK-LABEL: gpu.func @w13_concat(
// CHECK-SAME: workgroup(%{{.*}} : memref<10240xi32, #gpu.address_space<workgroup>>)
// CHECK: scf.for {{.*}} -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>) {
// CHECK: amdgpu.scaled_mfma 16x16x128
// CHECK: arith.constant dense<1.000000e+01> : vector<4xf32>
// CHECK: arith.minimumf
// CHECK: arith.constant dense<-1.000000e+01> : vector<4xf32>
// CHECK: math.exp2
// CHECK: arith.divf
// CHECK: gpu.barrier
// CHECK: arith.maximumf
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xf8E4M3FN>
// CHECK: vector.store {{.*}} : memref<268435456xi32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi32>
// CHECK: memref.store {{.*}} : memref<268435456xi8, #amdgpu.address_space<fat_raw_buffer>>
moe.w13 @w13_concat problem(#p) tile(#moe.tile<m = 32, n = 128>) {swiglu_limit = 10.0 : f32}

// swiglu_limit = 0: no clamp, plain SiLU.
// CHECK-LABEL: gpu.func @w13_silu(
// CHECK-NOT: dense<1.000000e+01>
// CHECK-NOT: amdgpu.gather_to_lds
// CHECK: math.exp2
moe.w13 @w13_silu problem(#p) tile(#moe.tile<m = 32, n = 128>)

// Concatenated gate/up: the up row of column j is j + I (256); interleaved
// by 16: rows (j / 16) * 32 + j % 16, up rows 16 further.
// CHECK-LABEL: gpu.func @w13_concat_rows(
// CHECK: arith.constant 256 : index
// CHECK-LABEL: gpu.func @w13_interleaved(
// CHECK-DAG: arith.constant 32 : index
// CHECK-DAG: arith.remui %{{.*}}, %c16
moe.w13 @w13_concat_rows problem(#p) tile(#moe.tile<m = 16, n = 64>)
moe.w13 @w13_interleaved problem(#p) tile(#moe.tile<m = 16, n = 64>) {gate_up_interleave = 16 : i64}

// tile.async_a (against @w13_silu): the A rows (tokens) go to LDS by LDS
// DMA, waited for before the barrier; the gate and up rows keep the
// register copy.
// CHECK-LABEL: gpu.func @w13_async(
// CHECK: scf.for
// CHECK: amdgpu.gather_to_lds %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] : vector<4xi32>, memref<{{[0-9]+}}xi32, #amdgpu.address_space<fat_raw_buffer>>, memref<10240xi32, #gpu.address_space<workgroup>>
// CHECK: vector.store %{{.*}} : memref<10240xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: amdgpu.memory_counter_wait load(0)
// CHECK-NEXT: gpu.barrier
// CHECK: amdgpu.scaled_mfma
// CHECK: math.exp2
moe.w13 @w13_async problem(#p) tile(#moe.tile<m = 32, n = 128, async_a = true>)

// situ_v2 (against @w13_silu): B tanh(g/B) sigmoid(g) * LB tanh(u/LB), with
// B = 2, LB = 10: the gate scaled by 1/B, raised to -20, tanh's exp2 of
// -2 log2(e) x, times B; sigmoid's exp2; the up scaled by 1/LB, the same
// tanh, times LB; three exp2 per activation vector and no clamp (L = 0).
// CHECK-LABEL: gpu.func @w13_situ(
// CHECK: amdgpu.scaled_mfma
// CHECK: gpu.barrier
// CHECK: arith.constant dense<5.000000e-01> : vector<4xf32>
// CHECK: arith.constant dense<-2.000000e+01> : vector<4xf32>
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: arith.constant dense<-2.885390e+00> : vector<4xf32>
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: math.exp2
// CHECK: arith.constant dense<2.000000e+00> : vector<4xf32>
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: arith.constant dense<-1.44269502> : vector<4xf32>
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: math.exp2
// CHECK: arith.constant dense<1.000000e-01> : vector<4xf32>
// CHECK: arith.constant dense<-2.000000e+01> : vector<4xf32>
// CHECK: math.exp2
// CHECK: arith.constant dense<1.000000e+01> : vector<4xf32>
// CHECK-NEXT: arith.mulf
// CHECK-NOT: arith.minimumf
// CHECK: gpu.barrier
moe.w13 @w13_situ problem(#p) tile(#moe.tile<m = 32, n = 128>) {situ_v2, situ_beta = 2.0 : f32, situ_linear_beta = 10.0 : f32}
