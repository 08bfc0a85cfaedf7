// The sorted route list: a hand-written example, properties on random
// routing, and validation of lists received from outside.

#include "moec/reference/Routing.h"

#include <catch2/catch.hpp>

#include <random>

using namespace moec::ref;

TEST_CASE("sorted routes: hand-written example", "[routing]") {
  // Tokens 0..2, top-2, E = 4, M tile 2. Routes r = t * 2 + k:
  // r0 -> 1, r1 -> 0, r2 -> 1, r3 -> -1 (invalid), r4 -> 5 (invalid), r5 -> 1.
  std::vector<int32_t> ids = {1, 0, 1, -1, 5, 1};
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), 3, 2, 4, 2, sorted).ok());
  CHECK(sorted.numRoutes == 6);
  CHECK(sorted.routeIds == std::vector<int32_t>{1, 6, 0, 2, 5, 6});
  CHECK(sorted.tileExperts == std::vector<int32_t>{0, 1, 1});
  CHECK(validateSortedRoutes(sorted, 4).ok());
}

TEST_CASE("sorted routes: exact tile multiples need no padding", "[routing]") {
  std::vector<int32_t> ids = {2, 2, 2, 2, 0, 0};
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), 6, 1, 3, 2, sorted).ok());
  CHECK(sorted.routeIds == std::vector<int32_t>{4, 5, 0, 1, 2, 3});
  CHECK(sorted.tileExperts == std::vector<int32_t>{0, 2, 2});
  // No valid route at all: an empty list.
  std::vector<int32_t> none = {-1, 9};
  REQUIRE(buildSortedRoutes(none.data(), 1, 2, 3, 4, sorted).ok());
  CHECK(sorted.routeIds.empty());
  CHECK(sorted.tileExperts.empty());
}

TEST_CASE("sorted routes: properties on random routing", "[routing]") {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 200; ++trial) {
    int64_t tokens = rng() % 40, topk = 1 + rng() % 6, experts = 1 + rng() % 12;
    int64_t mTile = 1 + rng() % 8;
    std::vector<int32_t> ids(tokens * topk);
    for (int32_t &id : ids)
      id = static_cast<int32_t>(rng() % (experts + 3)) - 1; // some -1, some >= E
    SortedRoutes sorted;
    REQUIRE(buildSortedRoutes(ids.data(), tokens, topk, experts, mTile, sorted).ok());
    REQUIRE(validateSortedRoutes(sorted, experts).ok());
    // Independent expectation: per expert, routes in order, padded.
    std::vector<int32_t> expectedIds, expectedTiles;
    for (int32_t expert = 0; expert < experts; ++expert) {
      size_t start = expectedIds.size();
      for (int64_t r = 0; r < tokens * topk; ++r)
        if (ids[r] == expert)
          expectedIds.push_back(static_cast<int32_t>(r));
      while ((expectedIds.size() - start) % mTile != 0)
        expectedIds.push_back(static_cast<int32_t>(tokens * topk));
      for (size_t t = start / mTile; t < expectedIds.size() / mTile; ++t)
        expectedTiles.push_back(expert);
    }
    REQUIRE(sorted.routeIds == expectedIds);
    REQUIRE(sorted.tileExperts == expectedTiles);
  }
}

TEST_CASE("sorted routes: bad arguments and bad lists are reported", "[routing]") {
  std::vector<int32_t> ids = {0, 1};
  SortedRoutes sorted;
  CHECK_FALSE(buildSortedRoutes(ids.data(), 1, 2, 2, 0, sorted).ok());
  CHECK_FALSE(buildSortedRoutes(ids.data(), 1, 0, 2, 4, sorted).ok());
  REQUIRE(buildSortedRoutes(ids.data(), 1, 2, 2, 2, sorted).ok());
  SortedRoutes bad = sorted;
  bad.tileExperts[0] = 7;
  Status status = validateSortedRoutes(bad, 2);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("tile 0 has expert id 7") != std::string::npos);
  bad = sorted;
  bad.routeIds[0] = -3;
  CHECK_FALSE(validateSortedRoutes(bad, 2).ok());
  bad = sorted;
  bad.routeIds.push_back(0);
  CHECK_FALSE(validateSortedRoutes(bad, 2).ok());
  bad = sorted;
  bad.routeIds[1] = bad.routeIds[0];
  CHECK_FALSE(validateSortedRoutes(bad, 2).ok());
}
