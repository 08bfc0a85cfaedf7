// The A4W4 kernels (MXFP4 activations, f4E2M1FN): moe.quant writes MXFP4
// token rows with AITER's rule in integer arithmetic (the scale from
// bits(amax) + 0x200000, element codes counted against the E2M1 rounding
// boundaries' FP32 bits, no truncf to f4E2M1FN), one 16-byte store of 32
// packed codes and one scale byte per block; moe.w13 and moe.w2 load FP4 A
// fragments (16 bytes, 32 E2M1 codes per lane) and issue the scaled MFMA
// with FP4 on both sides, which the ROCDL conversion passes on as two
// vector<4xi32> operands (an FP8 A operand is vector<8xi32>); W13 writes
// its intermediate as MXFP4 or FP8 as problem.output says.
// RUN: moe-opt %s -split-input-file --moe-lower-to-kernel | FileCheck %s
// RUN: moe-opt %s -split-input-file --pass-pipeline='builtin.module(moe-lower-to-kernel,gpu.module(convert-scf-to-cf,convert-arith-to-amdgpu{chipset=gfx950 saturate-fp8-truncf=true},moe-lower-math-to-native,convert-gpu-to-rocdl{chipset=gfx950 runtime=HIP use-bare-ptr-memref-call-conv=true index-bitwidth=32},reconcile-unrealized-casts))' | FileCheck %s --check-prefix=ROCDL

// CHECK-LABEL: gpu.func @quant_fp4(
// CHECK-NOT: truncf
// CHECK: arith.constant 2097152 : i32
// CHECK: arith.addi %{{.*}}, %c2097152_i32 : i32
// CHECK: arith.constant dense<1048576000> : vector<4xi32>
// CHECK-NEXT: arith.cmpi ugt, %{{.*}} : vector<4xi32>
// CHECK: arith.constant dense<1061158912> : vector<4xi32>
// CHECK-NEXT: arith.cmpi uge, %{{.*}} : vector<4xi32>
// CHECK-NOT: truncf
// CHECK: vector.store %{{.*}} : memref<{{[0-9]+}}xi32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi32>
// CHECK-NEXT: arith.trunci %{{.*}} : i32 to i8
// CHECK-NEXT: memref.store %{{.*}} : memref<{{[0-9]+}}xi8, #amdgpu.address_space<fat_raw_buffer>>
// CHECK-NOT: vector.store
// CHECK: gpu.return
// ROCDL-LABEL: llvm.func @quant_fp4(
// ROCDL-NOT: unrealized_conversion_cast
moe.quant @quant_fp4 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = bf16, weight = f4E2M1FN,
    output = f4E2M1FN>)

// -----

// CHECK-LABEL: gpu.func @w13_fp4_fp4(
// CHECK: vector.bitcast %{{.*}} : vector<4xi32> to vector<32xf4E2M1FN>
// CHECK: amdgpu.scaled_mfma 16x16x128 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf32>
// The MXFP4 intermediate: AITER's scale, no FP8 conversion.
// CHECK-NOT: f8E4M3FN
// CHECK: arith.constant 2097152 : i32
// CHECK-NOT: f8E4M3FN
// CHECK: gpu.return
// ROCDL-LABEL: llvm.func @w13_fp4_fp4(
// ROCDL: rocdl.mfma.scale.f32.16x16x128.f8f6f4 {{.*}} : (vector<4xi32>, vector<4xi32>, vector<4xf32>, i32, i32, i32, i32, i32, i32) -> vector<4xf32>
// ROCDL-NOT: unrealized_conversion_cast
moe.w13 @w13_fp4_fp4 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN,
    output = f4E2M1FN>) tile(#moe.tile<m = 32, n = 64>)

// -----

// An FP8 intermediate (`_fp8` names): the FP8 block quantiser's truncf.
// CHECK-LABEL: gpu.func @w13_fp4_fp8(
// CHECK: amdgpu.scaled_mfma 32x32x64 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<16xf32>
// CHECK-NOT: 2097152
// CHECK: arith.truncf %{{.*}} : vector<4xf32> to vector<4xf8E4M3FN>
// CHECK: gpu.return
moe.w13 @w13_fp4_fp8 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN,
    output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128, mfma = m32n32k64>)

// -----

// CHECK-LABEL: gpu.func @w2_fp4(
// CHECK: vector.bitcast %{{.*}} : vector<4xi32> to vector<32xf4E2M1FN>
// CHECK: amdgpu.scaled_mfma 16x16x128 {{.*}} : vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf8E8M0FNU>, vector<32xf4E2M1FN>, vector<4xf32>
// CHECK: arith.truncf %{{.*}} : vector<4xf32> to vector<4xbf16>
// ROCDL-LABEL: llvm.func @w2_fp4(
// ROCDL: rocdl.mfma.scale.f32.16x16x128.f8f6f4 {{.*}} : (vector<4xi32>, vector<4xi32>, vector<4xf32>, i32, i32, i32, i32, i32, i32) -> vector<4xf32>
// ROCDL-NOT: unrealized_conversion_cast
moe.w2 @w2_fp4 problem(#moe.problem<hidden = 512, intermediate = 256,
    experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN,
    output = bf16>) tile(#moe.tile<m = 32, n = 128>)
