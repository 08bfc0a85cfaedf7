//===- Tuner.h - candidates, resource gate, model ranking -------*- C++ -*-===//
///
/// \file
/// `moec tune` (docs/tuning.md): from a tuning spec (a table in the
/// tuning-table format whose selections each name a template
/// configuration), generate candidate tilings of every template's GEMM
/// stages, compile them, reject those the chip cannot run (spills,
/// scratch, LDS overflow, persistent grids beyond the resident-workgroup
/// budget), rank the survivors at every key with the cost model and write
/// the table with one row per key, plus a CSV of every candidate.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_TUNER_H
#define MOEC_COMPILER_TUNER_H

#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TuningTable.h"

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace moec {

/// The search space (docs/tuning.md, "Search space").
struct SearchSpace {
  std::vector<int64_t> tileM = {16, 32, 64, 128};
  std::vector<int64_t> w13N = {64, 128, 256, 512};
  std::vector<int64_t> w2N = {128, 256};
  std::vector<int64_t> waves = {2, 4, 8};
  /// tile.b_direct of both GEMM stages: weights through LDS, or straight
  /// into registers.
  std::vector<bool> bDirect = {false, true};
  /// Rounds of refinement: each tries one more knob of one GEMM stage
  /// (orientation, cache policy, waves per EU, A swizzle, async copies,
  /// weight and scale prefetch, XCD swizzle, spatial grouping, W2
  /// persistence) on every configuration the model chooses somewhere.
  unsigned refinementRounds = 2;
  /// A refinement replaces its parent at a key only when the model
  /// predicts it faster by more than this fraction, and a key keeps the
  /// previous key's configuration when that is within this fraction of
  /// its own choice: differences below it are taken as ties.
  double tieMargin = 0.03;
};

/// The keys (M values) of one selection of a spec: for a MegaMoE selection
/// with a transport, the seed's rule (docs/tuning.md, "Keys"); otherwise
/// the spec's own rows.
std::vector<int64_t> selectionKeys(const TuningTable &spec,
                                   const TableSelection &selection);

/// The model's choice at every key (docs/tuning.md, "Choosing"), by
/// candidate index; SIZE_MAX where every candidate is rejected.
/// `predictedUs[c]` holds candidate c's time at each of the `keys` keys
/// (empty: rejected); `parent[c]` is the candidate c refines, SIZE_MAX for
/// a candidate of the grid. At every key: the fastest grid candidate (ties
/// to the earlier); then, while a refinement of the choice is faster by
/// more than `margin` (a fraction), the fastest such refinement; then the
/// previous key's choice instead when it is within `margin` of that.
std::vector<size_t>
chooseCandidates(const std::vector<std::vector<double>> &predictedUs,
                 const std::vector<size_t> &parent, size_t keys, double margin);

/// Counts one workgroup tile of a GEMM stage kernel (`spec`: its problem
/// and knobs as the table gives them; `shape`: the model's view of it) into
/// `counts`. Returns false with a one-line `error` when it cannot; the tuner
/// then ranks that kernel with the analytic countTile() and says so in the
/// CSV. Called from several threads at once (TuneOptions::jobs), each call
/// on its own kernel; the result must depend on the kernel only.
using TileCounter =
    std::function<bool(const StageSpec &spec, const GemmStageShape &shape,
                       TileCounts &counts, std::string &error)>;

/// One configuration a CandidateTimer times: the bundle's table
/// (`network`, `ep`, `workspace`) selects it alone, for every M (one row,
/// m = 1, above_max = largest), planned for `maxTokens` tokens per rank.
struct TimedConfig {
  std::string network;
  uint32_t ep = 1, workspace = 0, maxTokens = 0;
  std::vector<int64_t> keys; ///< the M values to time it at
};

/// What a CandidateTimer measured.
struct DeviceTimings {
  std::string device; ///< one token: how the device names itself
  std::string method; ///< one token: how it timed (docs/tuning.md)
  std::string date;   ///< YYYY-MM-DD
  /// Per TimedConfig, per key: microseconds per forward; a negative value:
  /// not timed (the reason in `skipped`).
  std::vector<std::vector<double>> us;
  std::vector<std::string> skipped; ///< one line per config not timed
};

/// Times the configurations of the bundle at `bundlePath` on a device
/// through the runtime (docs/tuning.md, "Timing on a device"). Returns
/// false with a one-line reason when the device cannot time at all (no
/// HIP, the emulated device): the tuner then ranks with the model and
/// prints the reason.
using CandidateTimer = std::function<bool(
    const std::string &bundlePath, const std::vector<TimedConfig> &configs,
    DeviceTimings &timings, std::string &error)>;

struct TuneOptions {
  SearchSpace space;
  /// The chip or part the candidates compile for (`moec tune --target`):
  /// the resource gate, the resident-grid budget, the cost model and the
  /// CSV's occupancy use its facts, and the tuned table is checked on it.
  /// nullptr: the default chip.
  const CompileTarget *target = nullptr;
  /// The model's per-tile inputs (docs/cost-model.md): counted by this
  /// callback for every distinct GEMM kernel that passes the resource gate;
  /// empty: the analytic countTile() for all.
  TileCounter countTile;
  /// The named cost model that ranks the candidates (costModelParameters());
  /// the table's rows record it.
  std::string costModel = kCostModelName;
  unsigned jobs = 0;
  std::string cacheDirectory;
  uint64_t cacheMaxBytes = uint64_t(2) << 30;
  std::function<void(size_t, size_t, const std::string &)> progress;
  /// Tiles counted so far and in all (from the counting threads, one at a
  /// time).
  std::function<void(size_t, size_t)> countProgress;
  /// Empty: every row is model-ranked. Otherwise the model's best
  /// `timedPerKey` survivors at every key are timed and the fastest
  /// measured one is chosen (rows `measured`).
  CandidateTimer timeCandidates;
  size_t timedPerKey = 3;
};

/// Candidate figures of one selection (docs/tuning.md, "Figures").
struct TuneClassSummary {
  std::string key; ///< "flash-fused ep4 ws1024"
  size_t keys = 0, candidates = 0, rejected = 0, distinctConfigs = 0;
  size_t refinements = 0; ///< candidates that refine another
  /// Fused selections: candidates with a selection-wide knob changed.
  size_t selectionWide = 0;
  std::map<std::string, size_t> rejections; ///< reason class -> candidates
};

struct TuneResult {
  std::string table; ///< the tuning table text
  std::string csv;   ///< every candidate of every selection
  /// Every surviving candidate's predicted time at every key:
  /// "selection,m,candidate,predicted_us,chosen" (`moec tune
  /// --predictions`; scripts/table_diff.py reads it).
  std::string predictionsCsv;
  std::vector<TuneClassSummary> classes;
  size_t compiledKernels = 0, distinctConfigs = 0, rows = 0;
  /// GEMM kernels whose tile was counted by TuneOptions::countTile, and
  /// those it could not count (ranked with the analytic counts).
  size_t countedKernels = 0, countFallbacks = 0;
  /// With TuneOptions::timeCandidates: why nothing was timed (empty: it
  /// was), the timer's lines about configurations it skipped, the
  /// configurations timed, the rows written `measured`, and one CSV line
  /// per (key, timed candidate).
  std::string timingUnavailable;
  std::vector<std::string> timingNotes;
  size_t timedConfigs = 0, measuredRows = 0;
  std::string measurementsCsv;
};

/// A knob the refinement rounds of `moec tune` change: on one stage kernel
/// ("w13", "w2", "combine"), or, when `selectionWide`, on every fused
/// kernel of that stage in a configuration at once.
struct RefinedKnob {
  std::string stage, knob;
  bool selectionWide = false;
  bool operator<(const RefinedKnob &other) const {
    return std::tie(stage, knob, selectionWide) <
           std::tie(other.stage, other.knob, other.selectionWide);
  }
};
/// Every (stage, knob) the refinement rounds try (TunerSearch.cpp
/// kKnobChoices and kClassChoices), once each; the [knobs] test checks them
/// against the knob table generated from ODS and the decision rows.
std::vector<RefinedKnob> refinedKnobs();

/// Tunes `spec` (read from `specPath`, named in the output's header). On
/// failure `error` is one line naming the spec line.
CompileStatus tuneSpec(const TuningTable &spec, const std::string &specPath,
                       const TuneOptions &options, TuneResult &result,
                       std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_TUNER_H
