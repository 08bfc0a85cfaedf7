// The FP8 1x32 peer payload of the fused stage 2 (#moe.peer payload = fp8)
// and the combine that reads it (fp8_peer_rows). Combine rows are slots of
// moec_peer_fp8_row_bytes(512) = 512 codes + 16 scales = 528 bytes
// (moec/abi/peer_protocol.h), 16 x 2 routes per rank: 16896 bytes at 512,
// one i8 view (one buffer descriptor) per rank for codes and scales.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p2 = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = f8E4M3FN, weight = f4E2M1FN,
                   output = bf16>
#pc = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>

// Stage 2: each rank's combine rows as bytes; the
// accumulators staged in LDS, then per 1x32 block: weight, moec's scale
// rule (biased exponent - 8, +1 above mantissa 0x600000, clamped to
// [1, 254]), 8 truncf to FP8, and two 16-byte non-temporal stores and one
// scale byte (at the row's byte 512 + block) into rank 0 or rank 1.
// CHECK-LABEL: gpu.func @stage2(
// CHECK: memref.view %arg5[%c512{{[_0-9]*}}][] : {{.*}} to memref<16896xi8
// CHECK-NOT: memref.view %arg5[%c512
// CHECK: memref.view %arg6[%c512{{[_0-9]*}}][] : {{.*}} to memref<16896xi8
// CHECK-NOT: memref.view %arg6[%c512
// CHECK: amdgpu.scaled_mfma
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: arith.mulf {{.*}} : vector<4xf32>
// CHECK: arith.cmpi ugt, %{{.*}}, %c6291456_i32
// CHECK: arith.minsi %{{.*}}, %c254_i32
// CHECK-COUNT-8: arith.truncf {{.*}} : vector<4xf32> to vector<4xf8E4M3FN>
// CHECK: arith.constant 528 : index
// CHECK: scf.if
// CHECK-COUNT-2: vector.store {{.*}}nontemporal = true{{.*}}memref<16896xi8, {{.*}}vector<16xi8>
// CHECK: memref.store {{.*}}nontemporal = true{{.*}}memref<16896xi8
// CHECK: scf.if
// CHECK-NOT: arith.truncf {{.*}} to vector<4xbf16>
// CHECK-LABEL: gpu.func @stage2_bf16
moe.w2 @stage2 problem(#p2) tile(#moe.tile<m = 16, n = 128, orientation = b_major>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6, payload = fp8>}
moe.w2 @stage2_bf16 problem(#p2) tile(#moe.tile<m = 16, n = 128, orientation = b_major>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6>}

// The combine: per route 8 code bytes (vector<8xi8>, widened exactly two
// at a time, one packed FP8 conversion each) times 2^(scale - 127) (scale byte << 23 as FP32 bits), summed
// unweighted in FP32, one BF16 rounding.
// CHECK-LABEL: gpu.func @combine(
// The byte view of the rows reaches the 2^31 - 1 extent (2147483135 bytes
// from 512).
// CHECK: memref.view %arg0[%c512{{[_0-9]*}}][] : {{.*}} to memref<2147483135xi8
// CHECK: vector.load {{.*}} vector<8xi8>
// CHECK-COUNT-4: arith.extf {{.*}} : vector<2xf8E4M3FN> to vector<2xf32>
// CHECK: arith.extui {{.*}} : i8 to i32
// CHECK: arith.shli {{.*}}, %c23_i32
// CHECK: arith.mulf
// CHECK-NOT: vector<8xbf16> to vector<8xf32>
// CHECK: arith.truncf {{.*}} : vector<8xf32> to vector<8xbf16>
moe.combine @combine problem(#pc) tile(#moe.combine_tile<waves = 4>) {peer_rows, fp8_peer_rows}
