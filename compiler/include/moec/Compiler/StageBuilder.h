//===- StageBuilder.h - knobs -> moe stage ops ------------------*- C++ -*-===//
///
/// \file
/// A stage kernel is fully described by its stage name and a flat set of
/// knobs (`name -> text`): the problem (hidden, intermediate, experts,
/// top_k, ep) and the stage op's knobs, spelled as the dialect spells them.
/// The knobs are routed through the dialect's generated knob table
/// (moec/Dialect/Moe/MoeKnobs.h) into the op's attributes and parsed and
/// verified by the dialect itself, so names, defaults and legality have one
/// home, ODS. Tuning-table lines and bundle manifests both describe kernels
/// this way.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_STAGEBUILDER_H
#define MOEC_COMPILER_STAGEBUILDER_H

#include "moec/Codegen/KernelAbi.h"
#include "moec/Compiler/KnobSpelling.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/abi/stage.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Support/LLVM.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class OpBuilder;
class Operation;
} // namespace mlir

namespace moec {

struct StageSpec {
  abi::Stage stage = abi::Stage::Quant;
  /// Problem fields and knobs, as text ("hidden" -> "5120", "b_cache" -> "nt").
  std::map<std::string, std::string> fields;
  /// Where the description was written; used in messages when set.
  SourceLine where;
};

/// The spec of a table kernel: its knobs plus its problem's fields.
StageSpec stageSpecOf(const TuningTable &table, const TableKernel &kernel);

/// The spec of a kernel recorded in a manifest: its stage and the knobs of
/// its attributes as the dialect printed them (StageDescription::attributes).
/// Building it gives the same op.
StageSpec stageSpecOfAttributes(
    abi::Stage stage,
    const std::vector<std::pair<std::string, std::string>> &attributes);

/// What the rest of the compiler needs to know about a built stage op.
struct StageDescription {
  /// Readable symbol that encodes the problem and every knob
  /// (moe::getKernelSymbol).
  std::string symbol;
  /// The op's attributes as the dialect prints them (name -> text, sorted
  /// by name; the symbol left out). Defaults are left out by the printer
  /// and filled in again by the parser, so this rebuilds the same op.
  std::vector<std::pair<std::string, std::string>> attributes;
  /// The same attributes, typed (owned by the op's MLIRContext, so valid
  /// after the op itself is lowered away): `getAs<moe::TileAttr>("tile")`.
  mlir::DictionaryAttr opAttributes;
  KernelAbi abi;
};

/// Builds and verifies the moe op for `spec` at the builder's insertion
/// point. On failure returns nullptr with a one-line `error` naming the
/// file:line (when known) and the knob.
mlir::Operation *buildStageOp(mlir::OpBuilder &builder, const StageSpec &spec,
                              StageDescription &description,
                              std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_STAGEBUILDER_H
