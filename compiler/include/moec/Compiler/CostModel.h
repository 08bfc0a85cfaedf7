//===- CostModel.h - predicted time of a stage kernel on MI355X -*- C++ -*-===//
///
/// \file
/// The cost model `moec tune` ranks candidates with (docs/cost-model.md):
/// a GEMM stage's time at a key is the largest of its HBM, LDS and
/// scaled-MFMA times over the resident workgroups, plus a launch overhead.
/// The model's inputs per workgroup tile (bytes, LDS traffic, bank
/// conflicts, MFMAs, other instructions) are counted by the emulator on one
/// workgroup tile of the kernel (`moec tune`'s default), or come from the
/// analytic countTile() when no count is given; the tile count comes
/// from the key's routed rows per expert under balanced routing, with each
/// expert's rows padded to the tile.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_COSTMODEL_H
#define MOEC_COMPILER_COSTMODEL_H

#include "moec/abi/stage.h"
#include "moec/manifest.h"
#include "moec/target/occupancy.h"

#include <cstdint>
#include <string>

namespace moec {

/// The model `moec tune` and `moec model-check` use unless `--model` names
/// another (costModelParameters()); recorded with every row it ranks.
inline constexpr const char *kCostModelName = "moec-cost-3";

/// The model's own assumptions (docs/cost-model.md gives each one's
/// source); the chip's facts (CUs, SIMDs, clock, HBM and LDS bandwidth,
/// scaled-MFMA cycles) come from its target::TargetInfo. The defaults are
/// `moec-cost-2`; costModelParameters() names the fitted sets.
struct CostModelParameters {
  /// Non-MFMA instructions issued per cycle per SIMD.
  double otherIssuePerSimdCycle = 1;
  double launchOverheadUs = 3.0;       ///< per GEMM kernel launch
  /// The time of a kernel that is not a GEMM stage (quant, sort, combine,
  /// a split dispatch), launch included.
  double otherKernelUs = 3.0;
  /// The fraction of the chip's HBM bandwidth a whole stage achieves.
  double hbmEfficiency = 1.0;
  /// Bytes per second one CU's resident tiles stream from HBM together; 0:
  /// no per-CU bound (a stage of few tiles then reaches the chip's rate).
  double cuBytesPerSecond = 0;
  /// Fixed time of each round of resident tiles on a CU (the prologue's
  /// first loads, the epilogue's stores), added outside the largest term.
  double tileRoundUs = 0;
  /// Rows per local expert as a binomial draw (random routing) rather than
  /// the balanced mean, so the expected M tiles grow smoothly with M.
  bool randomRouting = false;
  /// The LDS term is divided by this (CDNA4's LDS reads may be faster than
  /// the chip's conservative 128 bytes per CU and cycle).
  double ldsThroughputScale = 1.0;
  /// An expert-parallel layer's token exchange (predictPeerExchange): bytes
  /// per second over one peer link, both directions (0: not modelled) and
  /// a fixed time per layer (the handshakes and work lists of the fused
  /// stages). Every candidate of one selection class has the class's peer
  /// payload (the tuner does not search it), so the term is equal for all
  /// of them and does not change the tuner's choice.
  double peerBytesPerSecond = 0;
  double exchangeFixedUs = 0;
};

/// The parameters of a named model (`moec-cost-2`, `moec-cost-3`); false
/// for an unknown name.
bool costModelParameters(const std::string &name,
                         CostModelParameters &parameters);

/// The occupancy model's view of a compiled kernel.
inline target::KernelResourceUse resourceUse(const rt::KernelResources &r,
                                             uint32_t workgroupSize) {
  return target::KernelResourceUse{r.vgpr, r.agpr, r.sgpr, r.ldsBytes,
                                   workgroupSize};
}

/// One GEMM stage (W13 or W2) kernel as the model sees it.
struct GemmStageShape {
  abi::Stage stage = abi::Stage::W2; ///< W13 or W2
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  int64_t tileM = 16, tileN = 64, waves = 4;
  bool mfma32 = false;     ///< m32n32k64 rather than m16n16k128
  bool bDirect = false;    ///< tile.b_direct: weights skip LDS
};

/// What one workgroup tile of a stage does: the counts the model reads.
struct TileCounts {
  double globalBytesRead = 0, globalBytesWritten = 0;
  double ldsBytesRead = 0, ldsBytesWritten = 0, ldsBankConflicts = 0;
  double scaledMfmas = 0, otherInstructions = 0;
  /// Where the counts came from: "analytic" (countTile()) or "emulator"
  /// (one workgroup tile executed and counted, docs/cost-model.md).
  std::string source;
};

/// The analytic counts of one full tile of `shape` (tileM rows x tileN
/// output columns over the whole K): the model's inputs when the tile was
/// not counted on the emulator.
TileCounts countTile(const GemmStageShape &shape);

/// How the key's rows fall into tiles under balanced routing.
struct TileGrid {
  double rowsPerRank = 0;     ///< received routed rows per rank
  double activeExperts = 0;   ///< local experts expected to get a row
  double rowsPerExpert = 0;   ///< rows per active expert
  double mTiles = 0;          ///< sum over active experts of ceil(rows / tileM)
  double paddedRows = 0;      ///< mTiles * tileM
  double nTiles = 0;          ///< output columns / tileN
  double tiles() const { return mTiles * nTiles; }
};
/// With `randomRouting`, mTiles is the expectation of the sum over local
/// experts of ceil(rows / tileM) with binomial rows (docs/cost-model.md).
TileGrid tileGrid(const GemmStageShape &shape, int64_t m,
                  bool randomRouting = false);

/// The model's prediction for one stage at key m (source tokens per rank),
/// from the tile's `counted` figures, or countTile(shape) when null.
struct StagePrediction {
  TileGrid grid;
  double hbmUs = 0, ldsUs = 0, mfmaUs = 0, issueUs = 0, launchUs = 0;
  /// The per-CU HBM bound and the tile rounds' fixed time (0 in
  /// moec-cost-2).
  double cuMemoryUs = 0, tileRoundsUs = 0;
  double totalUs = 0;
  uint32_t workgroupsPerCu = 0;
};
StagePrediction predictStage(const GemmStageShape &shape,
                             const rt::KernelResources &resources,
                             uint32_t workgroupSize, int64_t m,
                             const CostModelParameters &parameters,
                             const target::TargetInfo &chip,
                             const TileCounts *counted = nullptr);

/// The token exchange of an expert-parallel layer at key m: every rank
/// sends its m x topK routes' FP8 rows (hidden bytes) to the experts'
/// ranks and receives their results back, `returnBytesPerHidden` bytes per
/// hidden element (2 for BF16 rows; 1 + 1/32 for FP8 rows with an E8M0
/// scale per 32 values, `#moe.peer<payload = fp8>`); each peer's 1 / ep
/// share crosses that peer's own link (MI355X's links are point to point),
/// so the time is m topK hidden (1 + returnBytesPerHidden) / ep over one
/// link's `peerBytesPerSecond`; plus the fixed time. 0 for ep 1.
double predictPeerExchange(int64_t hidden, int64_t topK, int64_t ep, int64_t m,
                           double returnBytesPerHidden,
                           const CostModelParameters &parameters);

} // namespace moec

#endif // MOEC_COMPILER_COSTMODEL_H
