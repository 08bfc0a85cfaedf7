//===- PeerProtocol.h - control words of the fused MegaMoE stages -*- C++ -*-===//
///
/// \file
/// The fixed-slot peer transport of `#moe.peer` as data: the i32 words of a
/// rank's control buffer and the packing of a receive row's metadata. The
/// codegen, the emulator harness and an engine's buffer set-up all read
/// these, so they agree by construction. docs/families.md tells the protocol.
/// Plain C++, no MLIR dependency.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_PEERPROTOCOL_H
#define MOEC_CODEGEN_PEERPROTOCOL_H

#include <cstdint>

namespace moec::peer {

/// Word indices of a rank's control buffer (i32). The engine zeroes the
/// buffer once at allocation; the kernels never need it reset again:
/// tickets and signals only grow (compared modulo 2^32), and the two banks
/// of expert counts alternate with the epoch.
enum ControlWord : int64_t {
  /// Arrival tickets of stage 1 workgroups (role = ticket % workgroups).
  kStage1Ticket = 0,
  /// +1 from every producer workgroup of every source rank per launch.
  kDispatchDone = 1,
  /// +1 per route that found its expert's receive rows full. Sticky: the
  /// engine reads it after the layer, treats nonzero as a failed layer,
  /// and clears it.
  kOverflow = 2,
  /// Arrival tickets of stage 2 workgroups at their end.
  kStage2Ticket = 3,
  /// +1 from every destination rank's stage 2 per launch.
  kCombineReady = 4,
  /// Compact: +1 from every planner wave of every source rank per launch,
  /// once its row counts are in this rank's source-count table.
  kCountsReady = 5,
  /// Fixed slot: two banks of per-local-expert receive counts, bank =
  /// epoch & 1. Compact: the two banks are followed by the source-count
  /// table and the source cursors (see sourceCountWord and cursorWord).
  kExpertCounts = 16,
};

/// Most work-queue shards of a stage (`#moe.peer` work_shards).
constexpr int64_t kMaxWorkShards = 8;

/// Words of a control buffer for `localExperts` experts per rank and `ep`
/// ranks (both transports use the same size): the fixed words, the count
/// banks, the compact table and cursors, and the work-queue counters.
inline int64_t controlWords(int64_t localExperts, int64_t ep) {
  return kExpertCounts + 2 * localExperts + 4 * ep * localExperts +
         2 * 2 * kMaxWorkShards;
}

/// With work shards: the next item of `shard` of stage `stage` (0: stage 1,
/// 1: stage 2) in launch `epoch` (two banks of [2][kMaxWorkShards]).
inline int64_t queueWord(int64_t epoch, int64_t stage, int64_t shard,
                         int64_t localExperts, int64_t ep) {
  return kExpertCounts + 2 * localExperts + 4 * ep * localExperts +
         ((epoch & 1) * 2 + stage) * kMaxWorkShards + shard;
}

/// Compact, on a destination: the rows source rank `source` sends to local
/// expert `expert` in launch `epoch` (two banks of [ep][localExperts]).
inline int64_t sourceCountWord(int64_t epoch, int64_t source, int64_t expert,
                               int64_t localExperts, int64_t ep) {
  return kExpertCounts + 2 * localExperts +
         ((epoch & 1) * ep + source) * localExperts + expert;
}

/// Compact, on a source: the next row it writes for (destination, expert)
/// in launch `epoch` (two banks of [ep][localExperts]).
inline int64_t cursorWord(int64_t epoch, int64_t destination, int64_t expert,
                          int64_t localExperts, int64_t ep) {
  return kExpertCounts + 2 * localExperts + 2 * ep * localExperts +
         ((epoch & 1) * ep + destination) * localExperts + expert;
}

/// First count word of the bank launch `epoch` uses.
inline int64_t countBank(int64_t epoch, int64_t localExperts) {
  return kExpertCounts + (epoch & 1) * localExperts;
}

/// i32 words per receive row in `recv_meta`: the routing weight's FP32
/// bits, then the source route + 1, where the source route of route
/// `token * top_k + k` of rank r is r * max_tokens * top_k + that route
/// (0: no route, which is also what an out-of-range row reads).
constexpr int64_t kMetaWords = 2;

} // namespace moec::peer

#endif // MOEC_CODEGEN_PEERPROTOCOL_H
