//===- LowerToKernel.cpp - moe stage ops -> gpu.module --------------------===//
///
/// \file
/// The moe-lower-to-kernel pass: every stage op becomes a gpu.module holding
/// its kernel. The per-stage builders live in their own files.
///
//===----------------------------------------------------------------------===//

#include "moec/Codegen/KernelBuilders.h"
#include "moec/Codegen/Passes.h"
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
#include "llvm/ADT/TypeSwitch.h"

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
    SmallVector<Operation *> stages;
    module.walk([&](Operation *op) {
      if (isa<moe::W2Op, moe::W13Op, moe::CombineOp, moe::SortOp,
              moe::QuantOp>(op))
        stages.push_back(op);
    });
    if (stages.empty())
      return;
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(&getContext()));
    OpBuilder builder(&getContext());
    for (Operation *op : stages) {
      builder.setInsertionPoint(op);
      FailureOr<gpu::GPUModuleOp> kernel =
          llvm::TypeSwitch<Operation *, FailureOr<gpu::GPUModuleOp>>(op)
              .Case([&](moe::W2Op w2) { return buildW2Kernel(builder, w2); })
              .Case([&](moe::W13Op w13) { return buildW13Kernel(builder, w13); })
              .Case([&](moe::CombineOp combine) {
                return buildCombineKernel(builder, combine);
              })
              .Case([&](moe::SortOp sort) { return buildSortKernel(builder, sort); })
              .Case([&](moe::QuantOp quant) {
                return buildQuantKernel(builder, quant);
              });
      if (failed(kernel))
        return signalPassFailure();
      op->erase();
    }
  }
};

} // namespace
} // namespace moec
