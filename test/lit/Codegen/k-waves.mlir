// tile.k_waves (AITER's _kw{n}): the W13 workgroup is k_waves groups of
// tile.waves waves; group g walks the hidden range [g H/W, (g+1) H/W) with
// its own A and B tiles in LDS; groups 1.. hand their FP32 accumulators to
// group 0 through LDS, which adds them in group order and runs the
// activation; every lane then quantises.
// RUN: moe-opt %s --moe-lower-to-kernel --canonicalize --cse | FileCheck %s

#p = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                  ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>

// 2 waves x 2 groups = 256 lanes. LDS: max(2 groups x (A 32x256 + B 2x32
// rows x 128 bytes), FP32 32x32 tile + 1 group x 2 x 32 x 32 FP32) =
// max(32768, 12288) bytes = 8192 dwords; a group's tiles are 4096 dwords
// apart, its K range 256 wide. Group g >= 1 stores its 4 accumulators at
// dword 1024 (after the 32x32 activation tile), 128 lanes x 4 apart; after
// a barrier group 0 loads and adds them.
// CHECK-LABEL: gpu.func @w13_kw2(
// CHECK-SAME: workgroup(%[[LDS:.*]] : memref<8192xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[WAVE:.*]] = arith.divui %[[TID]], %c64
// CHECK: %[[GROUP:.*]] = arith.divui %[[WAVE]], %c2
// CHECK: %[[GTID:.*]] = arith.remui %[[TID]], %c128
// CHECK: %[[KBEGIN:.*]] = arith.muli %[[GROUP]], %c256
// CHECK: %[[KEND:.*]] = arith.addi %[[KBEGIN]], %c256
// CHECK: arith.muli %[[GROUP]], %c4096
// CHECK: %[[ACCS:.*]]:4 = scf.for %{{.*}} = %[[KBEGIN]] to %[[KEND]] step %c256
// CHECK: amdgpu.scaled_mfma
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[GROUP]], %c0
// CHECK: %[[OTHER:.*]] = arith.cmpi ne, %[[GROUP]], %c0
// CHECK: scf.if %[[OTHER]] {
// CHECK: vector.store %{{.*}}, %[[LDS]]
// CHECK: gpu.barrier
// CHECK-NEXT: scf.if %[[FIRST]] {
// CHECK: %[[PARTIAL:.*]] = vector.load %[[LDS]]
// CHECK: %[[BITS:.*]] = vector.bitcast %[[PARTIAL]] : vector<4xi32> to vector<4xf32>
// CHECK: arith.addf %[[ACCS]]#0, %[[BITS]] : vector<4xf32>
// CHECK: math.exp2
// CHECK: gpu.barrier
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xf8E4M3FN>
moe.w13 @w13_kw2 problem(#p) tile(#moe.tile<m = 32, n = 32, waves = 2, k_waves = 2>) {gate_up_interleave = 16 : i64}

// k_waves = 4: four partial sums per accumulator, in group order (the
// accumulator, then groups 1, 2, 3); 512 lanes.
// CHECK-LABEL: gpu.func @w13_kw4(
// CHECK-SAME: known_block_size = array<i32: 512, 1, 1>
// CHECK: arith.cmpi ne
// CHECK: scf.if
// CHECK: gpu.barrier
// CHECK-NEXT: scf.if
// CHECK: %[[S1:.*]] = arith.addf %{{.*}}#0, %{{.*}} : vector<4xf32>
// CHECK: %[[S2:.*]] = arith.addf %[[S1]], %{{.*}} : vector<4xf32>
// CHECK: arith.addf %[[S2]], %{{.*}} : vector<4xf32>
moe.w13 @w13_kw4 problem(#moe.problem<hidden = 1024, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = f4E2M1FN>) tile(#moe.tile<m = 32, n = 64, waves = 2, k_waves = 4, orientation = b_major>)

// k_waves = 1 keeps one group: no group ids, no partial-sum exchange.
// CHECK-LABEL: gpu.func @w13_kw1(
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK-NOT: arith.cmpi ne
// CHECK: scf.for %{{.*}} = %c0 to %c512 step %c256
// CHECK: gpu.return
moe.w13 @w13_kw1 problem(#p) tile(#moe.tile<m = 32, n = 32, waves = 2>) {gate_up_interleave = 16 : i64}
