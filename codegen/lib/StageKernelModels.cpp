//===- StageKernelModels.cpp - StageKernelInterface of the stage ops ------===//
///
/// \file
/// The one list of which builder and which ABI function belong to which
/// stage op: every other place goes through StageKernelInterface.
///
//===----------------------------------------------------------------------===//

#include "moec/Codegen/KernelBuilders.h"
#include "moec/Codegen/StageKernelInterface.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "mlir/IR/DialectRegistry.h"

#include "moec/Codegen/StageKernelInterface.cpp.inc"

using namespace mlir;

namespace moec {
namespace {

/// StageKernelInterface of `OpT`, delegating to its stage's functions.
template <typename OpT, KernelAbi (*abiOf)(OpT),
          FailureOr<gpu::GPUModuleOp> (*build)(OpBuilder &, OpT)>
struct StageKernelModel
    : StageKernelInterface::ExternalModel<StageKernelModel<OpT, abiOf, build>,
                                          OpT> {
  KernelAbi getKernelAbi(Operation *op) const { return abiOf(cast<OpT>(op)); }
  FailureOr<gpu::GPUModuleOp> buildKernel(Operation *op,
                                          OpBuilder &builder) const {
    return build(builder, cast<OpT>(op));
  }
};

} // namespace

void registerStageKernelInterfaceModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, moe::MoeDialect *) {
    moe::QuantOp::attachInterface<
        StageKernelModel<moe::QuantOp, getQuantKernelAbi, buildQuantKernel>>(
        *context);
    moe::SortOp::attachInterface<
        StageKernelModel<moe::SortOp, getSortKernelAbi, buildSortKernel>>(
        *context);
    moe::W13Op::attachInterface<
        StageKernelModel<moe::W13Op, getW13KernelAbi, buildW13Kernel>>(
        *context);
    moe::W2Op::attachInterface<
        StageKernelModel<moe::W2Op, getW2KernelAbi, buildW2Kernel>>(*context);
    moe::CombineOp::attachInterface<StageKernelModel<
        moe::CombineOp, getCombineKernelAbi, buildCombineKernel>>(*context);
  });
}

} // namespace moec
