//===- SortCombineTest.cpp - routing sort and combine vs the reference ----===//

#include "TestSupport.h"
#include "moec/Harness/StageHarness.h"

#include "moec/reference/Generate.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

using namespace moec;
using namespace moec::emu;

namespace {

using Stage = test::BuiltStage;

Stage buildStage(abi::Stage stage,
                 std::map<std::string, std::string> knobs) {
  StageSpec spec;
  spec.stage = stage;
  spec.fields = {{"hidden", "256"}, {"intermediate", "256"}, {"experts", "16"},
                 {"top_k", "4"},    {"ep", "4"}};
  for (auto &[k, v] : knobs)
    spec.fields[k] = v;
  return test::buildStageOrFail(spec);
}

/// A layer whose tokens are `batch` (top_k 4).
LayerData layerOf(const ref::TokenBatch &batch) {
  LayerData data;
  data.batch = batch;
  data.topK = 4;
  data.hasBatch = true;
  return data;
}

} // namespace

TEST_CASE("sort kernel builds the oracle's route list on every rank",
          "[sort]") {
  for (const char *m : {"16", "64"}) {
    Stage sort = buildStage(abi::Stage::Sort, {{"m_tile", m}, {"waves", "4"}});
    for (double invalid : {0.0, 0.2, 1.0}) {
      ref::RoutingOptions routing;
      routing.invalidFraction = invalid;
      ref::TokenBatch batch = ref::generateBatch(
          31, 0, 70, ref::MoeShape{256, 256, 16, 4}, routing);
      LayerData data = layerOf(batch);
      for (int64_t rank = 0; rank < 4; ++rank) {
        StageOutcome out;
        std::string error;
        bool ran = mlir::succeeded(sort.harness->check(
            data, rank, DataOptions(), LaunchConfig(), out, error));
        INFO(error);
        REQUIRE(ran);
        INFO("m " << m << " invalid " << invalid << " rank " << rank << ": "
                  << out.summary);
        CHECK(out.pass);
        if (invalid == 1.0)
          CHECK(out.used == 0);
      }
    }
  }
}

TEST_CASE("combine kernel matches ref::combineRoutes", "[combine]") {
  for (auto [waves, splitK] : {std::pair{"1", 1}, std::pair{"4", 1},
                               std::pair{"4", 2}, std::pair{"2", 4}}) {
    Stage combine = buildStage(
        abi::Stage::Combine, {{"waves", waves}, {"split_k", std::to_string(splitK)}});
    const int64_t tokens = 37, hidden = 256, experts = 16;
    ref::RoutingOptions routing;
    routing.invalidFraction = 0.25;
    ref::TokenBatch batch = ref::generateBatch(
        32, 0, tokens, ref::MoeShape{hidden, 256, experts, 4}, routing);
    // The harness generates rows for the valid routes; the others stay
    // poisoned.
    LayerData data = layerOf(batch);
    DataOptions options;
    options.seed = 33;
    StageOutcome out;
    std::string error;
    bool ran = mlir::succeeded(
        combine.harness->check(data, 0, options, LaunchConfig(), out, error));
    INFO(error);
    REQUIRE(ran);
    for (const Finding &f : out.run.findings)
      UNSCOPED_INFO(f.str());
    INFO("waves " << waves << " split_k " << splitK << ": " << out.summary);
    CHECK(out.pass);
    CHECK(out.elementsChecked == tokens * hidden);
  }
}

namespace {

/// An FHMoE batch of `tokens` over 16 routed experts, top-4 routed plus the
/// shared slot (id 16, weight 1): the oracle's generated routing with a
/// quarter invalid, then every routed id in {16, -1, 17..22} planted at
/// seeded random routed slots (16 is the shared expert's id: invalid in a
/// routed slot, docs/reference.md FHMoE).
ref::TokenBatch fhmoeBatch(int64_t tokens, uint64_t seed) {
  const int64_t E = 16, K = 4;
  ref::RoutingOptions routing;
  routing.invalidFraction = 0.25;
  ref::TokenBatch routed = ref::generateBatch(
      seed, 0, tokens, ref::MoeShape{256, 256, E, K}, routing);
  ref::TokenBatch batch = routed;
  batch.topkIds.assign(size_t(tokens * (K + 1)), -1);
  batch.topkWeights.assign(size_t(tokens * (K + 1)), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < K; ++k) {
      batch.topkIds[size_t(t * (K + 1) + k)] = routed.topkIds[size_t(t * K + k)];
      batch.topkWeights[size_t(t * (K + 1) + k)] =
          routed.topkWeights[size_t(t * K + k)];
    }
    batch.topkIds[size_t(t * (K + 1) + K)] = int32_t(E);
    batch.topkWeights[size_t(t * (K + 1) + K)] = 1.0f;
  }
  const ref::CounterRandom random(seed, 0x5eed);
  const std::vector<int32_t> planted = {int32_t(E), -1,         int32_t(E + 1),
                                        int32_t(E + 2), int32_t(E + 3), int32_t(E + 4),
                                        int32_t(E + 5), int32_t(E + 6)};
  for (size_t i = 0; i < 3 * planted.size(); ++i) {
    const int64_t t = int64_t(random.bits(2 * i) % uint64_t(tokens));
    const int64_t k = int64_t(random.bits(2 * i + 1) % uint64_t(K));
    batch.topkIds[size_t(t * (K + 1) + k)] = planted[i % planted.size()];
  }
  return batch;
}

Stage buildFhmoeStage(abi::Stage stage,
                      std::map<std::string, std::string> knobs) {
  StageSpec spec;
  spec.stage = stage;
  spec.fields = {{"hidden", "256"}, {"intermediate", "256"}, {"experts", "17"},
                 {"top_k", "5"},    {"ep", "1"}, {"shared_last_route", "true"}};
  for (auto &[k, v] : knobs)
    spec.fields[k] = v;
  return test::buildStageOrFail(spec);
}

} // namespace

TEST_CASE("FHMoE sort and combine: a routed id of E is not the shared "
          "expert",
          "[sort][combine][fhmoe]") {
  const int64_t tokens = 45, E = 16, K1 = 5;
  const ref::TokenBatch batch = fhmoeBatch(tokens, 52);
  int64_t routedE = 0;
  for (int64_t r = 0; r < tokens * K1; ++r)
    routedE += r % K1 != K1 - 1 && batch.topkIds[size_t(r)] == E;
  REQUIRE(routedE >= 3);

  Stage sort = buildFhmoeStage(abi::Stage::Sort, {{"m_tile", "16"}, {"waves", "4"}});
  CHECK(sort.kernel->description.symbol.find("_shlast") != std::string::npos);
  LayerData data;
  data.batch = batch;
  data.topK = K1;
  data.hasBatch = true;
  data.sharedLastRoute = true;
  StageOutcome out;
  std::string error;
  bool ran = mlir::succeeded(
      sort.harness->check(data, 0, DataOptions(), LaunchConfig(), out, error));
  INFO(error);
  REQUIRE(ran);
  INFO(out.summary);
  CHECK(out.pass);
  // Independently of the harness's oracle: the shared expert's tiles list
  // exactly one route per token, each in the token's last slot, and no
  // routed slot naming E is listed at all.
  const ref::SortedRoutes &sorted = data.rank(0).sorted;
  REQUIRE(data.rank(0).hasSorted);
  int64_t sharedRoutes = 0, routedNamingE = 0;
  for (size_t tile = 0; tile < sorted.tileExperts.size(); ++tile)
    for (int64_t i = 0; i < sorted.mTile; ++i) {
      const int32_t route = sorted.routeIds[tile * size_t(sorted.mTile) + size_t(i)];
      if (route >= tokens * K1)
        continue; // padding
      if (batch.topkIds[size_t(route)] == E && route % K1 != K1 - 1)
        ++routedNamingE;
      if (sorted.tileExperts[tile] == E) {
        ++sharedRoutes;
        CHECK(route % K1 == K1 - 1);
      }
    }
  CHECK(sharedRoutes == tokens);
  CHECK(routedNamingE == 0);

  // The combine against ref::combineRoutes of the ids with every routed id
  // >= E invalid (the oracle's rule); rows of invalid routes stay poisoned,
  // so a routed E that were read would show.
  Stage combine = buildFhmoeStage(abi::Stage::Combine, {{"waves", "4"}});
  CHECK(combine.kernel->description.symbol.find("_shlast") != std::string::npos);
  LayerData combineData;
  combineData.batch = batch;
  combineData.topK = K1;
  combineData.hasBatch = true;
  combineData.sharedLastRoute = true;
  DataOptions options;
  options.seed = 53;
  StageOutcome combined;
  ran = mlir::succeeded(combine.harness->check(combineData, 0, options,
                                               LaunchConfig(), combined, error));
  INFO(error);
  REQUIRE(ran);
  for (const Finding &f : combined.run.findings)
    UNSCOPED_INFO(f.str());
  INFO(combined.summary);
  CHECK(combined.pass);
  CHECK(combined.elementsChecked == tokens * 256);
}
