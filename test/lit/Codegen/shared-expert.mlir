// FHMoE: with shared_fp8_expert the last logical expert (here 8 of 0..8)
// takes its own K loop with FP8 B fragments, read from two extra arguments;
// the routed experts keep the E2M1 loop. Both feed one epilogue.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 512, intermediate = 256, experts = 9, top_k = 3,
                  activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>

// The routed B tensor holds 8 experts (8 x 512 x 128 bytes / 4 = 131072
// dwords); the shared one [512, 256] FP8 = 32768 dwords plus its scales.
// CHECK-LABEL: gpu.func @w2_shared(
// CHECK-SAME: %{{.*}}: memref<131072xi32, #gpu.address_space<global>>
// CHECK-SAME: %{{.*}}: memref<32768xi32, #gpu.address_space<global>>, %{{.*}}: memref<4096xi8, #gpu.address_space<global>>)
// CHECK: %[[SHARED:.*]] = arith.cmpi eq, %{{.*}}, %c8_i32
// CHECK: scf.if %[[SHARED]] -> (vector<4xf32>, vector<4xf32>)
// CHECK: scf.for
// CHECK: amdgpu.scaled_mfma 16x16x128 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf32>
// CHECK: } else {
// CHECK: scf.for
// CHECK: amdgpu.scaled_mfma 16x16x128 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf32>
moe.w2 @w2_shared problem(#p) tile(#moe.tile<m = 16, n = 128>) {shared_fp8_expert}

// CHECK-LABEL: gpu.func @w13_shared(
// CHECK: scf.if %{{.*}} -> (vector<4xf32>, vector<4xf32>) {
// CHECK: vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>
// CHECK: } else {
// CHECK: vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>
// CHECK: math.exp2
moe.w13 @w13_shared problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 9, top_k = 3, activation = f8E4M3FN, weight = f4E2M1FN,
    output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {shared_fp8_expert}
