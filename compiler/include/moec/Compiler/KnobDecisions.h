//===- KnobDecisions.h - what the tuner, cost model and AITER do per knob -*- C++ -*-===//
///
/// \file
/// One row per (stage, knob) of the knob table generated from ODS
/// (moec/Dialect/Moe/MoeKnobs.h), recording three decisions about the knob,
/// each with a short reason:
///
///  - the tuner (compiler/lib/Tuner.cpp, docs/tuning.md "Search space"):
///    searched in the grid, tried as a one-knob refinement, searched as a
///    selection-wide (fused handshake) group, deliberately not searched, or
///    fixed by the problem or the spec;
///  - the cost model (compiler/lib/CostModel.cpp and the tuner's use of it:
///    GemmStageShape, the emulator's counted tile, the compiled kernel's
///    resources through occupancy): whether the knob's purpose reaches the
///    predicted time, or the model cannot rank it;
///  - the AITER importer (compiler/lib/AiterCsv.cpp, docs/aiter-tables.md):
///    which kernel-name part or CSV column gives the knob its value, or why
///    none does.
///
/// test/unit/compiler/KnobDecisionsTest.cpp ("[knobs]") fails when a knob of
/// the generated table has no row here, or a row names a stage or knob the
/// generated table does not have: a knob added to ODS must have its three
/// decisions recorded. Plain C++ data: no MLIR.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_KNOBDECISIONS_H
#define MOEC_COMPILER_KNOBDECISIONS_H

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace moec {

/// What `moec tune` does with a knob.
enum class TunerDecision {
  /// A value of the grid (SearchSpace): every candidate sets it.
  Grid,
  /// Tried as a one-knob refinement of a chosen configuration (Tuner.cpp
  /// kKnobChoices).
  Refined,
  /// Changed on every fused kernel of a configuration at once, as another
  /// handshake group of the selection (Tuner.cpp kClassChoices).
  SelectionWide,
  /// A tuning choice the tuner leaves at the template's value; the reason
  /// says why.
  NotSearched,
  /// Not a tuning choice: set by the problem, the selection or the model's
  /// weights (or pinned by the dialect); the template's value is kept.
  Fixed,
};

/// What the cost model makes of a knob.
enum class CostDecision {
  /// Its purpose reaches the predicted time; the reason says through what
  /// (the stage shape, the counted tile, the kernel's occupancy).
  Modeled,
  /// The model cannot rank it: its purpose (caches, latency, scheduling,
  /// the persistent grid, a launch's geometry) is outside the model, so the
  /// prediction is unchanged or moves only by the knob's own overhead
  /// (a few instructions or registers). Only device timing can choose.
  Tie,
  /// Not a choice the model is asked to rank (fixed by the problem, the
  /// selection or the dialect); the reason says why.
  NotApplicable,
};

/// What the AITER CSV importer does with a knob.
enum class AiterDecision {
  /// Its value comes from AITER's data: a kernel-name part, a CSV column,
  /// or the FlyDSL kernel family itself (the reason names which).
  Mapped,
  /// Not from AITER's data: left at the ODS default, a constant moec
  /// chooses, an option of moec's, or rows that would need it are refused.
  NotMapped,
};

/// The decisions about one knob of one stage.
struct KnobDecision {
  const char *stage; ///< "w13", "w2", "sort", "quant", "combine"
  const char *knob;  ///< the ODS name, as in MoeKnobs.h
  TunerDecision tuner;
  const char *tunerReason;
  CostDecision cost;
  const char *costReason;
  AiterDecision aiter;
  const char *aiterReason;
};

/// Every row, grouped by stage in the generated table's order.
const KnobDecision *knobDecisionsBegin();
const KnobDecision *knobDecisionsEnd();
size_t knobDecisionCount();

/// The row of (`stage`, `knob`), or nullptr.
const KnobDecision *lookupKnobDecision(std::string_view stage,
                                       std::string_view knob);

/// What is wrong with the decision rows [`begin`, `end`) against the knob
/// table generated from ODS, one line each, naming the stage and knob:
/// "w2.split_k: no decision row" for a knob without one, "w2.foo: no such
/// knob" (or stage) for a row the table lacks, "w2.m: two rows". Empty when
/// every knob has exactly one row. The [knobs] test runs it on the real
/// rows and on planted faults.
std::vector<std::string> knobDecisionProblems(const KnobDecision *begin,
                                              const KnobDecision *end);

/// "Grid", "Refined", "SelectionWide", "NotSearched", "Fixed".
const char *tunerDecisionName(TunerDecision decision);
/// "Modeled", "Tie", "NotApplicable".
const char *costDecisionName(CostDecision decision);
/// "Mapped", "NotMapped".
const char *aiterDecisionName(AiterDecision decision);

} // namespace moec

#endif // MOEC_COMPILER_KNOBDECISIONS_H
