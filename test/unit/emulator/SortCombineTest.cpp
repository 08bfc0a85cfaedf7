//===- SortCombineTest.cpp - routing sort and combine vs the reference ----===//

#include "moec/Emulator/StageHarness.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

using namespace moec;
using namespace moec::emu;

namespace {

mlir::MLIRContext &stageContext() {
  static mlir::MLIRContext *context = [] {
    auto *c = new mlir::MLIRContext();
    prepareContext(*c);
    return c;
  }();
  return *context;
}

BuiltKernel buildStage(const std::string &stage,
                       std::map<std::string, std::string> knobs) {
  StageSpec spec;
  spec.stage = stage;
  spec.fields = {{"hidden", "256"}, {"intermediate", "256"}, {"experts", "16"},
                 {"top_k", "4"},    {"ep", "4"}};
  for (auto &[k, v] : knobs)
    spec.fields[k] = v;
  BuiltKernel kernel;
  std::string error;
  bool ok = mlir::succeeded(buildKernelIR(stageContext(), spec, kernel, error));
  INFO(error);
  REQUIRE(ok);
  return kernel;
}

} // namespace

TEST_CASE("sort kernel builds the oracle's route list on every rank",
          "[sort]") {
  for (const char *m : {"16", "64"}) {
    BuiltKernel kernel = buildStage("sort", {{"m_tile", m}, {"waves", "4"}});
    for (double invalid : {0.0, 0.2, 1.0}) {
      ref::RoutingOptions routing;
      routing.invalidFraction = invalid;
      ref::TokenBatch batch = ref::generateBatch(
          31, 0, 70, ref::MoeShape{256, 256, 16, 4}, routing);
      for (int64_t rank = 0; rank < 4; ++rank) {
        SortOutcome out;
        std::string error;
        bool ran = mlir::succeeded(runSort(kernel.func, std::stoi(m), 4,
                                           batch.topkIds, 70, 4, rank * 4,
                                           LaunchConfig(), out, error));
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
    BuiltKernel kernel = buildStage(
        "combine", {{"waves", waves}, {"split_k", std::to_string(splitK)}});
    const int64_t tokens = 37, topK = 4, hidden = 256, experts = 16;
    ref::RoutingOptions routing;
    routing.invalidFraction = 0.25;
    ref::TokenBatch batch = ref::generateBatch(
        32, 0, tokens, ref::MoeShape{hidden, 256, experts, topK}, routing);
    ref::CounterRandom random(33, 1);
    CombineRows rows;
    rows.splitK = splitK;
    const size_t stored = size_t(tokens * topK * splitK * hidden);
    rows.written.assign(stored, 0);
    if (splitK > 1)
      rows.partials.assign(stored, 0.0f);
    else
      rows.bf16.assign(stored, 0);
    for (int64_t r = 0; r < tokens * topK; ++r) {
      // Only valid routes have rows; the others stay poisoned.
      if (!ref::isValidExpert(batch.topkIds[size_t(r)], experts))
        continue;
      for (size_t i = size_t(r * splitK * hidden);
           i < size_t((r + 1) * splitK * hidden); ++i) {
        if (splitK > 1)
          rows.partials[i] = static_cast<float>(random.normal(i));
        else
          rows.bf16[i] = ref::encodeBf16(random.normal(i));
        rows.written[i] = 1;
      }
    }
    const int64_t w = std::stoi(waves);
    CombineOutcome out;
    std::string error;
    bool ran = mlir::succeeded(runCombine(
        kernel.func, hidden, experts, (tokens + w - 1) / w, rows,
        batch.topkIds, batch.topkWeights, tokens, topK, LaunchConfig(), out,
        error));
    INFO(error);
    REQUIRE(ran);
    for (const Finding &f : out.run.findings)
      UNSCOPED_INFO(f.str());
    INFO("waves " << waves << " split_k " << splitK << ": " << out.summary);
    CHECK(out.pass);
    CHECK(out.elementsChecked == tokens * hidden);
  }
}
