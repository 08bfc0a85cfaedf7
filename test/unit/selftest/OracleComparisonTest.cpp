// compareWithOracle: the self-test's verdict on a layer's output, checked
// with outputs made from the oracle's own (so the oracle, not this test,
// supplies every expected value).

#include "moec/Selftest/Cases.h"
#include "moec/Selftest/Oracle.h"
#include "SelftestTestSupport.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Routing.h"

#include <catch2/catch.hpp>

using namespace moec;
using namespace moec::selftest;

namespace {

/// A small table's weights from `seed`, and the oracle over them.
struct SmallOracle {
  harness::TableFacts facts;
  SelftestWeights weights;
  harness::HostLayerWeights host;
  OracleCase oracle;
  SmallOracle(bool fused, uint64_t seed, uint32_t ep)
      : facts(test::smallFacts(fused, 256, 128, 4)) {
    generateWeights(seed, facts, weights, host);
    oracle.facts = &facts;
    oracle.weights = &weights;
    oracle.ep = ep;
  }
};

/// The oracle's output as the kernels write it (BF16).
std::vector<uint16_t> bf16Of(const std::vector<float> &values) {
  std::vector<uint16_t> bits;
  for (float value : values)
    bits.push_back(ref::encodeBf16(value));
  return bits;
}

} // namespace

TEST_CASE("the oracle's own output passes; zero, unwritten and leaked rows fail",
          "[selftest][oracle]") {
  const SmallOracle small(/*fused=*/true, 3, 1);
  const harness::TableFacts &facts = small.facts;
  const OracleCase &oracle = small.oracle;
  CHECK(small.host.experts == 4);
  CHECK_FALSE(small.host.w13.empty());
  const uint32_t M = 8, H = facts.problem.hidden;
  const std::vector<ref::TokenBatch> batches =
      caseBatches(facts, 1, {M, "random"}, 11);

  // Anything first, to learn the oracle's output.
  std::vector<std::vector<uint16_t>> got(1, std::vector<uint16_t>(M * H, 0));
  OracleComparison zero;
  REQUIRE(compareWithOracle(oracle, batches, got, zero).ok());
  REQUIRE(zero.oracleOutputs.size() == 1);
  REQUIRE(zero.oracleOutputs[0].size() == size_t(M * H));
  CHECK_FALSE(zero.pass);
  CHECK(zero.distance.relL2 == Approx(1.0));

  got[0] = bf16Of(zero.oracleOutputs[0]);
  OracleComparison same;
  REQUIRE(compareWithOracle(oracle, batches, got, same).ok());
  CHECK(same.pass);
  CHECK(same.distance.relL2 < kLayerRelL2Bound);
  CHECK(same.zeroRowsWrong == 0);
  CHECK(same.unwritten == 0);

  SECTION("an element left as the poison is unwritten") {
    got[0][5] = 0xFFFF;
    OracleComparison poisoned;
    REQUIRE(compareWithOracle(oracle, batches, got, poisoned).ok());
    CHECK(poisoned.unwritten == 1);
    CHECK_FALSE(poisoned.pass);
  }
  SECTION("a token without a valid route must come out exactly zero") {
    // Token 3 has no valid route (caseBatches).
    for (int64_t k = 0; k < facts.problem.topK; ++k)
      REQUIRE_FALSE(ref::isValidExpert(
          batches[0].topkIds[size_t(3 * facts.problem.topK + k)],
          facts.problem.experts));
    got[0][3 * H + 1] = ref::encodeBf16(1.0);
    OracleComparison leaked;
    REQUIRE(compareWithOracle(oracle, batches, got, leaked).ok());
    CHECK(leaked.zeroRowsWrong == 1);
    CHECK_FALSE(leaked.pass);
  }
}

TEST_CASE("unfused ranks' partial outputs are summed before the comparison",
          "[selftest][oracle]") {
  const uint32_t M = 8, ep = 2;
  const SmallOracle small(/*fused=*/false, 5, ep);
  const harness::TableFacts &facts = small.facts;
  const OracleCase &oracle = small.oracle;
  const uint32_t H = facts.problem.hidden;
  const std::vector<ref::TokenBatch> batches =
      caseBatches(facts, ep, {M, "random"}, 13);
  std::vector<std::vector<uint16_t>> got(ep, std::vector<uint16_t>(M * H, 0));
  OracleComparison first;
  REQUIRE(compareWithOracle(oracle, batches, got, first).ok());
  // One oracle run for the one batch both ranks serve.
  REQUIRE(first.oracleOutputs.size() == 1);
  // The whole output on rank 0 and zeros on rank 1 sum to the oracle's.
  got[0] = bf16Of(first.oracleOutputs[0]);
  OracleComparison summed;
  REQUIRE(compareWithOracle(oracle, batches, got, summed).ok());
  CHECK(summed.pass);
  // Both ranks claiming the whole output is twice the oracle's.
  got[1] = got[0];
  OracleComparison doubled;
  REQUIRE(compareWithOracle(oracle, batches, got, doubled).ok());
  CHECK_FALSE(doubled.pass);
  CHECK(doubled.distance.relL2 == Approx(1.0).epsilon(0.01));
}
