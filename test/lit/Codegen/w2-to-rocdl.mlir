// The kernel IR lowers through the upstream ROCDL conversion for gfx950: the
// scaled MFMA becomes the gfx950 intrinsic with FP8 (cbsz 0) and FP4 (blgp 4)
// operands, buffers become buffer resources, and no unrealized casts remain.
// RUN: moe-opt %s --pass-pipeline='builtin.module(moe-lower-to-kernel,gpu.module(convert-scf-to-cf,convert-gpu-to-rocdl{chipset=gfx950 runtime=HIP use-bare-ptr-memref-call-conv=true index-bitwidth=32},reconcile-unrealized-casts))' | FileCheck %s

// CHECK-LABEL: llvm.func @w2_lowered(
// CHECK-SAME: %{{.*}}: !llvm.ptr<1>
// CHECK-SAME: rocdl.flat_work_group_size = "256,256"
// CHECK-SAME: rocdl.kernel
// CHECK: rocdl.make.buffer.rsrc
// CHECK: rocdl.mfma.scale.f32.16x16x128.f8f6f4 {{.*}} : (vector<8xi32>, vector<4xi32>, vector<4xf32>, i32, i32, i32, i32, i32, i32) -> vector<4xf32>
// CHECK-NOT: unrealized_conversion_cast
moe.w2 @w2_lowered problem(#moe.problem<hidden = 512, intermediate = 512,
    experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN,
    output = bf16>) tile(#moe.tile<m = 32, n = 128>)
