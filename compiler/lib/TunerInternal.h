//===- TunerInternal.h - what the tuner's files share -----------*- C++ -*-===//
///
/// \file
/// The tuner (moec/Compiler/Tuner.h) in four files around one Search:
/// TunerSearch.cpp (the grid, refinements, choosing, tuneSpec),
/// TunerGate.cpp (building, compiling and gating candidates, counting
/// their tiles), TunerTiming.cpp (timing the best candidates on a device)
/// and TunerOutput.cpp (the table, the CSV, the summaries). Not installed:
/// only those files include it.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_LIB_TUNERINTERNAL_H
#define MOEC_COMPILER_LIB_TUNERINTERNAL_H

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Tuner.h"
#include "moec/abi/stage.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moec {
namespace tuner {

/// One knob of one GEMM stage set to a value other than its parent's: a
/// refinement (docs/tuning.md, "Refinement").
struct Refinement {
  /// W13, W2 or Combine; nothing: "fused", every fused kernel (of
  /// `onlyStage` when set, of the compact transport when `compactOnly`).
  std::optional<abi::Stage> stage;
  std::string knob, value;
  std::string alsoKnob, alsoValue; ///< a second knob it needs, or empty
  std::string tag;                 ///< name part of its kernel
  std::optional<abi::Stage> onlyStage;
  bool compactOnly = false;
  bool selectionWide() const { return !stage; }
  /// The stage's name, or "fused", as kernel names and the CSV spell it.
  std::string stageText() const {
    return stage ? abi::stageName(*stage) : "fused";
  }
  std::string text() const {
    return stageText() + ":" + knob + "=" + value +
           (alsoKnob.empty() ? "" : "+" + alsoKnob + "=" + alsoValue);
  }
};

/// One candidate tiling of a template configuration.
struct Tiling {
  int64_t m = 0, w13N = 0, w2N = 0, waves = 0;
  bool bDirect = false;      ///< tile.b_direct on both GEMM stages
  bool fromTemplate = false; ///< the template's own kernels, unchanged
  std::vector<Refinement> refinements; ///< applied after the tiles
  std::string tag() const {
    if (fromTemplate)
      return "";
    std::string text = "m" + std::to_string(m) + "_n" + std::to_string(w13N) +
                       "x" + std::to_string(w2N) + "_w" +
                       std::to_string(waves) + (bDirect ? "_bdir" : "");
    for (const Refinement &r : refinements)
      text += "_" + r.stageText() + r.tag;
    return text;
  }
  std::string refinementText() const {
    std::string text;
    for (const Refinement &r : refinements)
      text += (text.empty() ? "" : " ") + r.text();
    return text;
  }
};

/// A kernel of a candidate: its table kernel and its identity.
struct CandidateKernel {
  TableKernel kernel;
  std::string identity; ///< stage, problem and knobs: equal -> one binary
};

struct Candidate {
  Tiling tiling;
  std::string configName;
  std::vector<size_t> kernels; ///< indices into the unique kernel list
  std::string rejection;       ///< empty: survives
  std::string rejectionClass;
  std::vector<double> predictedUs; ///< per key
  /// The candidate this one refines (index in its selection), or SIZE_MAX
  /// for a candidate of the grid.
  size_t parent = SIZE_MAX;
  /// Per key, microseconds measured on a device; negative: not timed.
  std::vector<double> measuredUs;
};

/// A knob of a table kernel, or `fallback` when its line does not set it.
std::string knobOr(const TableKernel &kernel, const char *name,
                   const std::string &fallback);
int64_t knobInt(const TableKernel &kernel, const char *name, int64_t fallback);
/// A knob of a table kernel, or its ODS default when its line does not set
/// it: the default comes from the knob table generated from ODS
/// (moe::KnobInfo::defaultValue), never restated in the tuner. "" for a
/// knob without a default (a required one, or not a knob of the stage).
std::string knobOrDefault(const TableKernel &kernel, const char *name);
/// A kernel the cost model times as a GEMM stage (a dispatch-only stage 1
/// computes nothing and costs a launch).
bool isGemm(const TableKernel &kernel);
/// Stage, problem and knobs: two kernels with equal identities are one
/// binary.
std::string identityOf(const TableKernel &kernel);
/// The cost model's view of a GEMM stage kernel.
GemmStageShape shapeOf(const TuningTable &spec, const TableKernel &kernel);

/// The search of one spec: candidates per selection, their kernels
/// (deduplicated across all of them), and what is known of each kernel.
/// Candidates are added in rounds (the grid, then refinements of the
/// winners); evaluate() builds, compiles, gates and counts what is new.
class Search {
public:
  Search(const TuningTable &spec, const std::string &specPath,
         const TuneOptions &options)
      : spec(spec), specPath(specPath), options(options),
        target(options.target
                   ? *options.target
                   : CompileTarget::of(*target::lookupTargetInfoOrDefault(""))),
        candidatesOf(spec.selections.size()), keysOf(spec.selections.size()) {}

  const TuningTable &spec;
  const std::string &specPath;
  const TuneOptions &options;
  /// The chip or part every candidate compiles for (TuneOptions::target).
  const CompileTarget &target;
  std::vector<CandidateKernel> kernels;
  std::map<std::string, size_t> kernelByIdentity;
  std::vector<std::vector<Candidate>> candidatesOf;
  std::vector<std::vector<int64_t>> keysOf;
  /// Per kernel: the dialect's refusal, the compile or gate error, the
  /// resources and workgroup size, the model's per-tile counts.
  std::vector<std::string> invalid, compileError, countError;
  std::vector<rt::KernelResources> resources;
  std::vector<uint32_t> workgroupSize;
  std::vector<bool> compiled;
  std::vector<TileCounts> tileCounts;
  std::vector<bool> counted;
  /// Per kernel: its fused handshake (fusedHandshakeOf), "" unless fused.
  std::vector<std::string> handshake;
  size_t compiledKernels = 0, countedKernels = 0, countFallbacks = 0;
  CostModelParameters parameters;

  /// Adds a candidate of selection `s` unless one with the same name is
  /// there; returns its index.
  size_t addCandidate(size_t s, const Tiling &tiling, size_t parent);

  /// Builds, compiles, gates and counts the kernels added since the last
  /// call (TunerGate.cpp).
  CompileStatus evaluate(std::string &error);
  void predict();
  /// Adds the candidates `variantsOf(s, c)` makes of every configuration c
  /// the model chooses somewhere in each selection s (as refinements of c
  /// when `refines`), then evaluates and predicts the new ones; `added`
  /// says whether there were any.
  CompileStatus
  extendChosen(const std::function<std::vector<Tiling>(size_t, size_t)> &variantsOf,
               bool refines, bool &added, std::string &error);
  /// The fused stages' handshake counts of a candidate (empty for an
  /// unfused one): one selection's configurations must agree on them
  /// (checkSelections), so the choice is made within one such group.
  std::string handshakeOf(const Candidate &candidate) const;
  /// The model's choice within each handshake group of selection `s` that
  /// has a candidate at every key (one group unless the selection is
  /// fused), in order of first appearance.
  struct GroupChoice {
    std::string handshake;
    std::vector<size_t> chosen; ///< per key
    double predictedUs = 0;     ///< summed over the keys
  };
  std::vector<GroupChoice> groupChoices(size_t s, double margin) const;
  std::vector<size_t> choose(size_t s, double margin) const;
  /// The chosen configurations of a fused selection with one of the
  /// selection-wide knobs of its fused stages changed (kClassChoices).
  std::vector<Tiling> classVariantsOf(size_t s, size_t c) const;
  std::vector<Tiling> refinementsOf(size_t s, size_t c) const;

private:
  void gate(Candidate &candidate) const;
  void countTiles();
};

/// Times, on the device behind TuneOptions::timeCandidates, the model's
/// best TuneOptions::timedPerKey candidates at every key (and the model's
/// choice), then chooses the fastest measured one at every key it timed
/// (TunerTiming.cpp).
CompileStatus timeOnDevice(Search &search,
                           std::vector<std::vector<size_t>> &winnerOf,
                           DeviceTimings &timings, TuneResult &result,
                           std::string &error);

// Output (TunerOutput.cpp).
/// Microseconds with one decimal, as the table and the CSVs print them.
std::string formatUs(double us);
/// A selection's name in the CSVs and summaries: "<network> ep<N> ws<N>".
std::string selectionKey(const TableSelection &selection);
/// A table line of a problem or a kernel.
std::string problemLine(const TableProblem &p);
std::string kernelLine(const TableKernel &k);
/// One line per candidate of every selection (docs/tuning.md, "Output").
void writeCsv(const Search &search,
              const std::vector<std::vector<size_t>> &winnerOf,
              TuneResult &result);
/// The table: the winners' configurations (one per kernel list) and kernels
/// (one per identity), in name order, and one row per key.
CompileStatus writeTable(const Search &search,
                         const std::vector<std::vector<size_t>> &winnerOf,
                         const DeviceTimings &timings, TuneResult &result,
                         std::string &error);

} // namespace tuner
} // namespace moec

#endif // MOEC_COMPILER_LIB_TUNERINTERNAL_H
