//===- StageKernelInterface.h - a stage op's kernel -------------*- C++ -*-===//
///
/// \file
/// StageKernelInterface (StageKernelInterface.td): a stage op's kernel ABI
/// and kernel builder, attached to the moe dialect's stage ops by
/// registerStageKernelInterfaceModels.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_STAGEKERNELINTERFACE_H
#define MOEC_CODEGEN_STAGEKERNELINTERFACE_H

#include "moec/Codegen/KernelAbi.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

#include "moec/Codegen/StageKernelInterface.h.inc"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace moec {

/// Attaches StageKernelInterface to every stage op of the moe dialect when
/// the dialect is loaded into a context built from `registry`
/// (moec::registerMoecDialects calls it).
void registerStageKernelInterfaceModels(mlir::DialectRegistry &registry);

} // namespace moec

#endif // MOEC_CODEGEN_STAGEKERNELINTERFACE_H
