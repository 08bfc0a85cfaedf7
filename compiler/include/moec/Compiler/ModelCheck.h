//===- ModelCheck.h - the cost model against published times ----*- C++ -*-===//
///
/// \file
/// `moec model-check` (docs/cost-model.md, "Against published
/// measurements"): for every published MI355X figure
/// (tuning_tables/published/figures.csv) and every timed row of AITER's
/// tuned CSVs (`us1`, `us2`), builds the kernels the figure measured from
/// their knobs, predicts the stage or layer time with the cost model and
/// compares it with the measurement; summarises the error per stage and
/// family, the rank correlation along M and whether the model picks
/// AITER's published winner; and fits the model's constants on a training
/// part of the figures, reporting the error on a validation part the fit
/// never sees.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_MODELCHECK_H
#define MOEC_COMPILER_MODELCHECK_H

#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/Tuner.h"
#include "moec/Compiler/TuningTable.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moec {

/// One row of tuning_tables/published/figures.csv (PROVENANCE.md there
/// describes every column).
struct PublishedFigure {
  std::string id, source, family, network;
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1, tp = 1;
  int64_t capacity = 0;
  std::string path, phase, quantity;
  int64_t m = 0;
  double measuredUs = 0;
  SourceLine where;
};

/// Parses figures.csv. A missing column, a bad number or a row with the
/// wrong number of fields fails with one line "FILE:LINE: ...".
bool parsePublishedFigures(const std::string &path, const std::string &text,
                           std::vector<PublishedFigure> &figures,
                           std::string &error);

/// AITER's measured stage times of one tuned-CSV row (microseconds).
struct AiterStageTimes {
  double us1 = 0, us2 = 0, us = 0;
};
/// The `us1`, `us2` and `us` columns of an AITER tuned CSV by data line
/// (header = line 1). A CSV without those columns (tuned_fhmoe.csv) has no
/// times and gives an empty map; a bad number is "FILE:LINE: ...".
bool parseAiterStageTimes(const std::string &path, const std::string &text,
                          std::map<int, AiterStageTimes> &times,
                          std::string &error);

/// What the model needs of one kernel: GEMM stages are predicted with
/// predictStage, every other kernel costs CostModelParameters::otherKernelUs.
struct ModelKernel {
  std::string name; ///< the table kernel it was built from
  bool gemm = false;
  GemmStageShape shape;
  rt::KernelResources resources;
  uint32_t workgroupSize = 0;
  TileCounts counts;
};

/// One comparison: a stage or layer time, measured and predicted.
struct ModelCheckEntry {
  std::string figure; ///< figure id, or "FILE:LINE" of an AITER row
  std::string source; ///< figures.csv source id, or "aiter"
  std::string family; ///< megamoe, tp-fused-moe, aiter-fmoe
  std::string stage;  ///< layer, moe-block, stage1, stage2
  std::string shape;  ///< "H7168 I512 E384 k6 ep1"
  std::string network;
  std::string config; ///< the moec configuration (or AITER's kernel names)
  /// "train" or "validation" (ModelCheckOptions::isTraining).
  std::string part;
  int64_t m = 0;
  /// An expert-parallel layer (ep > 1) also pays predictPeerExchange of
  /// these.
  int64_t hidden = 0, topK = 0, ep = 1;
  /// Bytes per hidden element of each route's returned row: 2 (BF16), or
  /// 1 + 1/32 when the configuration's stage 2 sends FP8 1x32 rows
  /// (`payload=fp8`).
  double returnBytesPerHidden = 2;
  double measuredUs = 0;
  /// The measurement bounds the predicted quantity from above (TP4
  /// moe-block times include gating, the shared expert and the all-reduce).
  bool upperBound = false;
  /// Indices into ModelCheckData::kernels: what the figure launches.
  std::vector<size_t> kernels;
  /// Entries sharing a series name are one kernel, one table's winners or
  /// one selection measured at several M: their rank correlation is
  /// reported. The name's first word says which ("kernel", "winners",
  /// "selection").
  std::vector<std::string> series;
  /// AITER rows: the other kernel lists of the same shape in the same
  /// table, for the published-winner check (empty: no alternatives).
  std::vector<std::vector<size_t>> alternatives;
  /// Why the figure is not predicted (no table selects its network, a
  /// kernel failed to compile); empty when it is.
  std::string skipped;
  double predictedUs = 0; ///< filled by predictEntries
};

struct ModelCheckData {
  std::vector<ModelKernel> kernels;
  std::vector<ModelCheckEntry> entries;
  /// "emulator", "analytic" or "mixed" (some kernels fell back).
  std::string countsSource;
  size_t countFallbacks = 0;
  std::vector<std::string> notes; ///< one line each: what was skipped and why
  /// The parameters of the last predictEntries (the winner check predicts
  /// the alternatives with them).
  CostModelParameters parameters;
  /// The chip or part the kernels are compiled and predicted for
  /// (ModelCheckOptions::compile's target); set by loadModelCheck.
  const target::TargetInfo *chip = nullptr;
};

struct ModelCheckOptions {
  std::string figuresPath;
  /// moec tuning tables: a figure of network N at EP P uses the selection
  /// of network `N-fused` (MegaMoE figures measure fused kernels) or else N,
  /// with ep P and the smallest workspace class >= the figure's capacity.
  std::vector<std::string> tablePaths;
  /// AITER tuned CSVs whose rows carry us1/us2 (others add no entries).
  std::vector<std::string> aiterPaths;
  /// Per-tile counts; empty: the analytic countTile() for every kernel.
  TileCounter countTile;
  /// How the kernels compile; its `target` (required) is the chip or part
  /// the AITER rows are imported for and every kernel is predicted on.
  CompileOptions compile;
};

/// The default training part: AITER rows of DeepSeek V4 shapes with 384 or
/// fewer experts, and the EP4 MegaMoE figures. The validation part: the
/// 385-expert (shared expert fused) AITER shapes, the EP2 figures, the TP4
/// moe-block bounds and every other figure.
bool isTrainingEntry(const ModelCheckEntry &entry);

/// Reads the figures, tables and AITER CSVs, builds and compiles every
/// GEMM kernel they measure and counts its tile. `error` is one line
/// "FILE:LINE: ..." for bad input (CompileStatus::BadInput).
CompileStatus loadModelCheck(const ModelCheckOptions &options,
                             ModelCheckData &data, std::string &error);

/// The model's time of a list of kernels at key m.
double predictKernels(const std::vector<ModelKernel> &kernels,
                      const std::vector<size_t> &launched, int64_t m,
                      const CostModelParameters &parameters,
                      const target::TargetInfo &chip);
/// An entry's time: its kernels plus, for an expert-parallel layer, the
/// token exchange (predictPeerExchange).
struct ModelCheckData;
double predictEntry(const ModelCheckData &data, const ModelCheckEntry &entry,
                    const CostModelParameters &parameters);
/// Fills every predicted entry's predictedUs.
void predictEntries(ModelCheckData &data, const CostModelParameters &parameters);

/// |log(predicted / measured)| statistics of a group of entries.
struct ErrorSummary {
  std::string group; ///< "train stage1 aiter-fmoe"
  size_t count = 0;
  double medianAbsLog = 0, p90AbsLog = 0, medianRatio = 0;
};
/// The rank correlation of one series along M.
struct SeriesCorrelation {
  std::string series, part;
  size_t points = 0;
  double spearman = 0;
};
struct ModelCheckSummary {
  std::vector<ErrorSummary> errors; ///< per part, stage and family; per part
  std::vector<SeriesCorrelation> correlations; ///< series with >= 3 M values
  size_t winnerKeys = 0, winnerPicked = 0; ///< AITER keys with alternatives
  size_t upperBounds = 0, upperBoundsBelow = 0; ///< predictions under a bound
};

/// Median of `values` (the mean of the middle two for an even count); 0
/// when empty.
double median(std::vector<double> values);
/// The nearest-rank 90th percentile; 0 when empty.
double percentile90(std::vector<double> values);
/// Spearman's rank correlation (average ranks for ties); 0 below 2 points.
double spearman(const std::vector<double> &x, const std::vector<double> &y);

/// Summarises predicted entries (upper-bound entries only count under
/// upperBounds).
ModelCheckSummary summarize(const ModelCheckData &data);

/// Fits the model's constants on the training entries (a deterministic
/// coordinate descent on multiplicative grids, minimising the mean
/// |log(predicted / measured)|), starting from `start`, for both values of
/// randomRouting. otherKernelUs is not fitted: no figure times a sort,
/// quant or combine kernel apart from the rest of its layer.
CostModelParameters fitCostModel(const ModelCheckData &data,
                                 const CostModelParameters &start);

/// The report as text, one line per entry then the summary.
std::string modelCheckText(const ModelCheckData &data,
                           const ModelCheckSummary &summary,
                           const std::string &modelName);
/// One CSV line per entry (docs/cost-model.md lists the columns).
std::string modelCheckCsv(const ModelCheckData &data);
/// The summary as JSON.
std::string modelCheckJson(const ModelCheckSummary &summary,
                           const std::string &modelName);

} // namespace moec

#endif // MOEC_COMPILER_MODELCHECK_H
