//===- Passes.td - moec codegen passes ---------------------*- tablegen -*-===//

#ifndef MOEC_CODEGEN_PASSES_TD
#define MOEC_CODEGEN_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeLowerToKernel : Pass<"moe-lower-to-kernel", "::mlir::ModuleOp"> {
  let summary = "Lower every moe stage op to a gpu.module with one gpu.func";
  let description = [{
    Replaces each `moe` stage op with a `gpu.module` of the same name holding
    one `gpu.func` kernel, built from scf, arith, vector, memref, gpu and
    amdgpu ops. This kernel IR is the level the CPU emulator executes; the
    upstream ROCDL conversion takes it from there. Each kernel is built for
    its op's chip, named by the closest `moe.target` attribute around it
    (gfx950 without one): its wave size, XCD count and cache-policy bits
    come from that chip's facts (moec/target).

    Before:
    ```mlir
    moe.w2 @w2 problem(#moe.problem<...>) tile(#moe.tile<m = 32, n = 128>)
    ```
    After:
    ```mlir
    module attributes {gpu.container_module} {
      gpu.module @w2 {
        gpu.func @w2(%a: memref<...>, ...) kernel
            attributes {known_block_size = array<i32: 256, 1, 1>} {
          ... amdgpu.fat_raw_buffer_cast, vector.load, amdgpu.scaled_mfma ...
        }
      }
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::amdgpu::AMDGPUDialect", "::mlir::arith::ArithDialect",
    "::mlir::gpu::GPUDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::ROCDL::ROCDLDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

def MoeVerifyTarget : Pass<"moe-verify-target", "::mlir::ModuleOp"> {
  let summary = "Check every moe stage op against a chip's facts";
  let description = [{
    moe ops are compiled for the chip named by the closest `moe.target`
    string attribute around them (`module attributes {moe.target =
    "gfx942"}`), or gfx950 without one, and the op verifiers check each op
    against that chip. This pass checks every stage op against the chip of
    the `chip` option instead (the ops' own chip when it is empty) and,
    unlike a verifier, which stops at the first problem, reports every
    problem of every op: each feature the op needs that the chip lacks (the
    scaled MFMA of MXFP4, OCP FP8 conversions, 16-byte LDS DMA) and each
    limit it exceeds (LDS, CUs, wave slots, accumulator registers), one
    error each. It changes nothing; it fails when there is any problem.
    The chips and their facts are moec/target's (docs/targets.md).

    ```mlir
    // moe-opt --moe-verify-target=chip=gfx942
    moe.w13 @w13 problem(#moe.problem<...>) tile(#moe.tile<m = 16, n = 64>)
    // error: gfx942 has no MXFP4 scaled MFMA (V_MFMA_SCALE_F32_16X16X128_F8F6F4)
    // error: gfx942 has no OCP FP8 conversion (problem.output f8E4M3FN; ...)
    ```
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"\"",
           "Chip to check against (gfx950, gfx942); empty: the chip each "
           "op is compiled for">
  ];
}

def MoeLowerMathToNative : Pass<"moe-lower-math-to-native", "::mlir::gpu::GPUModuleOp"> {
  let summary = "Lower f32 math.exp2 to the native gfx950 instruction";
  let description = [{
    The upstream ROCDL conversion turns `math.exp2` into a call to the ROCm
    device library (`__ocml_exp2_f32`), which moec does not link: kernels
    must link with `--no-undefined` and without a ROCm install. For f32 the
    library function is the hardware instruction `v_exp_f32`, so this pass
    rewrites `math.exp2` on f32 scalars and vectors to `rocdl.exp2` (vectors
    element by element) before that conversion. The kernel IR the emulator
    runs keeps `math.exp2`.

    Before:
    ```mlir
    %e = math.exp2 %x : vector<2xf32>
    ```
    After:
    ```mlir
    %x0 = vector.extract %x[0] : f32 from vector<2xf32>
    %e0 = rocdl.exp2 %x0 f32 -> f32
    ...
    %e = vector.from_elements %e0, %e1 : vector<2xf32>
    ```
  }];
  let dependentDialects = [
    "::mlir::ROCDL::ROCDLDialect", "::mlir::vector::VectorDialect"
  ];
}

#endif // MOEC_CODEGEN_PASSES_TD
