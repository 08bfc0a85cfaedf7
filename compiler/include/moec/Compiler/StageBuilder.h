//===- StageBuilder.h - stage descriptions -> moe ops -----------*- C++ -*-===//
///
/// \file
/// A stage kernel is fully described by its stage name and a flat set of
/// fields: the problem (hidden, intermediate, experts, top_k, ep) and the
/// tile knobs. Tuning-table lines and bundle manifests both carry exactly
/// this, so the same builder serves the compiler and the emulator (which
/// rebuilds kernel IR from a bundle's manifest).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_STAGEBUILDER_H
#define MOEC_COMPILER_STAGEBUILDER_H

#include "moec/Codegen/KernelAbi.h"
#include "moec/Compiler/TuningTable.h"

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
  std::string stage;
  /// Problem fields and knobs, as text ("hidden" -> "5120", "b_cache" -> "nt").
  std::map<std::string, std::string> fields;
  /// Where the description was written; used in messages when set.
  SourceLine where;
};

/// The spec of a table kernel: its knobs plus its problem's fields.
StageSpec stageSpecOf(const TuningTable &table, const TableKernel &kernel);

/// What the rest of the compiler needs to know about a built stage op.
struct StageDescription {
  /// Readable symbol that encodes the problem and every knob.
  std::string symbol;
  /// Every field with defaults filled in, as (name, text) sorted by name;
  /// enough to rebuild the same op with buildStageOp.
  std::vector<std::pair<std::string, std::string>> fields;
  KernelAbi abi;
};

/// Builds and verifies the moe op for `spec` at the builder's insertion
/// point. On failure returns nullptr with a one-line `error` naming the
/// file:line (when known) and the field.
mlir::Operation *buildStageOp(mlir::OpBuilder &builder, const StageSpec &spec,
                              StageDescription &description,
                              std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_STAGEBUILDER_H
