// The weighted combine reads a route's row only when its expert id is
// valid, sums in FP32 and stores 16 bytes per lane; blocks > 0 makes the
// grid persistent (a token loop), blocks = 0 covers the tokens once.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 1024, intermediate = 256, experts = 8, top_k = 2,
                  ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>

// CHECK-LABEL: gpu.func @combine_once(
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-NOT: scf.for
// CHECK: arith.cmpi sge
// CHECK: arith.cmpi slt, %{{.*}}, %c8_i32
// CHECK: scf.if %{{.*}} -> (vector<8xf32>)
// CHECK: vector.load
// CHECK: arith.extf {{.*}} : vector<8xbf16> to vector<8xf32>
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: else
// CHECK: arith.truncf {{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK: vector.store
moe.combine @combine_once problem(#p) tile(#moe.combine_tile<waves = 4>)

// CHECK-LABEL: gpu.func @combine_persistent(
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c64
moe.combine @combine_persistent problem(#p) tile(#moe.combine_tile<blocks = 32, waves = 2>)

// split_k = 2: rows are FP32 partials; each route's two are added first.
// CHECK-LABEL: gpu.func @combine_splitk(
// CHECK: scf.if %{{.*}} -> (vector<8xf32>)
// CHECK: vector.shuffle
// CHECK: vector.shuffle
// CHECK: arith.addf {{.*}} : vector<8xf32>
// CHECK: arith.mulf
moe.combine @combine_splitk problem(#p) tile(#moe.combine_tile<waves = 4>) {split_k = 2 : i64}
