//===- StageHarness.h - sort and combine stages on the emulator -*- C++ -*-===//
///
/// \file
/// The routing sort (topk ids -> tile-padded sorted route list) and the
/// weighted combine (route rows -> token rows), each run on the emulator and
/// compared with the reference: ref::buildSortedRoutes (exact equality) and
/// ref::combineRoutes (BF16 rounding of an FP32 sum of top_k terms).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_STAGEHARNESS_H
#define MOEC_EMULATOR_STAGEHARNESS_H

#include "moec/Emulator/W2Harness.h"

namespace moec::emu {

struct SortOutcome {
  RunResult run;
  /// The kernel's list, cut to status[0] entries: ready for W13 / W2.
  ref::SortedRoutes sorted;
  /// status[0] (entries used) and status[1] (entries needed).
  int32_t used = 0, needed = 0;
  bool pass = false;
  std::string summary;
};

/// Runs the sort kernel of rank `expertOffset / localExperts` over
/// topkIds [tokens, topK] (global expert ids) with a list capacity large
/// enough for any routing (numRoutes + localExperts * (tileM - 1), rounded
/// up to tileM), then compares with ref::buildSortedRoutes of the ids
/// shifted by -expertOffset: identical entries, tile experts, and status;
/// unused tiles -1.
mlir::LogicalResult runSort(mlir::Operation *func, int64_t tileM,
                            int64_t localExperts,
                            const std::vector<int32_t> &topkIds, int64_t tokens,
                            int64_t topK, int64_t expertOffset,
                            const LaunchConfig &launch, SortOutcome &outcome,
                            std::string &error);

struct CombineOutcome {
  RunResult run;
  /// [tokens, H] BF16 bits and written flags, and the oracle (double).
  std::vector<uint16_t> outBits;
  std::vector<uint8_t> outWritten;
  std::vector<double> oracle;
  double relL2 = 0.0, worstErrorOverTolerance = 0.0;
  int64_t elementsChecked = 0, elementsOverTolerance = 0, unwritten = 0;
  bool pass = false;
  std::string summary;
};

/// The combine's input rows: BF16 [tokens * topK, H], or with split-K the
/// W2 FP32 partials [tokens * topK, splitK, H]; `written` flags each stored
/// element (rows nobody produced stay poisoned).
struct CombineRows {
  int64_t splitK = 1;
  std::vector<uint16_t> bf16;
  std::vector<float> partials;
  std::vector<uint8_t> written;
};

/// Runs the combine kernel over `rows`, topkIds and weights; compares with
/// ref::combineRoutes over the same rows (split-K partials summed in slice
/// order in double). Tolerance per element: ulp_bf16(max(|ref|, |emu|)) +
/// (topK + splitK) * 2^-24 * sum_k |w_k| sum_z |row_kz|.
/// `gridX` is the ABI's grid rule evaluated (blocks, or ceil(tokens/waves)).
mlir::LogicalResult runCombine(mlir::Operation *func, int64_t hidden,
                               int64_t experts, int64_t gridX,
                               const CombineRows &rows,
                               const std::vector<int32_t> &topkIds,
                               const std::vector<float> &topkWeights,
                               int64_t tokens, int64_t topK,
                               const LaunchConfig &launch,
                               CombineOutcome &outcome, std::string &error);

} // namespace moec::emu

#endif // MOEC_EMULATOR_STAGEHARNESS_H
