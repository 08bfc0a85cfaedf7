//===- Routing.cpp - the sorted route list --------------------------------===//

#include "moec/reference/Routing.h"

#include <limits>
#include <string>

namespace moec::ref {

Status buildSortedRoutes(const int32_t *topkIds, int64_t numTokens,
                         int64_t topk, int64_t numExperts, int64_t mTile,
                         SortedRoutes &sorted) {
  if (topk <= 0)
    return Status::error("sorted routes: topk must be positive, got " +
                         std::to_string(topk));
  if (mTile <= 0)
    return Status::error("sorted routes: M tile must be positive, got " +
                         std::to_string(mTile));
  if (numExperts <= 0)
    return Status::error("sorted routes: expert count must be positive, got " +
                         std::to_string(numExperts));
  if (numTokens < 0 ||
      numTokens * topk > std::numeric_limits<int32_t>::max() - mTile)
    return Status::error("sorted routes: tokens * topk = " +
                         std::to_string(numTokens * topk) +
                         " does not fit int32 route ids");
  int64_t numRoutes = numTokens * topk;
  // Counting sort by expert keeps routes in increasing r within an expert.
  std::vector<int64_t> counts(numExperts, 0);
  for (int64_t route = 0; route < numRoutes; ++route)
    if (isValidExpert(topkIds[route], numExperts))
      ++counts[topkIds[route]];
  std::vector<int64_t> offsets(numExperts, 0);
  int64_t total = 0;
  for (int64_t expert = 0; expert < numExperts; ++expert) {
    offsets[expert] = total;
    total += (counts[expert] + mTile - 1) / mTile * mTile;
  }
  SortedRoutes result;
  result.numRoutes = numRoutes;
  result.mTile = mTile;
  result.routeIds.assign(total, static_cast<int32_t>(numRoutes));
  result.tileExperts.resize(total / mTile);
  for (int64_t expert = 0; expert < numExperts; ++expert)
    for (int64_t tile = offsets[expert] / mTile,
                 end = tile + (counts[expert] + mTile - 1) / mTile;
         tile < end; ++tile)
      result.tileExperts[tile] = static_cast<int32_t>(expert);
  std::vector<int64_t> cursor = offsets;
  for (int64_t route = 0; route < numRoutes; ++route)
    if (isValidExpert(topkIds[route], numExperts))
      result.routeIds[cursor[topkIds[route]]++] = static_cast<int32_t>(route);
  sorted = std::move(result);
  return Status();
}

Status validateSortedRoutes(const SortedRoutes &sorted, int64_t numExperts) {
  if (sorted.mTile <= 0)
    return Status::error("sorted routes: M tile must be positive, got " +
                         std::to_string(sorted.mTile));
  if (static_cast<int64_t>(sorted.routeIds.size()) !=
      sorted.numTiles() * sorted.mTile)
    return Status::error("sorted routes: " +
                         std::to_string(sorted.routeIds.size()) +
                         " route ids for " + std::to_string(sorted.numTiles()) +
                         " tiles of " + std::to_string(sorted.mTile));
  for (int64_t tile = 0; tile < sorted.numTiles(); ++tile)
    if (!isValidExpert(sorted.tileExperts[tile], numExperts))
      return Status::error("sorted routes: tile " + std::to_string(tile) +
                           " has expert id " +
                           std::to_string(sorted.tileExperts[tile]) +
                           " outside [0, " + std::to_string(numExperts) + ")");
  std::vector<bool> seen(static_cast<size_t>(sorted.numRoutes), false);
  for (size_t entry = 0; entry < sorted.routeIds.size(); ++entry) {
    int32_t routeId = sorted.routeIds[entry];
    if (routeId < 0)
      return Status::error("sorted routes: entry " + std::to_string(entry) +
                           " has negative route id " + std::to_string(routeId));
    if (sorted.isPadding(routeId))
      continue;
    if (seen[routeId])
      return Status::error("sorted routes: route " + std::to_string(routeId) +
                           " is listed twice");
    seen[routeId] = true;
  }
  return Status();
}

} // namespace moec::ref
