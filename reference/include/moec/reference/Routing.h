//===- Routing.h - the sorted route list the GEMM kernels read --*- C++ -*-===//
//
// Routes are numbered r = token * topk + k. The sorted route list groups the
// valid routes by expert and pads each expert's group to a multiple of the M
// tile, so every M tile of the grouped GEMM belongs to one expert:
//
//   for each expert e = 0, 1, ..., numExperts - 1 (increasing id):
//     append every valid route r with topkIds[r] == e, in increasing r;
//     append the sentinel numRoutes until the length is a multiple of mTile.
//   tileExperts[t] = the expert of entries [t * mTile, (t + 1) * mTile).
//
// A route is valid when 0 <= topkIds[r] < numExperts; invalid routes (-1 or
// out of range) appear nowhere. Experts without routes get no tile. The W13
// kernel gathers A row (r / topk) for entry r, the W2 kernel A row r, and
// both scatter their output to row r; sentinel entries are skipped.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_ROUTING_H
#define MOEC_REFERENCE_ROUTING_H

#include "moec/reference/Status.h"

#include <cstdint>
#include <vector>

namespace moec::ref {

/// The sorted, tile-padded route list and its per-tile expert ids.
struct SortedRoutes {
  /// Number of routes (tokens * topk); also the padding sentinel value.
  int64_t numRoutes = 0;
  /// M tile: routeIds.size() == tileExperts.size() * mTile.
  int64_t mTile = 1;
  /// Route ids grouped by expert, each group padded with numRoutes.
  std::vector<int32_t> routeIds;
  /// One expert id per M tile.
  std::vector<int32_t> tileExperts;

  int64_t numTiles() const { return static_cast<int64_t>(tileExperts.size()); }
  /// True for a padding entry (any id >= numRoutes; the builder uses
  /// exactly numRoutes).
  bool isPadding(int32_t routeId) const { return routeId >= numRoutes; }
};

/// True when `expertId` names one of `numExperts` experts.
inline bool isValidExpert(int32_t expertId, int64_t numExperts) {
  return expertId >= 0 && expertId < numExperts;
}

/// Builds the sorted route list defined above from topkIds [numTokens, topk].
/// Fails (naming the field) for non-positive topk, mTile or numExperts, or
/// when numTokens * topk does not fit in int32.
Status buildSortedRoutes(const int32_t *topkIds, int64_t numTokens,
                         int64_t topk, int64_t numExperts, int64_t mTile,
                         SortedRoutes &sorted);

/// Checks a route list received from outside (sizes, expert ids in
/// [0, numExperts), route ids non-negative and below numRoutes unless
/// padding, no route listed twice).
Status validateSortedRoutes(const SortedRoutes &sorted, int64_t numExperts);

} // namespace moec::ref

#endif // MOEC_REFERENCE_ROUTING_H
