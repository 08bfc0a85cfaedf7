//===- MoeDialect.h - moe dialect -------------------------------*- C++ -*-===//
///
/// \file
/// The `moe` dialect: its attributes and ops. See MoeBase.td for the story.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOEDIALECT_H
#define MOEC_DIALECT_MOE_MOEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "moec/Dialect/Moe/MoeDialect.h.inc"
#include "moec/Dialect/Moe/MoeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "moec/Dialect/Moe/MoeAttrs.h.inc"

#include "moec/abi/stage.h"

#include <optional>
#include <string>

namespace moec::target {
struct TargetInfo;
} // namespace moec::target

namespace moec::moe {
/// The stage of the stage op named `opName` ("moe.w13"): the mnemonic is
/// the stage's name. Asserts that it is one.
Stage stageOfOpName(llvm::StringRef opName);

/// The activation format of element type `type` (f8E4M3FN, f4E2M1FN,
/// bf16), or none for another type.
std::optional<ActivationFormat> activationFormatOf(mlir::Type type);

/// The runtime's name for `stage` (the values agree, see MoeDialect.cpp).
constexpr abi::Stage toAbiStage(Stage stage) {
  return static_cast<abi::Stage>(static_cast<uint32_t>(stage));
}
/// The dialect's name for the runtime's `stage`.
constexpr Stage fromAbiStage(abi::Stage stage) {
  return static_cast<Stage>(static_cast<int>(stage));
}
} // namespace moec::moe

#include "moec/Dialect/Moe/MoeInterfaces.h.inc"

#define GET_OP_CLASSES
#include "moec/Dialect/Moe/MoeOps.h.inc"

namespace moec::moe {
/// The kernel symbol of a stage op: a readable name that encodes its stage,
/// types, problem and every knob that differs from the defaults
/// ("moe2_afp8_wfp4_bf16_e96_h5120_i2304_t16x128x256_w4_bmajor_bnt"). Two ops
/// with different attributes never share a symbol (the table compiler checks
/// this). Empty for an op that is not a stage op. The StageOpInterface's
/// getKernelSymbol, for callers that hold an Operation.
std::string getKernelSymbol(mlir::Operation *op);
} // namespace moec::moe

#endif // MOEC_DIALECT_MOE_MOEDIALECT_H
