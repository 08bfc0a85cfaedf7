//===- StageSupport.h - what the stage harnesses share ----------*- C++ -*-===//
///
/// \file
/// Internal to the emulator's stage harnesses: kernel memory bound to ABI
/// argument names, the oracle's view of a rank's weights, generators of FP8
/// rows, and the factories of the concrete harnesses.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LIB_STAGESUPPORT_H
#define MOEC_HARNESS_LIB_STAGESUPPORT_H

#include "moec/Harness/StageHarness.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moec::emu {

/// A stage run's global memory with its buffers and scalars bound to the
/// kernel's ABI argument names, so a harness states what it passes and the
/// ABI decides the order.
class KernelMemory {
public:
  /// A buffer holding `size` bytes of `bytes`; with `written` (one flag per
  /// byte), the bytes not flagged stay poisoned.
  unsigned input(const std::string &name, const void *bytes, size_t size,
                 const std::vector<uint8_t> &written = {});
  template <typename T>
  unsigned input(const std::string &name, const std::vector<T> &values,
                 const std::vector<uint8_t> &written = {}) {
    return input(name, values.data(), values.size() * sizeof(T), written);
  }
  /// Expert weights as NAME and NAME_scale (only the present experts
  /// written) and the shared expert as NAME_shared and NAME_shared_scale.
  unsigned weights(const std::string &name, const std::string &scaleName,
                   const ExpertWeights &weights);
  /// A poisoned output buffer, snapshotted after the run.
  unsigned output(const std::string &name, size_t size);
  void scalar(const std::string &name, int64_t value);
  /// The route list a GEMM stage reads: sorted_routes, tile_experts and
  /// num_sorted.
  void routes(const ref::SortedRoutes &sorted);

  /// Runs the kernel with the arguments in ABI order; fails when the ABI
  /// names an argument nothing bound.
  mlir::LogicalResult run(const BuiltKernel &kernel, const LaunchConfig &launch,
                          StageOutcome &outcome, std::string &error);
  /// Copies every output buffer into outcome.outputs.
  void snapshot(StageOutcome &outcome) const;
  /// A GEMM stage's launch: grid (gridX, one row per tile of `sorted` or
  /// shape.persistCu persistent rows, gridZ), nothing when no tile is
  /// listed; then snapshot().
  mlir::LogicalResult runTiles(const BuiltKernel &kernel,
                               const StageShape &shape,
                               const ref::SortedRoutes &sorted, int64_t gridX,
                               int64_t gridZ, const LaunchConfig &launch,
                               StageOutcome &outcome, std::string &error);

  GlobalMemory memory;

private:
  std::map<std::string, KernelArgValue> args;
  std::vector<std::string> outputs;
};

/// The first ABI argument of `description` not in `provided`, or "".
std::string missingArgument(const StageDescription &description,
                            const std::vector<std::string> &provided);

/// A rank's weights as the oracle reads them: the MXFP4 experts, with the
/// shared FP8 expert appended as the last local expert when there is one.
struct OracleWeights {
  OracleWeights(const ExpertWeights &weights, int64_t mxfp4Experts,
                int64_t rows, int64_t depth, bool shared);
  OracleWeights(const OracleWeights &) = delete;
  OracleWeights &operator=(const OracleWeights &) = delete;
  const ref::WeightSource &source() const {
    return hasShared ? static_cast<const ref::WeightSource &>(appended)
                     : routed;
  }

  ref::DenseWeights routed, sharedExpert;
  ref::AppendedExpertWeights appended;
  bool hasShared;
};

/// Expert `expert` of `source` dequantised exactly, [rows, depth].
void dequantizeExpert(const ref::WeightSource &source, int64_t expert,
                      std::vector<double> &out);

/// Per route: the expert of the tile listing it in `view`, or -1.
std::vector<int32_t> expertOfRoutes(const ref::SortedRoutes &view,
                                    int64_t numRoutes);

/// Rows [rows, depth] of N(0, 1) values times a random power of two per
/// 1x32 block, quantised per block with the activation recipe of `format`.
void generateFp8Rows(uint64_t seed, int64_t rows, int64_t depth, Fp8Rows &out,
                     ref::ActivationFormat format = ref::ActivationFormat::Fp8E4M3);

/// Generates the layer's tokens and routing when `data` has none: routes
/// over every expert, or with options.hotRank only to `rank`'s experts.
ref::Status ensureBatch(const StageShape &shape, const DataOptions &options,
                        LayerData &data, int64_t rank);
/// Gives `rank` the oracle's route list of its experts when it has none,
/// with options.emptyTiles padding-only tiles appended.
ref::Status ensureRoutes(const StageShape &shape, const DataOptions &options,
                         LayerData &data, int64_t rank);
/// Gives `rank` its W13 (or W2) weights when it has none: the experts some
/// tile of its route list selects, generated; options.zeroExperts zeroed.
ref::Status ensureWeights(const StageShape &shape, const DataOptions &options,
                          RankData &rank, bool w13);

/// Seeded N(0, 1) FP32 biases of rank `rank`'s local experts, [local
/// experts, 2I] for W13 (logical gate/up order) or [local experts, H] for
/// W2, AITER's bias1 / bias2: the row of local expert e is that of global
/// expert rank * local experts + e, so an expert's bias does not depend on
/// the rank that serves it. Never all zero.
std::vector<float> generateExpertBias(uint64_t seed, const StageShape &shape,
                                      int64_t rank, bool w13);

/// Tallies a stage's per-element comparison with the oracle into its
/// outcome.
class ElementCheck {
public:
  explicit ElementCheck(StageOutcome &outcome) : outcome(outcome) {}
  /// One element: |got - want| against `tolerance`. False, counted as
  /// non-finite, when `got` is not finite.
  bool add(double got, double want, double tolerance);
  /// The relative L2 and the verdict: no detector finding, every element
  /// finite and within tolerance, every listed row written, unlisted rows
  /// untouched, zero-weight experts exactly zero, nothing left unwritten,
  /// and the relative L2 within outcome.relL2Bound.
  void finish();

private:
  StageOutcome &outcome;
  double errorSquares = 0.0, referenceSquares = 0.0;
};

/// ", N over tolerance, N non-finite, N listed rows unwritten, N unlisted
/// rows written, N findings": the GEMM stages' summary tail.
std::string rowCounts(const StageOutcome &outcome);

/// Fails when `bytes` is not empty and all zero.
ref::Status checkNotAllZero(const std::vector<uint8_t> &bytes,
                            const char *what);

std::unique_ptr<StageHarness> makeQuantHarness(const BuiltKernel &kernel,
                                               const StageShape &shape);
std::unique_ptr<StageHarness> makeSortHarness(const BuiltKernel &kernel,
                                              const StageShape &shape);
std::unique_ptr<StageHarness> makeW13Harness(const BuiltKernel &kernel,
                                             const StageShape &shape);
std::unique_ptr<StageHarness> makeW2Harness(const BuiltKernel &kernel,
                                            const StageShape &shape);
std::unique_ptr<StageHarness> makeCombineHarness(const BuiltKernel &kernel,
                                                 const StageShape &shape);

} // namespace moec::emu

#endif // MOEC_HARNESS_LIB_STAGESUPPORT_H
