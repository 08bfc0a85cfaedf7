//===- PeerHarness.h - a MegaMoE layer over emulated EP ranks ---*- C++ -*-===//
///
/// \file
/// Runs the fused MegaMoE stages (moe.w13 and moe.w2 with `#moe.peer`, and
/// moe.combine with `peer_rows`) on `ep` emulated ranks at once, sharing
/// one global memory so that every rank's peer pointers reach the others'
/// buffers, and compares each rank's stage-1 intermediate and final output
/// with the reference oracle (ref::runMegaMoe, fixed-slot transport).
///
/// Per launch ("epoch") every rank gets fresh seeded tokens; stage 1 runs
/// on all ranks concurrently, then stage 2 and the combine of all ranks run
/// concurrently, so the combine's wait on the peers' signals is exercised.
/// Several epochs reuse the control buffers as an engine would, which
/// exercises the alternating count banks and the monotonic counters.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_PEERHARNESS_H
#define MOEC_HARNESS_PEERHARNESS_H

#include "moec/Harness/StageHarness.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::emu {

struct PeerLayerOptions {
  uint64_t seed = 1;
  /// Tokens per rank (size ep), each <= max_tokens; 0 is an empty rank.
  std::vector<int64_t> tokensPerRank;
  /// Probability that a route slot is invalid (-1 or an id >= experts).
  double invalidFraction = 0.0;
  /// Fraction of tokens whose second route repeats the first one's expert
  /// (a duplicate id: two rows for one expert, both summed).
  double duplicateFraction = 0.0;
  /// >= 0: every route goes to an expert of this rank (hot-rank routing).
  int64_t hotRank = -1;
  /// Launches run back to back on the same control buffers.
  int epochs = 2;
  /// Every launch gets the first launch's tokens and routes (a forward
  /// repeated): PeerLayerOutcome::repeatMismatches then counts the output
  /// bytes of a later launch that differ from the first's.
  bool repeatTokens = false;
  /// Resident workgroups per rank and kernel (0: the whole grid).
  unsigned maxResidentWorkgroups = 0;
  /// Nonzero: the launches of every phase (one per rank and kernel) go to
  /// the cooperative scheduler in a rank order drawn from this seed, anew
  /// each epoch, so every seed is another interleaving of the ranks'
  /// workgroups. 0: rank order.
  uint64_t scheduleSeed = 0;
  /// When set, the last launch's receive side is written there as .npy,
  /// per rank r: rank{r}_{recv_meta, intermediate_codes,
  /// intermediate_scales}.npy (the layer's inputs and outputs come back in
  /// PeerLayerOutcome::ranks).
  std::string saveDir;
};

struct PeerLayerOutcome {
  RunStats stats;
  /// The stats per kernel (gpu.func name), summed over ranks and epochs,
  /// in the order the kernels first ran (seconds are not split per kernel).
  KernelStatsList kernelStats;
  uint64_t findings = 0;
  /// Worst over ranks and epochs.
  double intermediateRelL2 = 0.0, outputRelL2 = 0.0;
  /// FP8 intermediate codes equal to the oracle's, out of those compared.
  int64_t codesEqual = 0, codesCompared = 0;
  /// With a quant kernel: token codes and scales it wrote that differ from
  /// the oracle's input quantisation (must be 0: bit-identical), and those
  /// it left unwritten.
  int64_t inputMismatches = 0, inputUnwritten = 0;
  /// Receive rows whose source route the oracle does not know, counts that
  /// differ from the oracle's plan, nonzero overflow words, output
  /// elements nothing wrote.
  int64_t unknownRows = 0, countMismatches = 0, overflows = 0,
          outputUnwritten = 0;
  /// Ranks whose control buffer after launch n does not hold epoch n, or
  /// stage 1 arrivals not back at 0 (the kernels count the epoch).
  int64_t epochMismatches = 0;
  /// Fixed slot: the overflow words of every rank summed after the last
  /// launch (they are sticky), and the routes past their expert's capacity
  /// in all launches, counted from the routing alone.
  int64_t overflowRoutes = 0, expectedOverflowRoutes = 0;
  /// With repeatTokens: output bytes of launches 2.. that differ from
  /// launch 1's (a repeated forward must be bit-identical).
  int64_t repeatMismatches = 0;
  bool pass = false;
  /// One line per epoch and a verdict.
  std::string summary;
  /// The last launch's inputs and outputs per rank.
  std::vector<RankLayerIo> ranks;
};

/// Relative L2 bound of the final output: each weighted row is rounded to
/// BF16 once in stage 2 and the sum once more (2^-9 each), and an FP8 code
/// of the intermediate may flip by one ulp at a rounding tie between FP32
/// and double accumulation.
constexpr double kPeerOutputRelL2Bound = 1.0 / 128.0;

/// When the kernels' fixed-slot capacity is too small for the routing, the
/// oracle plans with room for every route and the outcome reports the
/// overflow words (the layer then fails, as an engine must treat it).
///
/// Runs `epochs` launches of the layer built from `stage1`, `stage2` and
/// `combine` (gpu.funcs with their descriptions) and fills `outcome`.
/// Fails with a one-line `error` on a hard emulator error (for example a
/// deadlock) or inconsistent kernels.
/// With `dispatch` (a moe.w13 with peer.dispatch = only), `stage1` is the
/// W13 kernel behind it (peer.dispatch = none) and the two run on every
/// rank at once, so the W13 kernel's wait for the signals is exercised.
/// With `quant` (a moe.quant), every rank first quantises its BF16 tokens
/// with it and stage 1 reads the kernel's FP8 rows, which must equal the
/// oracle's input quantisation bit for bit; without it stage 1 reads the
/// oracle's.
mlir::LogicalResult runPeerLayer(const BuiltKernel &stage1,
                                 const BuiltKernel &stage2,
                                 const BuiltKernel &combine,
                                 const PeerLayerOptions &options,
                                 PeerLayerOutcome &outcome, std::string &error,
                                 const BuiltKernel *dispatch = nullptr,
                                 const BuiltKernel *quant = nullptr);

} // namespace moec::emu

#endif // MOEC_HARNESS_PEERHARNESS_H
