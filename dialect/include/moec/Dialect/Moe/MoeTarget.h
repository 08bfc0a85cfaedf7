//===- MoeTarget.h - the chip moe ops are compiled for ----------*- C++ -*-===//
///
/// \file
/// moe ops carry no chip themselves: the closest enclosing op with a
/// `moe.target` attribute names it (`module attributes {moe.target =
/// "gfx942"} { ... }`), and without one it is target::defaultTarget()
/// (gfx950). The op verifiers check every op against that chip's facts
/// (moec/target); the moe-verify-target pass checks a module against any
/// chip and reports every problem; moe-lower-to-kernel generates code for
/// that chip. docs/targets.md.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOETARGET_H
#define MOEC_DIALECT_MOE_MOETARGET_H

#include "moec/target/target_info.h"

#include "mlir/IR/Operation.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

namespace moec::moe {

/// Name of the discardable attribute (a string) that names the chip.
inline constexpr llvm::StringLiteral kTargetAttrName = "moe.target";

/// The chip `op` is compiled for: the `moe.target` of the closest op around
/// it (or `op` itself) that has one, else the default chip. nullptr when
/// that attribute names no chip moec knows (it is not a string, or unknown).
const target::TargetInfo *lookupTarget(mlir::Operation *op);

/// lookupTarget, with an error at `op` for an unknown chip.
mlir::FailureOr<const target::TargetInfo *> getTarget(mlir::Operation *op);

/// lookupTarget of an op that passed verification (so its chip is known).
const target::TargetInfo &getVerifiedTarget(mlir::Operation *op);

/// Checks a stage op against `chip`: every feature it needs (scaled MFMA,
/// OCP FP8, 16-byte LDS DMA) and every limit (LDS, CUs, wave slots,
/// accumulator registers). Emits one error at `op` per problem, not just
/// the first, and fails when there is any. Ops that are not stage ops pass.
mlir::LogicalResult verifyOnTarget(mlir::Operation *op,
                                   const target::TargetInfo &chip);

} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_MOETARGET_H
