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
