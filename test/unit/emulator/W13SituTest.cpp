//===- W13SituTest.cpp - W13 with SiTUv2 on the emulator vs the oracle ----===//
//
// moe.w13 with `situ_v2` (AITER's ActivationType.Situv2, Kimi K3): the
// kernel's FP32 B tanh(g / B) sigmoid(g) * LB tanh(u / LB), then FP8 1x32
// quantisation, executed on the emulator and compared by the W13 harness
// with the reference stage (ref::situV2Activation, in double): every
// dequantised element within one FP8 ulp at its block scale of the oracle's
// activation (plus the FP32-accumulation bound), relative L2 <= 2^-4
// (kW13RelL2Bound), outputs poisoned before the run. The same output is
// then measured against the SiLU oracle: a kernel that computed SiLU
// would be caught.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "moec/Harness/StageHarness.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Stages.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace moec;
using namespace moec::emu;

namespace {

struct SituCase {
  int m, n, waves;
  const char *mfma, *orientation;
  int interleave;
  /// swiglu_limit (0: no clamp, AITER's default for SiTUv2).
  int limit;
  /// situ_beta and situ_linear_beta; 0 leaves the ODS default (4, 25).
  double beta, linearBeta;
};

constexpr int64_t kSize = 512, kLocalExperts = 4;

StageSpec situSpec(const SituCase &c) {
  StageSpec spec;
  spec.stage = abi::Stage::W13;
  spec.fields = {{"hidden", std::to_string(kSize)},
                 {"intermediate", std::to_string(kSize)},
                 {"experts", "8"},
                 {"top_k", "2"},
                 {"ep", "2"},
                 {"m", std::to_string(c.m)},
                 {"n", std::to_string(c.n)},
                 {"k", "256"},
                 {"waves", std::to_string(c.waves)},
                 {"mfma", c.mfma},
                 {"orientation", c.orientation},
                 {"gate_up_interleave", std::to_string(c.interleave)},
                 {"swiglu_limit", std::to_string(c.limit)},
                 {"situ_v2", "true"}};
  if (c.beta > 0)
    spec.fields["situ_beta"] = std::to_string(c.beta);
  if (c.linearBeta > 0)
    spec.fields["situ_linear_beta"] = std::to_string(c.linearBeta);
  return spec;
}

/// Relative L2 of rank 0's dequantised intermediate against the oracle's
/// activation under `glu`, over the listed routes.
double relL2Against(const SituCase &c, const LayerData &data,
                    const ref::GluConfig &glu) {
  const RankData &mine = data.ranks[0];
  ref::SortedRoutes view;
  REQUIRE(oracleRoutes(mine.sorted, c.m, kLocalExperts, view));
  std::vector<double> expected(size_t(data.numRoutes() * kSize),
                               std::numeric_limits<double>::quiet_NaN());
  ref::W13Outputs outputs;
  outputs.activation = expected.data();
  REQUIRE(ref::runW13Stage(data.tokens.codes.data(), data.tokens.scales.data(),
                           data.batch.tokens, data.topK,
                           mine.w13.packed.data(), mine.w13.scales.data(),
                           kLocalExperts, kSize, kSize, view, glu, outputs));
  double errorSquares = 0.0, referenceSquares = 0.0;
  for (size_t e = 0; e < expected.size(); ++e) {
    if (std::isnan(expected[e]))
      continue;
    const double got = ref::decodeFp8E4M3(mine.intermediate.codes[e]) *
                       ref::decodeE8M0(mine.intermediate.scales[e / 32]);
    errorSquares += (got - expected[e]) * (got - expected[e]);
    referenceSquares += expected[e] * expected[e];
  }
  REQUIRE(referenceSquares > 0.0);
  return std::sqrt(errorSquares / referenceSquares);
}

} // namespace

TEST_CASE("W13 with SiTUv2 matches the SiTUv2 oracle, and SiLU's does not",
          "[w13][situv2]") {
  const std::vector<SituCase> cases = {
      // AITER's tuner betas (4, 25), no clamp, _gui interleave, b_major.
      {32, 128, 4, "m16n16k128", "b_major", 16, 0, 0, 0},
      // Betas 1 and 1 (AITER's fused_moe passes these to FlyDSL when the
      // caller gives none) with a clamp at 7; a_major, 32x32 MFMA.
      {32, 128, 4, "m32n32k64", "a_major", 0, 7, 1.0, 1.0},
      // AITER's _gui stage-1 N of 64: 32 columns over 2 waves; betas 2.5, 2.
      {16, 32, 2, "m16n16k128", "b_major", 16, 0, 2.5, 2.0},
  };
  for (const SituCase &c : cases) {
    BuiltKernel kernel;
    std::string error;
    const bool built = mlir::succeeded(
        buildKernelIR(test::stageContext(), situSpec(c), kernel, error));
    INFO(error);
    REQUIRE(built);
    std::unique_ptr<StageHarness> harness = StageHarness::create(kernel, error);
    INFO(error);
    REQUIRE(harness);
    REQUIRE(harness->shape().situV2);
    DataOptions options;
    options.seed = 31;
    options.tokens = 24;
    options.invalidFraction = 0.1;
    LayerData data;
    StageOutcome outcome;
    REQUIRE(mlir::succeeded(harness->check(data, /*rank=*/0, options,
                                           LaunchConfig(), outcome, error)));
    ref::GluConfig silu;
    silu.interleave = c.interleave;
    silu.clampLimit = c.limit;
    const double againstSilu = relL2Against(c, data, silu);
    ref::GluConfig situ = silu;
    situ.situV2 = true;
    situ.situBeta = c.beta > 0 ? c.beta : 4.0;
    situ.situLinearBeta = c.linearBeta > 0 ? c.linearBeta : 25.0;
    const double againstSitu = relL2Against(c, data, situ);
    INFO(c.m << "x" << c.n << " " << c.mfma << " " << c.orientation
              << " interleave=" << c.interleave << " limit=" << c.limit
              << " betas " << situ.situBeta << ", " << situ.situLinearBeta
              << ": " << outcome.summary << "; rel L2 vs SiTUv2 "
              << againstSitu << ", vs SiLU " << againstSilu);
    CHECK(outcome.pass);
    CHECK(outcome.elementsChecked > 0);
    CHECK(outcome.elementsOverTolerance == 0);
    CHECK(outcome.run.totalFindings() == 0);
    CHECK(againstSitu <= kW13RelL2Bound);
    // A kernel that computed SiLU would be caught (measured: 0.46 at betas
    // 4 and 25, 0.83 and 0.94 at the smaller ones).
    CHECK(againstSilu > 4 * kW13RelL2Bound);
  }
}
