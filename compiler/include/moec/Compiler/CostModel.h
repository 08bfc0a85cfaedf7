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

#include "moec/manifest.h"
#include "moec/target/occupancy.h"

#include <cstdint>
#include <string>

namespace moec {

/// Name and version recorded with every row the model ranks.
inline constexpr const char *kCostModelName = "moec-cost-2";

/// The model's own assumptions (docs/cost-model.md gives each one's
/// source); the chip's facts (CUs, SIMDs, clock, HBM and LDS bandwidth,
/// scaled-MFMA cycles) come from its target::TargetInfo.
struct CostModelParameters {
  /// Non-MFMA instructions issued per cycle per SIMD.
  double otherIssuePerSimdCycle = 1;
  double launchOverheadUs = 3.0;       ///< per kernel launch (assumption)
};

/// The occupancy model's view of a compiled kernel.
inline target::KernelResourceUse resourceUse(const rt::KernelResources &r,
                                             uint32_t workgroupSize) {
  return target::KernelResourceUse{r.vgpr, r.agpr, r.sgpr, r.ldsBytes,
                                   workgroupSize};
}

/// One GEMM stage (W13 or W2) kernel as the model sees it.
struct GemmStageShape {
  std::string stage;       ///< "w13" or "w2"
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
TileGrid tileGrid(const GemmStageShape &shape, int64_t m);

/// The model's prediction for one stage at key m (source tokens per rank),
/// from the tile's `counted` figures, or countTile(shape) when null.
struct StagePrediction {
  TileGrid grid;
  double hbmUs = 0, ldsUs = 0, mfmaUs = 0, issueUs = 0, launchUs = 0;
  double totalUs = 0;
  uint32_t workgroupsPerCu = 0;
};
StagePrediction predictStage(const GemmStageShape &shape,
                             const rt::KernelResources &resources,
                             uint32_t workgroupSize, int64_t m,
                             const CostModelParameters &parameters = {},
                             const target::TargetInfo &chip =
                                 target::defaultTarget(),
                             const TileCounts *counted = nullptr);

} // namespace moec

#endif // MOEC_COMPILER_COSTMODEL_H
