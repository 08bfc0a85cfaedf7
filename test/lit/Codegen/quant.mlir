// The input quantisation: one lane per 1x32 block of the BF16 tokens, masked
// past the last block; four 16-byte loads widened to FP32, the activation
// recipe's exact E8M0 scale from the FP32 bits of amax, 32 FP8 codes in two
// 16-byte stores and one scale byte.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 1024, intermediate = 256, experts = 8, top_k = 2,
                  ep = 2, activation = bf16, weight = f4E2M1FN,
                  output = f8E4M3FN>

// CHECK-LABEL: gpu.func @quant_w4(
// CHECK-SAME: %{{.*}}: memref<{{[0-9]+}}xi32, #gpu.address_space<global>>, %{{.*}}: memref<{{[0-9]+}}xi32, #gpu.address_space<global>>, %{{.*}}: memref<{{[0-9]+}}xi8, #gpu.address_space<global>>, %{{.*}}: i32)
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: %[[BLOCKS:.*]] = arith.muli %{{.*}}, %c32 : index
// CHECK: %[[WG:.*]] = gpu.block_id x
// CHECK: %[[FIRST:.*]] = arith.muli %[[WG]], %c256
// CHECK: %[[BLOCK:.*]] = arith.addi %[[FIRST]]
// CHECK: %[[IN:.*]] = arith.cmpi ult, %[[BLOCK]], %[[BLOCKS]]
// CHECK: scf.if %[[IN]] {
// CHECK-COUNT-4: vector.load {{.*}} vector<4xi32>
// CHECK: arith.extf {{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK: math.absf
// CHECK: arith.maximumf
// CHECK: arith.bitcast {{.*}} : f32 to i32
// CHECK: arith.shrui
// CHECK: arith.cmpi ugt, %{{.*}}, %c6291456_i32
// CHECK: arith.maxsi %{{.*}}, %c1_i32
// CHECK: arith.minsi %{{.*}}, %c254_i32
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xf8E4M3FN>
// CHECK-COUNT-2: vector.store {{.*}} vector<4xi32>
// CHECK: memref.store {{.*}} : memref<{{[0-9]+}}xi8, #amdgpu.address_space<fat_raw_buffer>>
// CHECK: }
// CHECK: gpu.return
moe.quant @quant_w4 problem(#p)

// waves = 8: 512 lanes, 512 blocks per workgroup.
// CHECK-LABEL: gpu.func @quant_w8(
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK: arith.muli %{{.*}}, %c512
moe.quant @quant_w8 problem(#p) {waves = 8 : i64}

