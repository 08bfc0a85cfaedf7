// The routing sort: LDS counts with atomics, a scan by lane 0, tile experts
// and padding, then the stable chunked scatter with its three barriers.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

// LDS: 4 local experts x (count, cursor) + 128 lane ids + 1 = 137 dwords.
// CHECK-LABEL: gpu.func @sort(
// CHECK-SAME: workgroup(%{{.*}} : memref<137xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
// CHECK: memref.atomic_rmw addi
// CHECK: gpu.barrier
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.minui
// CHECK: gpu.barrier
// CHECK: arith.constant -1 : i32
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK: gpu.barrier
// CHECK: arith.cmpi ugt
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: gpu.return
moe.sort @sort problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN,
    weight = f4E2M1FN, output = bf16>) {m_tile = 16 : i64, waves = 2 : i64}
