// Each knob of the W2 tile changes the generated kernel IR: pairs of
// kernels below differ in exactly one knob from @w2_base.
// RUN: moe-opt %s --moe-lower-to-kernel | FileCheck %s

#p = #moe.problem<hidden = 512, intermediate = 512, experts = 8, top_k = 2,
                  ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>

// Baseline: one LDS buffer, A tile 32x256 FP8 = 2048 dwords then B tile
// 128 x 128 bytes = 4096 dwords; 4 waves; 16x16x128 MFMA with the activations as source A;
// weights through the default cache policy.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: gpu.func @w2_base(
// CHECK-SAME: workgroup(%{{.*}} : memref<6144xi32, #gpu.address_space<workgroup>>)
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// CHECK: amdgpu.fat_raw_buffer_cast %{{.*}} validBytes(%{{.*}})
// CHECK: scf.for
// CHECK-NOT: amdgpu.gather_to_lds
// CHECK: vector.load %{{.*}} : memref<{{.*}}xi32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi32>
// CHECK-NOT: nontemporal = true
// CHECK-NOT: amdgpu.gather_to_lds
// CHECK: gpu.barrier
// The E8M0 scales: one load of the row's K step (k / 32 bytes) per
// fragment, shifted right by 8 x the lane group; op_sel picks the byte.
// CHECK: vector.load {{.*}} : memref<{{.*}}xi8, #amdgpu.address_space<fat_raw_buffer>>, vector<8xi8>
// CHECK: arith.shrui
// CHECK: amdgpu.scaled_mfma 16x16x128 ({{.*}}[0] * %{{.*}}) * ({{.*}}[0] * %{{.*}}) + %{{.*}} : vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf32>
// The second MFMA of the K step reads the same words at byte 0 + 4 blocks:
// the next word, so again op_sel 0.
// CHECK: amdgpu.scaled_mfma 16x16x128 ({{.*}}[0] * %{{.*}}) * ({{.*}}[0] * %{{.*}}) + %{{.*}} : vector<4xf8E8M0FNU>
// CHECK: gpu.return
moe.w2 @w2_base problem(#p) tile(#moe.tile<m = 32, n = 128>)

// tile.m: the A tile in LDS halves (1024 + 4096 dwords).
// CHECK-LABEL: gpu.func @w2_m16(
// CHECK-SAME: workgroup(%{{.*}} : memref<5120xi32, #gpu.address_space<workgroup>>)
moe.w2 @w2_m16 problem(#p) tile(#moe.tile<m = 16, n = 128>)

// tile.n: the B tile in LDS doubles (2048 + 8192 dwords).
// CHECK-LABEL: gpu.func @w2_n256(
// CHECK-SAME: workgroup(%{{.*}} : memref<10240xi32, #gpu.address_space<workgroup>>)
moe.w2 @w2_n256 problem(#p) tile(#moe.tile<m = 32, n = 256>)

// tile.waves: the workgroup size follows.
// CHECK-LABEL: gpu.func @w2_w2(
// CHECK-SAME: known_block_size = array<i32: 128, 1, 1>
moe.w2 @w2_w2 problem(#p) tile(#moe.tile<m = 32, n = 128, waves = 2>)

// tile.b_cache = nt: weight loads are non-temporal.
// CHECK-LABEL: gpu.func @w2_nt(
// CHECK: vector.load {{.*}} {alignment = 16 : i64, nontemporal = true}
moe.w2 @w2_nt problem(#p) tile(#moe.tile<m = 32, n = 128, b_cache = nt>)

// tile.orientation = b_major: the weights feed source A.
// CHECK-LABEL: gpu.func @w2_bmajor(
// CHECK: amdgpu.scaled_mfma 16x16x128 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf32>
moe.w2 @w2_bmajor problem(#p) tile(#moe.tile<m = 32, n = 128, orientation = b_major>)

// tile.mfma = 32x32x64: 16 accumulators per lane.
// CHECK-LABEL: gpu.func @w2_mfma32(
// Two K blocks per MFMA: sub-steps 0 and 1 read bytes 0 and 2 of the
// first word (op_sel 0, 2), sub-steps 2 and 3 the second word.
// CHECK: amdgpu.scaled_mfma 32x32x64 ({{.*}}[0] * %{{.*}}) * ({{.*}}[0] * %{{.*}}) + %{{.*}} : vector<4xf8E8M0FNU>, vector<32xf8E4M3FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<16xf32>
// CHECK: amdgpu.scaled_mfma 32x32x64 ({{.*}}[2] * %{{.*}}) * ({{.*}}[2] * %{{.*}}) + %{{.*}} : vector<4xf8E8M0FNU>
moe.w2 @w2_mfma32 problem(#p) tile(#moe.tile<m = 32, n = 128, mfma = m32n32k64>)

// tile.waves_per_eu: an occupancy hint on the kernel.
// CHECK-LABEL: gpu.func @w2_wpe(
// CHECK-SAME: rocdl.waves_per_eu = 2 : i32
moe.w2 @w2_wpe problem(#p) tile(#moe.tile<m = 32, n = 128, waves_per_eu = 2>)

// tile.xcd_swizzle: the block ids are renumbered over 8 XCDs when the grid
// divides evenly.
// CHECK-LABEL: gpu.func @w2_xcd(
// CHECK: gpu.block_id  y
// CHECK: arith.remui %{{.*}}, %c8
// CHECK: arith.select
moe.w2 @w2_xcd problem(#p) tile(#moe.tile<m = 32, n = 128, xcd_swizzle = true>)

// tile.b_cache = sc1: the weight loads are marked non-temporal and the
// kernel names the SC bits (16 = SC1) for the backend to put on them.
// CHECK-LABEL: gpu.func @w2_bsc1(
// CHECK-SAME: passthrough = {{\[\["moec-b-cache-policy", "16"\]\]}}
// CHECK: vector.load {{.*}}nontemporal = true
moe.w2 @w2_bsc1 problem(#p) tile(#moe.tile<m = 32, n = 128, b_cache = sc1>)

// tile.group_m = 4: the linear block id is regrouped into runs of 4 M
// tiles (the last run shorter), M fastest inside a run.
// CHECK-LABEL: gpu.func @w2_group(
// CHECK: gpu.block_id  y
// CHECK: arith.divui %{{.*}}, %c16
// CHECK: arith.minui %{{.*}}, %c4
// CHECK: arith.remui
// CHECK: arith.divui
moe.w2 @w2_group problem(#p) tile(#moe.tile<m = 32, n = 128, group_m = 4>)

// tile.a_swizzle: A chunks are XORed with the row in LDS, for the copy and
// for the fragment loads.
// CHECK-LABEL: gpu.func @w2_aswz(
// CHECK: arith.xori
// CHECK: scf.for
// CHECK: arith.xori
moe.w2 @w2_aswz problem(#p) tile(#moe.tile<m = 32, n = 128, a_swizzle = true>)

// split_k = 2: grid z picks a K slice (here 2 steps of 128 each) and the
// output becomes FP32 partials [routes, 2, H].
// CHECK-LABEL: gpu.func @w2_splitk(
// CHECK-SAME: %{{.*}}: memref<268435456xf32, #gpu.address_space<global>>, %{{.*}}: i32, %{{.*}}: i32)
// CHECK: gpu.block_id  z
// CHECK: arith.minui
// CHECK: scf.for
// CHECK: vector.store {{.*}} : memref<268435456xf32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xf32>
moe.w2 @w2_splitk problem(#p) tile(#moe.tile<m = 32, n = 128, k = 128, orientation = b_major>) {split_k = 2 : i64}

// tile.persist_cu: a loop over M tiles, contiguous or strided; gpu.return
// after the loop.
// CHECK-LABEL: gpu.func @w2_persist(
// CHECK: arith.minui
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %c1 {
// CHECK: scf.if
// CHECK: gpu.return
moe.w2 @w2_persist problem(#p) tile(#moe.tile<m = 32, n = 128, persist_cu = 64>)
// CHECK-LABEL: gpu.func @w2_persist_strided(
// CHECK: %[[Y:.*]] = gpu.block_id  y
// CHECK: scf.for %{{.*}} = %[[Y]] to %{{.*}} step %c64{{.*}} {
moe.w2 @w2_persist_strided problem(#p) tile(#moe.tile<m = 32, n = 128, persist_cu = 64, persist_strided = true>)
// tile.persist_skew = 3: the loop runs over positions j from 0 and the
// tile is first + ((j + y * 3) mod count) * stride.
// CHECK-LABEL: gpu.func @w2_persist_skew(
// CHECK: %[[Y:.*]] = gpu.block_id  y
// CHECK: scf.for %[[J:.*]] = %c0{{.*}} to %[[COUNT:.*]] step %c1
// CHECK: %[[S:.*]] = arith.muli %[[Y]], %c3
// CHECK: %[[START:.*]] = arith.remui %[[S]], %[[COUNT]]
// CHECK: %[[P:.*]] = arith.addi %[[J]], %[[START]]
// CHECK: arith.remui %[[P]], %[[COUNT]]
moe.w2 @w2_persist_skew problem(#p) tile(#moe.tile<m = 32, n = 128, persist_cu = 64, persist_strided = true, persist_skew = 3>)

// bf16_lds: the BF16 tile goes to LDS (8-byte stores), then after a barrier
// whole 16-byte row chunks go out.
// CHECK-LABEL: gpu.func @w2_ldsout(
// CHECK: scf.for
// CHECK: vector.store {{.*}} : memref<{{[0-9]+}}xi32, #gpu.address_space<workgroup>>, vector<2xi32>
// CHECK: gpu.barrier
// CHECK: vector.store {{.*}} : memref<268435456xbf16, #amdgpu.address_space<fat_raw_buffer>>, vector<8xbf16>
moe.w2 @w2_ldsout problem(#p) tile(#moe.tile<m = 32, n = 128, orientation = b_major>) {bf16_lds}

// tile.b_prefetch: the first B tile is loaded before the loop and the next
// one after the barrier, carried as loop arguments (4 accumulators + 4 B
// chunks per lane here).
// CHECK-LABEL: gpu.func @w2_bprefetch(
// CHECK: vector.load
// CHECK: scf.for {{.*}} -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>) {
// CHECK: gpu.barrier
// CHECK-NEXT: arith.constant
// CHECK: vector.load
// CHECK: amdgpu.scaled_mfma
moe.w2 @w2_bprefetch problem(#p) tile(#moe.tile<m = 32, n = 128, b_prefetch = true>)

// tile.scale_prefetch: the scale bytes of the K step are loaded before the
// barrier (in the baseline they follow it).
// CHECK-LABEL: gpu.func @w2_scale_prefetch(
// CHECK: scf.for
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xi8, #amdgpu.address_space<fat_raw_buffer>>, vector<8xi8>
// CHECK: gpu.barrier
// CHECK-NOT: vector.load {{.*}}xi8, #amdgpu.address_space<fat_raw_buffer>>
// CHECK: amdgpu.scaled_mfma
moe.w2 @w2_scale_prefetch problem(#p) tile(#moe.tile<m = 32, n = 128, scale_prefetch = true>)

// tile.async_a (against @w2_base): the A tile goes from the raw buffer
// straight into LDS, each wave's 64 chunks from one LDS base, then the B
// tile through registers as before, and the DMA is waited for (vmcnt)
// before the barrier.
// CHECK-LABEL: gpu.func @w2_async(
// CHECK-SAME: workgroup(%{{.*}} : memref<6144xi32, #gpu.address_space<workgroup>>)
// CHECK: scf.for
// CHECK: amdgpu.gather_to_lds %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] : vector<4xi32>, memref<{{[0-9]+}}xi32, #amdgpu.address_space<fat_raw_buffer>>, memref<6144xi32, #gpu.address_space<workgroup>>
// CHECK: amdgpu.gather_to_lds
// CHECK-NOT: amdgpu.gather_to_lds
// CHECK: vector.load %{{.*}} : memref<{{.*}}xi32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi32>
// CHECK: vector.store %{{.*}} : memref<6144xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: amdgpu.memory_counter_wait load(0)
// CHECK-NEXT: gpu.barrier
// CHECK: amdgpu.scaled_mfma
moe.w2 @w2_async problem(#p) tile(#moe.tile<m = 32, n = 128, async_a = true>)

// A K tail (tile.k = 256 does not divide I = 384): the loop runs the whole
// steps, up to K 256, then the range that reaches past it (here the only
// one; split-K's last slice) runs one step of 128 under scf.if: its scale
// load is one word per row (vector<4xi8>, against the step's two words),
// its LDS is the same buffer, and it ends with the barrier the epilogue
// needs.
#ptail = #moe.problem<hidden = 512, intermediate = 384, experts = 8, top_k = 2,
                      ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>
// CHECK-LABEL: gpu.func @w2_ktail(
// CHECK-SAME: workgroup(%{{.*}} : memref<6144xi32, #gpu.address_space<workgroup>>)
// CHECK: %[[LOOPEND:.*]] = arith.minui %{{.*}}, %c256{{.*}} : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[LOOPEND]] step %c256
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xi8, #amdgpu.address_space<fat_raw_buffer>>, vector<8xi8>
// CHECK: amdgpu.scaled_mfma
// CHECK: gpu.barrier
// CHECK-NEXT: scf.yield
// CHECK: %[[HAS_TAIL:.*]] = arith.cmpi ugt, %{{.*}}, %c256{{.*}} : index
// CHECK: scf.if %[[HAS_TAIL]] -> (vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>)
// CHECK: gpu.barrier
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xi8, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi8>
// CHECK-NOT: vector<8xi8>
// CHECK: amdgpu.scaled_mfma
// CHECK: gpu.barrier
// CHECK-NEXT: scf.yield
// CHECK: } else {
// CHECK: gpu.return
moe.w2 @w2_ktail problem(#ptail) tile(#moe.tile<m = 32, n = 128>)
