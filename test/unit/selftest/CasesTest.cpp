// The self-test's cases (selftestCases, coverageM), their tokens
// (caseBatches) and its device lists (parseDeviceList).

#include "moec/Selftest/Cases.h"
#include "moec/Selftest/Selftest.h"
#include "SelftestTestSupport.h"

#include "moec/reference/Formats.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using namespace moec;
using namespace moec::selftest;

namespace {

rt::RowRange range(uint32_t low, uint32_t high, uint32_t config) {
  rt::RowRange r;
  r.mLow = low;
  r.mHigh = high;
  r.config = config;
  return r;
}

/// The configuration the ranges give M (the last one above them).
uint32_t configOf(const std::vector<rt::RowRange> &ranges, uint32_t m) {
  for (const rt::RowRange &r : ranges)
    if (m >= r.mLow && m <= r.mHigh)
      return r.config;
  return ranges.back().config;
}

std::set<uint32_t> msOf(const std::vector<Case> &cases) {
  std::set<uint32_t> ms;
  for (const Case &c : cases)
    ms.insert(c.m);
  return ms;
}

harness::TableFacts smallFacts(bool fused) {
  return test::smallFacts(fused, 64, 32, 8);
}

} // namespace

TEST_CASE("cases straddle every boundary where the configuration changes",
          "[selftest][cases]") {
  // Rows 1..40 config 0, 41..100 config 0 (no change), 101..600 config 1.
  const std::vector<rt::RowRange> ranges = {range(1, 40, 0), range(41, 100, 0),
                                            range(101, 600, 1)};
  CaseLimits limits;
  limits.maxTokens = 1024;
  const std::vector<Case> cases = selftestCases(
      ranges, [&](uint32_t m) { return configOf(ranges, m); }, limits);
  const std::set<uint32_t> ms = msOf(cases);
  // The fixed list, and both sides of 100|101 and of the last row's end;
  // 40|41 keeps the configuration and adds nothing.
  for (uint32_t m : {1u, 31u, 32u, 33u, 100u, 101u, 255u, 256u, 257u, 600u, 601u})
    CHECK(ms.count(m) == 1);
  CHECK(ms.count(40) == 0);
  CHECK(ms.count(41) == 0);
  // Ascending M, one scenario: a single rank routes at random.
  CHECK(std::is_sorted(cases.begin(), cases.end(),
                       [](const Case &a, const Case &b) { return a.m < b.m; }));
  for (const Case &c : cases)
    CHECK(c.scenario == "random");
}

TEST_CASE("expert-parallel cases cycle through the routing scenarios",
          "[selftest][cases]") {
  const std::vector<rt::RowRange> ranges = {range(1, 1024, 0)};
  CaseLimits limits;
  limits.ep = 4;
  limits.maxTokens = 1024;
  const std::vector<Case> cases = selftestCases(
      ranges, [](uint32_t) { return 0u; }, limits);
  REQUIRE(cases.size() >= 4);
  const char *expected[] = {"random", "hot-rank", "unequal", "empty-rank"};
  for (size_t i = 0; i < cases.size(); ++i)
    CHECK(cases[i].scenario == expected[i % 4]);
}

TEST_CASE("--max-m drops larger cases but every configuration still runs",
          "[selftest][cases]") {
  const std::vector<rt::RowRange> ranges = {range(1, 64, 0), range(65, 512, 1),
                                            range(513, 1024, 2)};
  CaseLimits limits;
  limits.maxTokens = 1024;
  limits.maxM = 40;
  const std::vector<Case> cases = selftestCases(
      ranges, [&](uint32_t m) { return configOf(ranges, m); }, limits);
  std::set<uint32_t> configs, aboveMaxM;
  for (const Case &c : cases) {
    configs.insert(configOf(ranges, c.m));
    if (c.m > limits.maxM)
      aboveMaxM.insert(c.m);
  }
  CHECK(configs == std::set<uint32_t>{0, 1, 2});
  // Only the smallest M of each configuration beyond --max-m.
  CHECK(aboveMaxM == std::set<uint32_t>{65, 513});
  // The layer's workspace must reach the largest of them.
  CHECK(coverageM(ranges, limits.maxM) == 513);
  CHECK(coverageM(ranges, 1024) == 0);
}

TEST_CASE("a GPT-OSS table with a clamp gets one clamp case within the limits",
          "[selftest][cases]") {
  const std::vector<rt::RowRange> ranges = {range(1, 1024, 0)};
  CaseLimits limits;
  limits.maxTokens = 1024;
  limits.clamp = true;
  std::vector<Case> cases =
      selftestCases(ranges, [](uint32_t) { return 0u; }, limits);
  REQUIRE(!cases.empty());
  CHECK(cases.back().scenario == "clamp");
  CHECK(cases.back().m == 32);
  limits.maxM = 20;
  cases = selftestCases(ranges, [](uint32_t) { return 0u; }, limits);
  CHECK(cases.back().scenario == "clamp");
  CHECK(cases.back().m == 20);
  for (const Case &c : cases)
    CHECK(c.m <= 20);
}

TEST_CASE("a case's tokens carry the invalid routes of its scenario",
          "[selftest][cases]") {
  const harness::TableFacts fused = smallFacts(true);
  const int64_t K = fused.problem.topK, E = fused.problem.experts;
  const uint32_t M = 16;
  auto validRoutes = [&](const ref::TokenBatch &batch, int64_t t) {
    int count = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int32_t id = batch.topkIds[size_t(t * K + k)];
      count += id >= 0 && id < E;
    }
    return count;
  };

  SECTION("every seventh token from the fourth has no valid route") {
    const std::vector<ref::TokenBatch> batches =
        caseBatches(fused, 2, {M, "random"}, 7);
    REQUIRE(batches.size() == 2);
    for (const ref::TokenBatch &batch : batches) {
      REQUIRE(batch.topkIds.size() == size_t(M * K));
      REQUIRE(batch.hiddenBf16.size() == size_t(M * fused.problem.hidden));
      for (int64_t t = 3; t < M; t += 7)
        CHECK(validRoutes(batch, t) == 0);
    }
    // Fused ranks have batches of their own.
    CHECK(batches[0].hiddenBf16 != batches[1].hiddenBf16);
  }
  SECTION("the empty rank's tokens and the unequal ranks' tails route nowhere") {
    const std::vector<ref::TokenBatch> empty =
        caseBatches(fused, 2, {M, "empty-rank"}, 7);
    for (int64_t t = 0; t < M; ++t)
      CHECK(validRoutes(empty[1], t) == 0);
    const std::vector<ref::TokenBatch> unequal =
        caseBatches(fused, 2, {M, "unequal"}, 7);
    // Rank 1 of 2 keeps M - M / 2 real tokens.
    for (int64_t t = M / 2; t < M; ++t)
      CHECK(validRoutes(unequal[1], t) == 0);
  }
  SECTION("overflow routes every slot to expert 0") {
    const std::vector<ref::TokenBatch> batches =
        caseBatches(fused, 2, {M, "overflow"}, 7);
    for (const ref::TokenBatch &batch : batches)
      for (int32_t id : batch.topkIds)
        CHECK(id == 0);
  }
  SECTION("clamp scales the random case's hidden states by a power of two") {
    const ref::TokenBatch plain = caseBatches(fused, 1, {M, "random"}, 7)[0];
    const ref::TokenBatch clamp = caseBatches(fused, 1, {M, "clamp"}, 7)[0];
    REQUIRE(plain.hiddenBf16.size() == clamp.hiddenBf16.size());
    for (size_t i = 0; i < plain.hiddenBf16.size(); ++i)
      CHECK(ref::decodeBf16(clamp.hiddenBf16[i]) ==
            ref::decodeBf16(plain.hiddenBf16[i]) * float(kClampInputScale));
  }
  SECTION("unfused ranks serve one batch") {
    const std::vector<ref::TokenBatch> batches =
        caseBatches(smallFacts(false), 4, {M, "hot-rank"}, 7);
    REQUIRE(batches.size() == 4);
    for (const ref::TokenBatch &batch : batches) {
      CHECK(batch.topkIds == batches[0].topkIds);
      CHECK(batch.hiddenBf16 == batches[0].hiddenBf16);
    }
  }
}

TEST_CASE("--devices takes distinct ordinals", "[selftest][options]") {
  std::vector<int> ordinals;
  REQUIRE(parseDeviceList("2,3,0,1", ordinals));
  CHECK(ordinals == std::vector<int>{2, 3, 0, 1});
  CHECK_FALSE(parseDeviceList("0,0", ordinals));
  CHECK_FALSE(parseDeviceList("0,,1", ordinals));
  CHECK_FALSE(parseDeviceList("0,a", ordinals));
  CHECK_FALSE(parseDeviceList("", ordinals));
  int ordinal = -1;
  CHECK(parseDeviceOrdinal("65535", ordinal));
  CHECK(ordinal == 65535);
  CHECK_FALSE(parseDeviceOrdinal("65536", ordinal));
  CHECK_FALSE(parseDeviceOrdinal("-1", ordinal));
}
