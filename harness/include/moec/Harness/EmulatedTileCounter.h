//===- EmulatedTileCounter.h - the cost model's inputs, counted -*- C++ -*-===//
///
/// \file
/// `moec tune`'s tile counter (docs/cost-model.md, "Per-tile counts"): a
/// GEMM stage kernel is rebuilt with its own knobs at a problem of exactly
/// one workgroup tile at the real K (one expert, top-1, no EP, tile M
/// tokens, all valid, N one tile) and run on the emulator; its counters
/// (moec::emu::RunStats) become the model's TileCounts. The peer transport
/// and the persistent grid are left out of the count, so the work-list
/// overhead of a fused stage is not counted.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_EMULATEDTILECOUNTER_H
#define MOEC_HARNESS_EMULATEDTILECOUNTER_H

#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/StageBuilder.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace moec::harness {

/// Seed of the data every counted tile runs on (the counts of the GEMM
/// kernels do not depend on the values; fixing it keeps them reproducible).
inline constexpr uint64_t kTileCountSeed = 1;

/// The spec `spec` (a W13 or W2 kernel's problem and knobs) is counted at:
/// experts 1, top_k 1, ep 1; W13 intermediate = tile n (hidden, its K, kept),
/// W2 hidden = tile n (intermediate, its K, kept); without the peer fields
/// (transport, capacity, max_tokens, workgroups, dispatch_cus, dispatch,
/// work_shards, plan_cus, chunk_routes), the persistent grid (persist_cu,
/// persist_strided, persist_skew, residency_cap) and a shared FP8 expert.
StageSpec oneTileSpec(const StageSpec &spec);

/// Counts tiles on the emulator, each distinct one-tile spec once. Safe to
/// call from several threads: each thread builds in its own MLIRContext.
class EmulatedTileCounter {
public:
  EmulatedTileCounter();
  ~EmulatedTileCounter();

  /// The counts of one workgroup tile of `spec`'s kernel (source
  /// "emulator"): global bytes read and written as distinct 64-byte lines
  /// x 64, LDS bytes and bank conflicts, scaled MFMAs and other kernel-IR
  /// ops, all summed over the tile's waves. Fails with a one-line `error`
  /// when the kernel cannot be built or run, the run is not one workgroup,
  /// or a detector reports a finding.
  bool count(const StageSpec &spec, TileCounts &counts, std::string &error);

private:
  mlir::MLIRContext &contextOfThisThread();

  std::mutex mutex_;
  /// By the one-tile spec: the counts, or the error.
  std::map<std::string, std::pair<TileCounts, std::string>> cache_;
  std::map<std::thread::id, std::unique_ptr<mlir::MLIRContext>> contexts_;
};

} // namespace moec::harness

#endif // MOEC_HARNESS_EMULATEDTILECOUNTER_H
