//===- W13KwTest.cpp - W13 with tile.k_waves (slice-K) vs the oracle -------===//
//
// tile.k_waves = W (AITER's `_kw{W}`): the W13 workgroup is W groups of
// tile.waves waves, group g reducing the hidden range [g H/W, (g+1) H/W)
// with its own LDS tiles; the groups' FP32 accumulators are added in LDS in
// increasing group order before the epilogue. Each case runs on the
// emulator through the W13 StageHarness (outputs poisoned before the run,
// seeded random tokens, weights and routes) and is held to the same
// tolerance as W13KernelTest.cpp: every dequantised output within one FP8
// (MXFP4: one E2M1; A16W4's BF16 intermediate: one BF16) step at the
// kernel's block scale plus the oracle's FP32-accumulation bound of the
// activation, relative L2 against the activation before quantisation <=
// 2^-4 (MXFP4 intermediate: 2^-1). A formats: FP8, MXFP4 and BF16. The
// summation order differs from k_waves = 1, so bit identity with it is not
// asserted; the same case with k_waves = 1 must run the same MFMAs on
// 1/W of the waves.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "moec/Harness/StageHarness.h"

#include <catch2/catch.hpp>

#include <string>

using namespace moec;
using namespace moec::emu;

namespace {

struct KwCase {
  const char *name;
  int m, n, waves, kWaves;
  const char *mfma, *orientation;
  /// gate_up_interleave (AITER's _gui: 16).
  int interleave;
  /// problem.activation / output f4E2M1FN (A4W4) instead of FP8.
  bool fp4;
  bool asyncA = false, bPrefetch = false, bDirect = false;
  /// shared_fp8_expert (FHMoE, EP 1): the last expert's weights are FP8.
  bool shared = false;
  /// problem.activation / output bf16 (A16W4).
  bool bf16 = false;
};

constexpr int64_t kHidden = 1024, kInter = 256;

StageSpec kwSpec(const KwCase &c, int kWaves) {
  StageSpec spec;
  spec.stage = moec::abi::Stage::W13;
  spec.fields = {{"hidden", std::to_string(kHidden)},
                 {"intermediate", std::to_string(kInter)},
                 {"experts", "8"},
                 {"top_k", "2"},
                 {"ep", c.shared ? "1" : "2"},
                 {"m", std::to_string(c.m)},
                 {"n", std::to_string(c.n)},
                 {"k", "256"},
                 {"waves", std::to_string(c.waves)},
                 {"k_waves", std::to_string(kWaves)},
                 {"mfma", c.mfma},
                 {"orientation", c.orientation},
                 {"b_cache", "nt"},
                 {"gate_up_interleave", std::to_string(c.interleave)},
                 {"swiglu_limit", "7"}};
  if (c.fp4 || c.bf16) {
    spec.fields["activation"] = c.bf16 ? "bf16" : "f4E2M1FN";
    spec.fields["output"] = c.bf16 ? "bf16" : "f4E2M1FN";
  }
  if (c.asyncA)
    spec.fields["async_a"] = "true";
  if (c.bPrefetch)
    spec.fields["b_prefetch"] = "true";
  if (c.bDirect)
    spec.fields["b_direct"] = "true";
  if (c.shared)
    spec.fields["shared_fp8_expert"] = "true";
  return spec;
}

StageOutcome runKw(const KwCase &c, int kWaves) {
  BuiltKernel kernel;
  std::string error;
  bool built = mlir::succeeded(
      buildKernelIR(test::stageContext(), kwSpec(c, kWaves), kernel, error));
  INFO(error);
  REQUIRE(built);
  std::unique_ptr<StageHarness> harness = StageHarness::create(kernel, error);
  INFO(error);
  REQUIRE(harness);
  DataOptions options;
  options.seed = 41;
  options.tokens = 24;
  options.invalidFraction = 0.1;
  LayerData data;
  StageOutcome outcome;
  bool ran = mlir::succeeded(
      harness->check(data, /*rank=*/0, options, LaunchConfig(), outcome, error));
  INFO(error);
  REQUIRE(ran);
  for (const Finding &f : outcome.run.findings)
    UNSCOPED_INFO(f.str());
  return outcome;
}

} // namespace

TEST_CASE("W13 with tile.k_waves matches the oracle", "[w13][k_waves]") {
  const std::vector<KwCase> cases = {
      // AITER's FP8 _kw rows: t32x64 _gui is n 32 over 2 waves.
      {"a8w4 gui kw2", 32, 32, 2, 2, "m16n16k128", "b_major", 16, false},
      {"a8w4 gui kw4", 32, 32, 2, 4, "m16n16k128", "b_major", 16, false},
      // AITER's A4W4 _kw rows: t32x32 (1 wave) and t32x64 (2 waves).
      {"a4w4 kw2", 32, 32, 1, 2, "m16n16k128", "b_major", 0, true},
      {"a4w4 kw4", 32, 64, 2, 4, "m16n16k128", "b_major", 0, true},
      // The 32x32 MFMA (16 accumulators a lane), a_major, the LDS DMA of
      // the A tile and the B prefetch, per group.
      {"a8w4 m32 a_major async_a", 32, 64, 2, 2, "m32n32k64", "a_major", 0,
       false, true, true},
      // Weights straight into registers: no B tile in LDS.
      {"a4w4 b_direct kw4", 32, 32, 1, 4, "m16n16k128", "b_major", 0, true,
       false, false, true},
      // FHMoE: the shared expert's FP8 weights, K loop per group too.
      {"fhmoe shared kw2", 32, 32, 1, 2, "m16n16k128", "b_major", 0, false,
       false, false, false, true},
      // A16W4: BF16 A tiles (twice the bytes a row) per group.
      {"a16w4 kw2", 32, 64, 2, 2, "m16n16k128", "b_major", 0, false, false,
       false, false, false, true},
      {"a16w4 kw4", 32, 32, 1, 4, "m16n16k128", "b_major", 0, false, false,
       false, false, false, true},
  };
  for (const KwCase &c : cases) {
    StageOutcome kw = runKw(c, c.kWaves);
    StageOutcome one = runKw(c, 1);
    INFO(c.name << ": k_waves " << c.kWaves << ": " << kw.summary
                << "; k_waves 1: " << one.summary);
    CHECK(kw.launched);
    CHECK(kw.pass);
    CHECK(kw.elementsChecked > 0);
    CHECK(kw.elementsOverTolerance == 0);
    CHECK(kw.nonFinite == 0);
    CHECK(kw.listedRowsUnwritten == 0);
    CHECK(kw.unlistedRowsWritten == 0);
    CHECK(kw.relL2 <= kw.relL2Bound);
    CHECK(kw.run.totalFindings() == 0);
    CHECK((kw.run.stats.ldsDmaOps > 0) == c.asyncA);
    // The reference run at k_waves 1 passes too, on the same data.
    CHECK(one.pass);
    CHECK(one.elementsChecked == kw.elementsChecked);
    // The split is real: W times the waves per workgroup, the same MFMAs.
    CHECK(kw.run.stats.workgroups == one.run.stats.workgroups);
    CHECK(kw.run.stats.waves ==
          uint64_t(c.kWaves) * one.run.stats.waves);
    CHECK(kw.run.stats.mfmas == one.run.stats.mfmas);
  }
}

TEST_CASE("W13 k_waves kernel rejects what the verifier refuses",
          "[w13][k_waves]") {
  // H = 1024 is not a multiple of k_waves 4 x tile.k 512.
  KwCase c{"bad", 32, 32, 2, 4, "m16n16k128", "b_major", 16, false};
  StageSpec spec = kwSpec(c, 4);
  spec.fields["k"] = "512";
  BuiltKernel kernel;
  std::string error;
  CHECK(mlir::failed(
      buildKernelIR(test::stageContext(), spec, kernel, error)));
  CHECK(error.find("must be a multiple of tile.k_waves (4) x tile.k (512)") !=
        std::string::npos);
}
