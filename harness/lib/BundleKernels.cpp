//===- BundleKernels.cpp - a bundle's kernels as the emulator runs them ---===//

#include "moec/Harness/BundleKernels.h"

#include "moec/Compiler/KernelIr.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/bundle.h"
#include "moec/hash.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"

#include <cstdio>

using namespace mlir;

namespace moec::emu {

LogicalResult loadBundleKernel(MLIRContext &context, const rt::Bundle &bundle,
                               uint32_t kernelIndex, BuiltKernel &kernel,
                               std::string &error) {
  const rt::KernelInfo &info = bundle.manifest().kernels.at(kernelIndex);
  const std::string where = bundle.path() + ": kernel " + info.name + ": ";
  if (!info.ir.present()) {
    error = where + "the bundle holds no kernel IR (compile it again with "
                    "this moec to emulate it)";
    return failure();
  }
  rt::CodeObjectView view;
  if (!bundle.codeObject(info.ir.object, view, error)) {
    error = where + error;
    return failure();
  }
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%016llx",
                static_cast<unsigned long long>(rt::xxh64(view.data, view.size)));
  if (info.ir.hash != hash) {
    error = where + "kernel IR hash " + hash + " does not match the manifest's " +
            info.ir.hash;
    return failure();
  }

  kernel.stage = info.stage;
  // The configuration, from the manifest's attributes, in a scratch module.
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(scratch->getBody());
  if (!buildStageOp(builder, stageSpecOfAttributes(info.stage, info.attributes),
                    kernel.description, error)) {
    error = where + "its attributes do not rebuild: " + error;
    return failure();
  }

  // The code: the stored IR.
  kernel.module = parseKernelIr(
      context, llvm::ArrayRef<uint8_t>(view.data, view.size), error);
  if (!kernel.module) {
    error = where + error;
    return failure();
  }
  kernel.func = nullptr;
  kernel.module->walk([&](gpu::GPUFuncOp func) {
    if (func.getName() == kernel.description.symbol)
      kernel.func = func;
  });
  if (!kernel.func) {
    error = where + "the stored IR has no kernel @" + kernel.description.symbol;
    return failure();
  }
  return success();
}

} // namespace moec::emu
