// The fused MegaMoE stages (#moe.peer): stage 1 reads the launch epoch from
// control word 6, takes an arrival ticket, arrives on word 7 (the last of
// the 6 workgroups takes it back to 0 and advances the epoch),
// dispatches routes with an atomic per receive row on the destination and
// signals every destination, spins (scf.while + s_sleep) until every rank's
// producers are done, then runs W13 tiles from the work list; stage 2 stores
// weighted BF16 rows into the source rank's combine buffer (one branch per
// rank) and the last wave signals every source; the peer-rows combine waits
// for ep signals and does not weight again.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p1 = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = f8E4M3FN, weight = f4E2M1FN,
                   output = f8E4M3FN>
#p2 = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = f8E4M3FN, weight = f4E2M1FN,
                   output = bf16>
#pc = #moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2,
                   ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>
#peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6,
                  dispatch_cus = 2>

// The symmetric buffer of each rank (moec/abi/peer_protocol.h): control
// words at 0 (88 words, rounded up to 512 bytes), combine rows (16 x 2 x
// 512 BF16) at 512, receive metadata (128 rows x 8 bytes) at 33280, receive
// scales (128 x 16) at 34304, receive rows (128 x 512) at 36352.
// Stage 1: 11 fixed arguments (no epoch; this rank's symmetric buffer 9th),
// then one symmetric buffer per rank: no per-region pointer arguments.
// CHECK-LABEL: gpu.func @stage1(
// CHECK-SAME: %arg8: memref<2147483647xi8, #gpu.address_space<global>>, %arg9: i32, %arg10: i32, %arg11: memref<2147483647xi8, #gpu.address_space<global>>, %arg12: memref<2147483647xi8, #gpu.address_space<global>>)
// CHECK-SAME: workgroup(
// CHECK-NOT: epoch
// CHECK: memref.view %arg8[%c0{{[_0-9]*}}][] : memref<2147483647xi8, #gpu.address_space<global>> to memref<88xi32, #gpu.address_space<global>>
// CHECK: memref.atomic_rmw addi %c0_i32{{[_0-9]*}}, %{{.*}}[%c6{{[_0-9]*}}]
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c0{{[_0-9]*}}]
// CHECK: arith.remui %{{.*}}, %c6_i32
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c7{{[_0-9]*}}]
// CHECK: arith.cmpi eq, %{{.*}}, %c5_i32
// CHECK: memref.atomic_rmw addi %c-6_i32{{[_0-9]*}}, %{{.*}}[%c7{{[_0-9]*}}]
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c6{{[_0-9]*}}]
// Producer: the destination's base by a select over the ranks, then the
// count of the route's expert in its control words, the row, scales and
// metadata at their offsets, or the overflow word (2).
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i32
// CHECK: %[[DEST:.*]] = arith.select %{{.*}}, %arg11, %arg12 : memref<2147483647xi8, #gpu.address_space<global>>
// CHECK: %[[DCTL:.*]] = memref.view %[[DEST]][%c0{{[_0-9]*}}][] : {{.*}} to memref<88xi32, #gpu.address_space<global>>
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %[[DCTL]]
// CHECK: arith.cmpi slt, %{{.*}}, %c32_i32
// CHECK: memref.view %[[DEST]][%c36352{{[_0-9]*}}][] : {{.*}} to memref<16384xi32, #gpu.address_space<global>>
// CHECK: memref.view %[[DEST]][%c34304{{[_0-9]*}}][] : {{.*}} to memref<2048xi8, #gpu.address_space<global>>
// CHECK: memref.view %[[DEST]][%c33280{{[_0-9]*}}][] : {{.*}} to memref<256xi32, #gpu.address_space<global>>
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %[[DCTL]][%c2{{[_0-9]*}}]
// Every producer wave signals both destinations.
// CHECK-COUNT-2: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c1{{[_0-9]*}}]
// Wait for ep * dispatch_cus * waves = 16 signals per epoch.
// CHECK: arith.muli %{{.*}}, %c16_i32
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi %c0_i32
// CHECK: rocdl.s.sleep 1
// CHECK: gpu.barrier
// CHECK: amdgpu.scaled_mfma
moe.w13 @stage1 problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 10.0 : f32, peer = #peer}

// Stage 2: this rank's symmetric buffer (its metadata and control words)
// and every rank's (their combine rows and control words); the epoch stage
// 1 advanced, then weighted BF16 rows, non-temporal stores into rank 0 or
// rank 1.
// CHECK-LABEL: gpu.func @stage2(
// CHECK-SAME: %arg4: memref<2147483647xi8, #gpu.address_space<global>>, %arg5: memref<2147483647xi8, #gpu.address_space<global>>, %arg6: memref<2147483647xi8, #gpu.address_space<global>>)
// CHECK: %[[CTL:.*]] = memref.view %arg4[%c0{{[_0-9]*}}][] : {{.*}} to memref<88xi32
// CHECK: memref.load %[[CTL]][%c6{{[_0-9]*}}]
// CHECK: memref.view %arg4[%c33280{{[_0-9]*}}][] : {{.*}} to memref<256xi32
// CHECK: memref.view %arg5[%c512{{[_0-9]*}}][] : {{.*}} to memref<16384xbf16
// CHECK: memref.view %arg6[%c512{{[_0-9]*}}][] : {{.*}} to memref<16384xbf16
// CHECK: amdgpu.scaled_mfma
// CHECK: arith.mulf
// CHECK: arith.truncf {{.*}} to vector<4xbf16>
// CHECK: scf.if
// CHECK: vector.store {{.*}}nontemporal = true
// CHECK: scf.if
// CHECK: vector.store {{.*}}nontemporal = true
// The wave that completes 6 workgroups x 4 waves signals both sources.
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c3{{[_0-9]*}}]
// CHECK: arith.remui %{{.*}}, %c24_i32
// CHECK-COUNT-2: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c4{{[_0-9]*}}]
moe.w2 @stage2 problem(#p2) tile(#moe.tile<m = 16, n = 128, orientation = b_major>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6>}

// The peer-rows combine reads its rows at 512 and its control words at 0
// of this rank's symmetric buffer (the first argument).
// CHECK-LABEL: gpu.func @combine(
// CHECK-SAME: %arg0: memref<2147483647xi8, #gpu.address_space<global>>
// CHECK: memref.view %arg0[%c512{{[_0-9]*}}][]
// CHECK: %[[CCTL:.*]] = memref.view %arg0[%c0{{[_0-9]*}}][] : {{.*}} to memref<88xi32
// CHECK: memref.load %[[CCTL]][%c6{{[_0-9]*}}]
// CHECK: arith.muli %{{.*}}, %c2_i32
// CHECK: scf.while
// CHECK: gpu.barrier
// CHECK-NOT: arith.mulf
// CHECK: arith.addf
moe.combine @combine problem(#pc) tile(#moe.combine_tile<waves = 4>) {peer_rows}

// Compact: the first producer counts the routes per destination expert
// with LDS atomics, publishes the counts into every destination's
// source-count table and signals word 5; every producer waits for each
// destination's table (ep x waves planner signals per launch) and takes
// rows from its own cursor (an atomic on this rank's control buffer).
// CHECK-LABEL: gpu.func @stage1_compact(
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}} : (i32, memref<{{[0-9]+}}xi32, #gpu.address_space<workgroup>>)
// CHECK-COUNT-2: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c5{{[_0-9]*}}]
// CHECK: arith.muli %{{.*}}, %c8_i32
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi %c0_i32{{[_0-9]*}}, %{{.*}}[%c5{{[_0-9]*}}]
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi %c0_i32{{[_0-9]*}}, %{{.*}}[%c5{{[_0-9]*}}]
// CHECK: amdgpu.scaled_mfma
moe.w13 @stage1_compact problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 10.0 : f32, peer = #moe.peer<transport = compact, capacity = 64, max_tokens = 16, workgroups = 6, dispatch_cus = 2>}

// work_shards = 2: the W2 items come from a queue of 2 shards; thread 0
// takes a ticket per item with an atomic on the stage's queue word.
// CHECK-LABEL: gpu.func @stage2_queue(
// CHECK: scf.for %{{.*}} = %c0{{.*}} to %c2{{.*}} step %c1
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi %c1_i32
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: arith.cmpi ult
// CHECK: scf.condition
// CHECK: amdgpu.scaled_mfma
moe.w2 @stage2_queue problem(#p2) tile(#moe.tile<m = 16, n = 128, orientation = b_major>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6, work_shards = 2>}

// plan_cus = 2, chunk_routes = 4: the planners take slices of the routes
// and add (not store) their counts into the destinations' tables; the
// producers wait for ep x 2 x waves = 16 planner signals; each wave walks
// chunks of 4 routes.
// CHECK-LABEL: gpu.func @stage1_planners(
// CHECK: arith.cmpi ult, %{{.*}}, %c2
// CHECK: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}} : (i32, memref<{{[0-9]+}}xi32, #gpu.address_space<workgroup>>)
// CHECK-COUNT-2: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c5{{[_0-9]*}}]
// CHECK: arith.muli %{{.*}}, %c16_i32
// CHECK: scf.for %[[C:.*]] = %{{.*}} to %{{.*}} step %c64
// CHECK: arith.addi %[[C]], %c4
// CHECK: scf.for %{{.*}} = %[[C]] to %{{.*}} step %c1
moe.w13 @stage1_planners problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 10.0 : f32, peer = #moe.peer<transport = compact, capacity = 64, max_tokens = 16, workgroups = 6, dispatch_cus = 4, plan_cus = 2, chunk_routes = 4>}

// dispatch = only: the dispatch kernel: tickets, the producer loop and the
// signals, no GEMM and no wait.
// CHECK-LABEL: gpu.func @dispatch_only(
// CHECK: memref.atomic_rmw addi %c1_i32
// CHECK-COUNT-2: memref.atomic_rmw addi %c1_i32{{[_0-9]*}}, %{{.*}}[%c1{{[_0-9]*}}]
// CHECK-NOT: scf.while
// CHECK-NOT: amdgpu.scaled_mfma
// CHECK: gpu.return
moe.w13 @dispatch_only problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 10.0 : f32, peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 4, dispatch_cus = 4, dispatch = only>}

// dispatch = none: no producers; waits for ep x 4 x 4 = 32 signals.
// CHECK-LABEL: gpu.func @after_dispatch(
// CHECK-NOT: arith.cmpi ult, %{{.*}}, %c4 :
// CHECK: arith.muli %{{.*}}, %c32_i32
// CHECK: scf.while
// CHECK: amdgpu.scaled_mfma
moe.w13 @after_dispatch problem(#p1) tile(#moe.tile<m = 16, n = 64, orientation = b_major>) {swiglu_limit = 10.0 : f32, peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 6, dispatch_cus = 4, dispatch = none>}
