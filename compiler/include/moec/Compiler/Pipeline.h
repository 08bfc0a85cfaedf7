//===- Pipeline.h - moe ops to HSACO, in process ----------------*- C++ -*-===//
///
/// \file
/// The compile path of one kernel: moe op -> kernel IR (gpu.func) -> ROCDL ->
/// LLVM IR -> AMDGPU object -> HSACO. No child processes, no ROCm install.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_PIPELINE_H
#define MOEC_COMPILER_PIPELINE_H

#include "moec/Compiler/CompileTarget.h"

#include "mlir/Support/LLVM.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace mlir {
class ModuleOp;
namespace gpu {
class GPUModuleOp;
} // namespace gpu
} // namespace mlir

namespace moec {

/// The pass pipeline from kernel IR to the LLVM dialect, as text, so it can
/// be replayed with moe-opt.
std::string getKernelToLLVMPipeline(const CompileTarget &target);

/// Runs moe-lower-to-kernel (and cleanups) on `module` in place: afterwards
/// it holds one gpu.module of kernel IR per stage op.
mlir::LogicalResult lowerToKernelIR(mlir::ModuleOp module);

/// Lowers the kernel IR of `module` (as produced by lowerToKernelIR) to the
/// LLVM dialect in place.
mlir::LogicalResult lowerKernelIRToLLVM(mlir::ModuleOp module,
                                        const CompileTarget &target);

/// Translates one lowered gpu.module into an LLVM module with the target's
/// triple and data layout set.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateToLLVMIR(mlir::gpu::GPUModuleOp gpuModule, llvm::LLVMContext &context,
                  const CompileTarget &target);

/// Optimises `module` at O3 and emits an AMDGPU relocatable object.
llvm::Expected<std::vector<uint8_t>> emitObject(llvm::Module &module,
                                                const CompileTarget &target);

/// The same as emitObject, as AMDGPU assembly: the code of the object,
/// with the backend's resource comments (NumVgprs, NumAgprs,
/// TotalNumVgprs, Occupancy, ...).
llvm::Expected<std::string> emitAssembly(llvm::Module &module,
                                         const CompileTarget &target);

/// Links a relocatable object into an HSACO shared object with lld, in
/// process and with --no-undefined. Serialised: lld keeps global state.
llvm::Expected<std::vector<uint8_t>> linkHsaco(const std::vector<uint8_t> &object);

/// The whole back half: lowerKernelIRToLLVM on a clone, translate, emit and
/// link the one gpu.module named `kernelName` of `kernelIR`.
llvm::Expected<std::vector<uint8_t>>
compileKernel(mlir::ModuleOp kernelIR, llvm::StringRef kernelName,
              const CompileTarget &target);

/// compileKernel's code as AMDGPU assembly (emitAssembly) instead of a
/// code object: the same lowering, so the same instructions. The ISA gate
/// repairs hazards in it and assembles it again (IsaGate.cpp).
llvm::Expected<std::string>
compileKernelAssembly(mlir::ModuleOp kernelIR, llvm::StringRef kernelName,
                      const CompileTarget &target);

} // namespace moec

#endif // MOEC_COMPILER_PIPELINE_H
