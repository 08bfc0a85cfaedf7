// The A16W4 kernels (BF16 activations, MXFP4 weights): moe.w13 and moe.w2
// read BF16 A fragments from LDS (four 16-byte chunks per lane and K step),
// up-convert each weight dword (8 E2M1 codes) with its E8M0 scale to
// vector<8xbf16> in integer arithmetic (the scale clamped to [2, 252], code
// 255 to NaN), and issue the unscaled BF16 MFMA of the tile's M = N
// (16x16x32 for m16n16k128, 32x32x16 for m32n32k64), which the ROCDL
// conversion lowers to rocdl.mfma.f32.*.bf16; W13 writes its intermediate
// as BF16 (truncf, no quantisation, no scale store).
// RUN: moe-opt %s -split-input-file --moe-lower-to-kernel | FileCheck %s
// RUN: moe-opt %s -split-input-file --pass-pipeline='builtin.module(moe-lower-to-kernel,gpu.module(convert-scf-to-cf,convert-arith-to-amdgpu{chipset=gfx950 saturate-fp8-truncf=true},moe-lower-math-to-native,convert-gpu-to-rocdl{chipset=gfx950 runtime=HIP use-bare-ptr-memref-call-conv=true index-bitwidth=32},reconcile-unrealized-casts))' | FileCheck %s --check-prefix=ROCDL

// CHECK-LABEL: gpu.func @w13_bf16(
// CHECK-NOT: scaled_mfma
// CHECK: vector.bitcast %{{.*}} : vector<4xi32> to vector<8xbf16>
// CHECK: arith.minui %{{.*}}, %c252_i32 : i32
// CHECK: arith.trunci %{{.*}} : vector<8xi32> to vector<8xi16>
// CHECK-NEXT: arith.bitcast %{{.*}} : vector<8xi16> to vector<8xbf16>
// CHECK: amdgpu.mfma 16x16x32 {{.*}} : vector<8xbf16>, vector<8xbf16>, vector<4xf32>
// CHECK-NOT: scaled_mfma
// The BF16 intermediate: no FP8 or MXFP4 codes, no scale bytes.
// CHECK-NOT: f8E4M3FN
// CHECK: arith.truncf %{{.*}} : vector<8xf32> to vector<8xbf16>
// CHECK-NOT: xi8
// CHECK: gpu.return
// ROCDL-LABEL: llvm.func @w13_bf16(
// ROCDL: rocdl.mfma.f32.16x16x32.bf16 {{.*}} -> vector<4xf32>
// ROCDL-NOT: unrealized_conversion_cast
moe.w13 @w13_bf16 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = bf16, weight = f4E2M1FN,
    output = bf16>) tile(#moe.tile<m = 32, n = 64>)

// -----

// CHECK-LABEL: gpu.func @w2_bf16_m32(
// CHECK-NOT: scaled_mfma
// CHECK: amdgpu.mfma 32x32x16 {{.*}} : vector<8xbf16>, vector<8xbf16>, vector<16xf32>
// CHECK-NOT: scaled_mfma
// CHECK: gpu.return
// ROCDL-LABEL: llvm.func @w2_bf16_m32(
// ROCDL: rocdl.mfma.f32.32x32x16.bf16 {{.*}} -> vector<16xf32>
// ROCDL-NOT: unrealized_conversion_cast
moe.w2 @w2_bf16_m32 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = bf16, weight = f4E2M1FN,
    output = bf16>) tile(#moe.tile<m = 32, n = 128, mfma = m32n32k64,
    orientation = b_major>)
