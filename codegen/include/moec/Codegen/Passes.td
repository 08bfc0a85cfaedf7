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
    upstream ROCDL conversion takes it from there.

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
    "::mlir::gpu::GPUDialect", "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect", "::mlir::vector::VectorDialect"
  ];
}

#endif // MOEC_CODEGEN_PASSES_TD
