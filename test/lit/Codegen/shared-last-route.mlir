// FHMoE's sort and combine with shared_last_route: the last of a token's
// top_k routes (here slot 2 of 3) takes only the shared id experts - 1 = 8,
// the routed slots only ids in [0, 8).
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 512, intermediate = 256, experts = 9, top_k = 3,
                  activation = bf16, weight = f4E2M1FN, output = bf16>

// The sort's route test (counts, then scatter): id in [0, 9), and
// (route % 3 == 2) == (id == 8).
// CHECK-LABEL: gpu.func @sort_shared(
// CHECK: %[[ID:.*]] = memref.load
// CHECK: arith.cmpi slt, %{{.*}}, %c9_i32
// CHECK: %[[SLOT:.*]] = arith.remui %{{.*}}, %c3 : index
// CHECK: %[[LAST:.*]] = arith.cmpi eq, %[[SLOT]], %c2 : index
// CHECK: %[[SH:.*]] = arith.cmpi eq, %[[ID]], %c8_i32 : i32
// CHECK: arith.cmpi eq, %[[LAST]], %[[SH]] : i1
// CHECK: memref.atomic_rmw addi
// CHECK: arith.remui %{{.*}}, %c3 : index
// CHECK: gpu.return
moe.sort @sort_shared problem(#p) {m_tile = 32 : i64, shared_last_route}

// The combine: routed slots 0 and 1 below 8, the last slot equal to 8.
// CHECK-LABEL: gpu.func @combine_shared(
// CHECK: arith.cmpi slt, %{{.*}}, %c8_i32 : i32
// CHECK: arith.cmpi slt, %{{.*}}, %c8_i32{{.*}} : i32
// CHECK: %[[ID2:.*]] = memref.load {{.*}} : memref<268435456xi32,
// CHECK: arith.cmpi eq, %[[ID2]], %c8_i32{{.*}} : i32
// CHECK-NOT: arith.cmpi slt, %{{.*}}, %c9_i32
// CHECK: gpu.return
moe.combine @combine_shared problem(#p)
    tile(#moe.combine_tile<blocks = 0, waves = 4>) {shared_last_route}

// Without the attribute the combine keeps [0, 9) for every slot.
// CHECK-LABEL: gpu.func @combine_plain(
// CHECK-COUNT-3: arith.cmpi slt, %{{.*}}, %c9_i32
// CHECK-NOT: arith.cmpi eq, %{{.*}}, %c8_i32
// CHECK: gpu.return
moe.combine @combine_plain problem(#p)
    tile(#moe.combine_tile<blocks = 0, waves = 4>)
