//===- KernelIr.h - a kernel's IR as stored in a bundle ---------*- C++ -*-===//
///
/// \file
/// Every kernel of a bundle carries the kernel-level IR its code object was
/// compiled from: its gpu.module after moe-lower-to-kernel, as MLIR
/// bytecode with locations stripped (so the bytes do not depend on where
/// the table was read from). The emulator executes exactly this IR.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_KERNELIR_H
#define MOEC_COMPILER_KERNELIR_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec {

/// The bytecode of the gpu.module `@kernelName` of `kernelIR` (a module as
/// lowerToKernelIR leaves it), in a module with the same attributes.
mlir::FailureOr<std::vector<uint8_t>>
serializeKernelIr(mlir::ModuleOp kernelIR, llvm::StringRef kernelName);

/// Parses stored kernel IR (bytecode or text) into `context`, which must
/// have the kernel IR's dialects loaded. On failure returns nullptr and sets
/// `error`.
mlir::OwningOpRef<mlir::ModuleOp> parseKernelIr(mlir::MLIRContext &context,
                                                llvm::ArrayRef<uint8_t> bytes,
                                                std::string &error);

/// The module as MLIR text (what `moec extract` writes as NAME.mlir).
std::string printKernelIr(mlir::ModuleOp module);

} // namespace moec

#endif // MOEC_COMPILER_KERNELIR_H
