//===- LayerRunner.h - a configuration's stages as one layer ----*- C++ -*-===//
///
/// \file
/// Runs the kernels of one configuration as a MoE layer on the emulator and
/// checks every stage against the oracle, printing one line per stage:
///
/// - unfused: the stages in the order the configuration lists them, each
///   through its StageHarness; a leading quant once over the layer's BF16
///   tokens (its FP8 rows are what W13 reads), the per-rank stages (sort,
///   W13, W2) for every EP rank in turn, each fed by the previous stage's
///   emulated output, then the combine over every rank's rows; the final
///   output is also compared with the all-oracle layer;
/// - fused MegaMoE (`#moe.peer` stages): every EP rank at once through
///   runPeerLayer (PeerHarness.h), a leading quant on every rank first.
///
/// `moec run` is this after selecting a configuration from a bundle.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LAYERRUNNER_H
#define MOEC_HARNESS_LAYERRUNNER_H

#include "moec/Harness/StageHarness.h"

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace moec::emu {

/// One kernel of a configuration: its name (for the report) and spec.
struct LayerKernel {
  std::string name;
  StageSpec spec;
  /// When set, loads the kernel as stored (a bundle's kernel IR:
  /// loadBundleKernel) instead of building it from `spec`; the runner
  /// builds from `spec` whenever it changes it (--small, a fused config's
  /// capacity).
  std::function<mlir::LogicalResult(mlir::MLIRContext &, BuiltKernel &,
                                    std::string &)>
      load;
};

struct LayerOptions {
  uint64_t seed = 1;
  /// Source tokens per rank.
  int64_t tokens = 0;
  /// Fraction of routing slots made invalid.
  double invalidFraction = 0.05;
  /// Shrink the problem, keeping every knob (smallConfigSpecs).
  bool small = false;
  /// The EP size asked for; a note is printed when the kernels differ.
  int64_t ep = 0;
  /// Write the layer's inputs, weights and outputs there (docs/cli.md).
  std::string saveDir;
  /// Print each kernel's counters (RunStats), summed over ranks.
  bool counters = false;
};

enum class LayerVerdict {
  Pass,
  /// A stage failed its check, or could not be checked.
  Fail,
  /// A kernel could not be built from its spec.
  BadInput,
};

/// Runs `kernels` (in configuration order) as one layer; the report goes to
/// `out`, errors about the input to `err`.
LayerVerdict runLayer(const std::vector<LayerKernel> &kernels,
                      const LayerOptions &options, std::ostream &out,
                      std::ostream &err);

/// Writes the layer's weights in checkpoint layout with global expert
/// numbering (w13_weight [E, 2I, H/2], w13_scale [E, 2I, H/32], w2_weight
/// [E, H, I/2], w2_scale [E, H, I/32]; FHMoE's shared FP8 expert as
/// shared_w13_{weight,scale} [2I, H], [2I, H/32] and shared_w2_{weight,
/// scale} [H, I], [H, I/32]) and per rank r its inputs and final output
/// (rank{r}_{tokens_bf16, a_codes, a_scales, topk_ids, topk_weights,
/// out_bf16, oracle_out}), all `.npy` into `dir` (docs/cli.md).
ref::Status saveLayer(const std::string &dir, const StageShape &shape,
                      uint64_t seed, const std::vector<RankLayerIo> &ranks);

} // namespace moec::emu

#endif // MOEC_HARNESS_LAYERRUNNER_H
