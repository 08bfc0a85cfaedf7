//===- Lowering.cpp - moe ops -> kernel IR -> LLVM dialect ----------------===//

#include "moec/Compiler/Pipeline.h"
#include "moec/Codegen/Passes.h"

#include "mlir/Conversion/ArithToAMDGPU/ArithToAMDGPU.h"
#include "mlir/Conversion/GPUToROCDL/GPUToROCDLPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

std::string moec::getKernelToLLVMPipeline(const CompileTarget &target) {
  // index-bitwidth=32: every offset the kernels compute fits 32 bits, and
  // 64-bit index math costs two VGPRs and extra instructions per value.
  std::string chip = target.chip.arch;
  return "gpu.module(convert-scf-to-cf,convert-arith-to-amdgpu{chipset=" +
         chip + " saturate-fp8-truncf=true},moe-lower-math-to-native,"
         "convert-gpu-to-rocdl{chipset=" + chip +
         " runtime=HIP use-bare-ptr-memref-call-conv=true index-bitwidth=32},"
         "reconcile-unrealized-casts)";
}

LogicalResult moec::lowerToKernelIR(ModuleOp module) {
  PassManager pm(module.getContext());
  pm.addPass(createMoeLowerToKernel());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  return pm.run(module);
}

LogicalResult moec::lowerKernelIRToLLVM(ModuleOp module,
                                        const CompileTarget &target) {
  // Keep in step with getKernelToLLVMPipeline().
  PassManager pm(module.getContext());
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createSCFToControlFlowPass());
  // FP8 truncation becomes v_cvt_pk_fp8_f32 (saturating: the scales are
  // chosen so no value exceeds 448, and saturation keeps it that way).
  ArithToAMDGPUConversionPassOptions arithOptions;
  arithOptions.chipset = target.chip.arch;
  arithOptions.saturateFP8Truncf = true;
  kernels.addPass(createArithToAMDGPUConversionPass(arithOptions));
  kernels.addPass(createMoeLowerMathToNative());
  ConvertGpuOpsToROCDLOpsOptions rocdl;
  rocdl.chipset = target.chip.arch;
  rocdl.runtime = gpu::amd::Runtime::HIP;
  rocdl.useBarePtrCallConv = true;
  rocdl.indexBitwidth = 32;
  kernels.addPass(createConvertGpuOpsToROCDLOps(rocdl));
  kernels.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

llvm::Expected<std::unique_ptr<llvm::Module>>
moec::translateToLLVMIR(gpu::GPUModuleOp gpuModule, llvm::LLVMContext &context,
                        const CompileTarget &target) {
  // Translate the gpu.module op itself: mlir-translate on the enclosing
  // builtin.module would skip it.
  std::unique_ptr<llvm::Module> module =
      translateModuleToLLVMIR(gpuModule, context, gpuModule.getName());
  if (!module)
    return llvm::createStringError("failed to translate gpu.module @" +
                                   gpuModule.getName().str() + " to LLVM IR");
  module->setTargetTriple(llvm::Triple(target.triple));
  return std::move(module);
}

namespace {

/// lowerKernelIRToLLVM on a clone holding just kernel `kernelName`, then
/// `emit` on its LLVM IR.
template <typename Result, typename Emit>
llvm::Expected<Result> lowerOneKernel(ModuleOp kernelIR,
                                      llvm::StringRef kernelName,
                                      const moec::CompileTarget &target,
                                      Emit emit) {
  // A clone, so the caller's kernel IR stays intact (the emulator and
  // other kernels still need it).
  OwningOpRef<ModuleOp> single = ModuleOp::create(kernelIR.getLoc());
  single.get()->setAttrs(kernelIR->getAttrDictionary());
  auto source = kernelIR.lookupSymbol<gpu::GPUModuleOp>(kernelName);
  if (!source)
    return llvm::createStringError("no gpu.module @" + kernelName.str());
  single->getBody()->push_back(source->clone());
  if (failed(moec::lowerKernelIRToLLVM(*single, target)))
    return llvm::createStringError("lowering kernel @" + kernelName.str() +
                                   " to the LLVM dialect failed");
  auto lowered = single->lookupSymbol<gpu::GPUModuleOp>(kernelName);
  llvm::LLVMContext context;
  auto module = moec::translateToLLVMIR(lowered, context, target);
  if (!module)
    return module.takeError();
  return emit(**module);
}

} // namespace

llvm::Expected<std::vector<uint8_t>>
moec::compileKernel(ModuleOp kernelIR, llvm::StringRef kernelName,
                    const CompileTarget &target) {
  return lowerOneKernel<std::vector<uint8_t>>(
      kernelIR, kernelName, target,
      [&](llvm::Module &module) -> llvm::Expected<std::vector<uint8_t>> {
        auto object = emitObject(module, target);
        if (!object)
          return object.takeError();
        return linkHsaco(*object);
      });
}

llvm::Expected<std::string>
moec::compileKernelAssembly(ModuleOp kernelIR, llvm::StringRef kernelName,
                            const CompileTarget &target) {
  return lowerOneKernel<std::string>(
      kernelIR, kernelName, target,
      [&](llvm::Module &module) { return emitAssembly(module, target); });
}
