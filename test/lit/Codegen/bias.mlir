// Per-expert FP32 biases (AITER's FlyDSL bias1 / bias2): one more kernel
// argument, f32 [local experts, 2I] or [local experts, H], read for the
// tile's expert and added to the FP32 accumulators, in W13 before the clamp
// and the activation, in W2 before the output is rounded or stored.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p1 = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>
#p2 = #moe.problem<hidden = 512, intermediate = 512, experts = 8, top_k = 2,
                   ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>

// 4 local experts x 2I = 2048 floats, the last argument; b_major lanes hold
// four consecutive columns: one 16-byte load per gate and per up fragment,
// added before the clamp at 7.
// CHECK-LABEL: gpu.func @w13_bias(
// CHECK-SAME: %[[BIAS:arg[0-9]+]]: memref<2048xf32, #gpu.address_space<global>>) workgroup
// CHECK: %[[BUF:.*]] = amdgpu.fat_raw_buffer_cast %[[BIAS]] validBytes(%c8192_i64)
// CHECK: amdgpu.scaled_mfma
// CHECK: %[[GB:.*]] = vector.load %[[BUF]][%{{.*}}] {alignment = 16 : i64} : memref<2048xf32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xf32>
// CHECK: %[[UB:.*]] = vector.load %[[BUF]][%{{.*}}] {alignment = 16 : i64} : memref<2048xf32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xf32>
// CHECK: %[[G:.*]] = arith.addf %{{.*}}, %[[GB]] : vector<4xf32>
// CHECK: arith.addf %{{.*}}, %[[UB]] : vector<4xf32>
// CHECK: arith.minimumf %[[G]], %{{.*}} : vector<4xf32>
// CHECK: math.exp2
moe.w13 @w13_bias problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {bias, gate_up_interleave = 16 : i64, swiglu_limit = 7.0 : f32, gpt_oss_swiglu}

// Without `bias` no f32 argument and no bias load.
// CHECK-LABEL: gpu.func @w13_plain(
// CHECK-NOT: xf32, #gpu.address_space<global>>
// CHECK: workgroup
moe.w13 @w13_plain problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 7.0 : f32}

// W2, b_major: [4, H] = 2048 floats, added before the BF16 rounding.
// CHECK-LABEL: gpu.func @w2_bias(
// CHECK-SAME: %[[BIAS2:arg[0-9]+]]: memref<2048xf32, #gpu.address_space<global>>) workgroup
// CHECK: amdgpu.scaled_mfma
// CHECK: %[[BUF2:.*]] = amdgpu.fat_raw_buffer_cast %[[BIAS2]] validBytes(%c8192_i64)
// CHECK: %[[B2:.*]] = vector.load %[[BUF2]]
// CHECK: %[[SUM:.*]] = arith.addf %{{.*}}, %[[B2]] : vector<4xf32>
// CHECK: vector.shuffle %[[SUM]], %[[SUM]] [0, 1, 2, 3]
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xbf16>
moe.w2 @w2_bias problem(#p2) tile(#moe.tile<m = 16, n = 128, orientation = b_major>) {bias}

// Split-K, a_major (one column per lane: a scalar load, broadcast): only
// slice z = 0 sees the bias, the others an empty buffer that reads zeros.
// CHECK-LABEL: gpu.func @w2_bias_split(
// CHECK: %[[Z:.*]] = gpu.block_id  z
// CHECK: amdgpu.scaled_mfma
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[Z]], %c0
// CHECK: %[[BYTES:.*]] = arith.select %[[FIRST]], %c8192_i64, %c0_i64 : i64
// CHECK: %[[BUF3:.*]] = amdgpu.fat_raw_buffer_cast %{{.*}} validBytes(%[[BYTES]])
// CHECK: %[[S:.*]] = memref.load %[[BUF3]]
// CHECK: %[[V:.*]] = vector.broadcast %[[S]] : f32 to vector<4xf32>
// CHECK: arith.addf %{{.*}}, %[[V]] : vector<4xf32>
moe.w2 @w2_bias_split problem(#p2) tile(#moe.tile<m = 16, n = 128, k = 128>) {bias, split_k = 2 : i64}
