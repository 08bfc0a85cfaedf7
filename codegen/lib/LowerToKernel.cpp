//===- LowerToKernel.cpp - moe stage ops -> gpu.module --------------------===//
///
/// \file
/// The moe-lower-to-kernel pass: every stage op becomes a gpu.module holding
/// its kernel. The per-stage builders live in their own files.
///
//===----------------------------------------------------------------------===//

#include "moec/Codegen/Passes.h"
#include "moec/Codegen/StageKernelInterface.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace moec {
#define GEN_PASS_DEF_MOELOWERTOKERNEL
#include "moec/Codegen/Passes.h.inc"
} // namespace moec

using namespace mlir;

namespace moec {
namespace {

struct MoeLowerToKernelPass final
    : impl::MoeLowerToKernelBase<MoeLowerToKernelPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<moe::StageOpInterface> stages;
    module.walk([&](moe::StageOpInterface op) { stages.push_back(op); });
    if (stages.empty())
      return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(&getContext()));
    OpBuilder builder(&getContext());
    for (moe::StageOpInterface op : stages) {
      auto stageKernel = dyn_cast<StageKernelInterface>(op.getOperation());
      if (!stageKernel) {
        op->emitOpError("has no kernel builder: the moe dialect was loaded "
                        "without registerStageKernelInterfaceModels");
        return signalPassFailure();
      }
      builder.setInsertionPoint(op);
      FailureOr<gpu::GPUModuleOp> kernel = stageKernel.buildKernel(builder);
      if (failed(kernel))
        return signalPassFailure();
      op->erase();
    }
  }
};

} // namespace
} // namespace moec
