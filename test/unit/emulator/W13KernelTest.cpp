//===- W13KernelTest.cpp - the generated W13 kernel vs the reference ------===//
//
// Gate/up GEMM, clamped SwiGLU and FP8 1x32 quantisation, executed on the
// emulator and compared with the reference W13 stage (the W13 StageHarness):
// every
// dequantised output within one FP8 ulp (at the kernel's block scale) of the
// oracle's activation before quantisation, relative L2 <= 2^-4.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "moec/Harness/StageHarness.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include "moec/reference/Formats.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace moec;
using namespace moec::emu;

namespace {


struct W13Knobs {
  int m, n, waves;
  const char *mfma, *orientation, *bCache;
  int interleave;
  int swigluLimit;
  /// tile.async_a and tile.b_prefetch.
  bool asyncA = false, bPrefetch = false;
  /// gpt_oss_swiglu: GPT-OSS's SwiGLU instead of SiLU.
  bool gptOss = false;
  /// tile.b_direct: weight fragments straight into registers.
  bool bDirect = false;
  /// `bias`: AITER's per-expert FP32 gate/up bias.
  bool bias = false;
  /// shared_fp8_expert (FHMoE, EP 1): the last expert's weights are FP8.
  bool shared = false;
};

StageSpec w13Spec(const W13Knobs &k, int64_t size) {
  StageSpec spec;
  spec.stage = moec::abi::Stage::W13;
  spec.fields = {{"hidden", std::to_string(size)},
                 {"intermediate", std::to_string(size)},
                 {"experts", "8"},
                 {"top_k", "2"},
                 {"ep", k.shared ? "1" : "2"},
                 {"m", std::to_string(k.m)},
                 {"n", std::to_string(k.n)},
                 {"k", "256"},
                 {"waves", std::to_string(k.waves)},
                 {"mfma", k.mfma},
                 {"orientation", k.orientation},
                 {"b_cache", k.bCache},
                 {"gate_up_interleave", std::to_string(k.interleave)},
                 {"swiglu_limit", std::to_string(k.swigluLimit)},
                 {"async_a", k.asyncA ? "true" : "false"},
                 {"b_prefetch", k.bPrefetch ? "true" : "false"}};
  if (k.gptOss)
    spec.fields["gpt_oss_swiglu"] = "true";
  if (k.bDirect)
    spec.fields["b_direct"] = "true";
  if (k.bias)
    spec.fields["bias"] = "true";
  if (k.shared)
    spec.fields["shared_fp8_expert"] = "true";
  return spec;
}

/// Builds the kernel (with `edit` applied to its IR) and runs its harness
/// on rank 0's generated data.
StageOutcome runW13Case(const W13Knobs &k, const DataOptions &options,
                        llvm::function_ref<void(BuiltKernel &)> edit = {},
                        LayerData *dataOut = nullptr) {
  BuiltKernel kernel;
  std::string error;
  bool built = mlir::succeeded(buildKernelIR(
      test::stageContext(), w13Spec(k, 2 * std::max(k.n, 256)), kernel, error));
  INFO(error);
  REQUIRE(built);
  if (edit)
    edit(kernel);
  std::unique_ptr<StageHarness> harness = StageHarness::create(kernel, error);
  INFO(error);
  REQUIRE(harness);
  LayerData data;
  StageOutcome outcome;
  bool ran = mlir::succeeded(
      harness->check(data, /*rank=*/0, options, LaunchConfig(), outcome, error));
  INFO(error);
  REQUIRE(ran);
  for (const Finding &f : outcome.run.findings)
    UNSCOPED_INFO(f.str());
  if (dataOut)
    *dataOut = std::move(data);
  return outcome;
}

/// Relative L2 of rank 0's dequantised intermediate (as the kernel wrote
/// it) against the oracle's activation without the bias, over the listed
/// routes: what a kernel that ignored its bias would be close to.
double relL2AgainstUnbiased(const W13Knobs &k, const LayerData &data,
                            int64_t intermediate, int64_t hidden) {
  const RankData &mine = data.ranks[0];
  ref::SortedRoutes view;
  REQUIRE(oracleRoutes(mine.sorted, k.m, /*localExperts=*/4, view));
  ref::GluConfig glu;
  glu.interleave = k.interleave;
  glu.clampLimit = k.swigluLimit;
  glu.gptOssSwiglu = k.gptOss;
  const int64_t routes = data.numRoutes();
  std::vector<double> unbiased(size_t(routes * intermediate),
                               std::numeric_limits<double>::quiet_NaN());
  ref::W13Outputs outputs;
  outputs.activation = unbiased.data();
  REQUIRE(ref::runW13Stage(data.tokens.codes.data(), data.tokens.scales.data(),
                           data.batch.tokens, data.topK,
                           mine.w13.packed.data(), mine.w13.scales.data(),
                           /*numExperts=*/4, hidden, intermediate, view, glu,
                           outputs));
  double errorSquares = 0.0, referenceSquares = 0.0;
  for (size_t e = 0; e < unbiased.size(); ++e) {
    if (std::isnan(unbiased[e]))
      continue;
    const double got = ref::decodeFp8E4M3(mine.intermediate.codes[e]) *
                       ref::decodeE8M0(mine.intermediate.scales[e / 32]);
    errorSquares += (got - unbiased[e]) * (got - unbiased[e]);
    referenceSquares += unbiased[e] * unbiased[e];
  }
  REQUIRE(referenceSquares > 0.0);
  return std::sqrt(errorSquares / referenceSquares);
}

} // namespace

TEST_CASE("W13 kernel matches the oracle for every knob set", "[w13]") {
  const std::vector<W13Knobs> knobs = {
      // Shipped (flash_ep4.table).
      {16, 64, 4, "m16n16k128", "b_major", "nt", 0, 10},
      {32, 128, 4, "m16n16k128", "b_major", "nt", 0, 10},
      {64, 128, 4, "m16n16k128", "b_major", "cached", 0, 10},
      {128, 256, 8, "m32n32k64", "b_major", "cached", 0, 10},
      // Both shapes x both orientations, interleaved gate/up, no clamp.
      {32, 128, 4, "m16n16k128", "a_major", "cached", 0, 10},
      {32, 128, 4, "m32n32k64", "a_major", "cached", 0, 0},
      {32, 128, 4, "m32n32k64", "b_major", "nt", 32, 10},
      {64, 128, 2, "m16n16k128", "a_major", "nt", 1, 10},
      // tile.async_a: the A tile by LDS DMA (one slot of whole waves at
      // m 16, two at m 32 with b_prefetch, eight at m 128 over 8 waves).
      {16, 64, 4, "m16n16k128", "b_major", "nt", 0, 10, true},
      {32, 128, 4, "m16n16k128", "b_major", "nt", 0, 10, true, true},
      {32, 128, 4, "m32n32k64", "a_major", "cached", 32, 0, true},
      {128, 256, 8, "m32n32k64", "b_major", "cached", 0, 10, true},
      // GPT-OSS's SwiGLU (AITER's ActivationType.Swiglu, limit 7), plain
      // and interleaved gate/up as AITER's _gui stage 1 reads it.
      {32, 128, 4, "m16n16k128", "b_major", "nt", 0, 7, false, false, true},
      {32, 128, 4, "m16n16k128", "b_major", "nt", 16, 7, false, false, true},
      // AITER's _gui stage-1 N of 64: 32 intermediate columns over 2 waves
      // (one 1x32 scale block per row, written by lanes of both waves'
      // columns).
      {32, 32, 2, "m16n16k128", "b_major", "nt", 16, 10},
      {16, 32, 2, "m16n16k128", "b_major", "cached", 16, 7, false, false, true},
      // tile.b_direct: weights straight into registers (both shapes and
      // orientations, interleaved, with async_a).
      {16, 64, 4, "m16n16k128", "b_major", "nt", 0, 10, false, false, false, true},
      {64, 128, 4, "m16n16k128", "a_major", "cached", 16, 10, false, false, false, true},
      {32, 128, 4, "m32n32k64", "b_major", "cached", 0, 0, true, false, false, true},
      {32, 32, 2, "m16n16k128", "b_major", "nt", 16, 10, false, false, false, true},
  };
  for (const W13Knobs &k : knobs) {
    DataOptions options;
    options.seed = 9;
    options.tokens = 24;
    options.invalidFraction = 0.1;
    StageOutcome outcome = runW13Case(k, options);
    INFO("m=" << k.m << " n=" << k.n << " waves=" << k.waves << " " << k.mfma
              << " " << k.orientation << " interleave=" << k.interleave
              << " limit=" << k.swigluLimit << (k.asyncA ? " async_a" : "")
              << (k.bPrefetch ? " b_prefetch" : "")
              << (k.gptOss ? " gpt_oss_swiglu" : "")
              << (k.bDirect ? " b_direct" : "") << ": "
              << outcome.summary);
    CHECK(outcome.pass);
    CHECK(outcome.elementsChecked > 0);
    CHECK(outcome.run.totalFindings() == 0);
    CHECK((outcome.run.stats.ldsDmaOps > 0) == k.asyncA);
  }
}

TEST_CASE("W13 edge cases: invalid routes, empty tiles, zero weights", "[w13]") {
  DataOptions options;
  options.seed = 21;
  options.tokens = 20;
  options.invalidFraction = 0.3;
  options.emptyTiles = 2;
  options.zeroExperts = {2};
  StageOutcome outcome =
      runW13Case({32, 128, 4, "m16n16k128", "b_major", "nt", 0, 10}, options);
  INFO(outcome.summary);
  CHECK(outcome.pass);
  CHECK(outcome.zeroExpertNonZero == 0);
  CHECK(outcome.run.stats.rawStoresDropped > 0);
}

TEST_CASE("the harness catches a broken W13 kernel", "[w13][detector]") {
  // The barrier between staging the activation in LDS and quantising it
  // (the last one in the kernel) is removed: lanes then read values other
  // waves have not written or are writing in the same barrier interval.
  DataOptions options;
  options.seed = 4;
  options.tokens = 24;
  StageOutcome outcome = runW13Case(
      {32, 128, 4, "m16n16k128", "b_major", "nt", 0, 10}, options,
      [](BuiltKernel &kernel) {
        mlir::gpu::BarrierOp last;
        kernel.func->walk(
            [&](mlir::gpu::BarrierOp barrier) { last = barrier; });
        REQUIRE(last);
        last->erase();
      });
  CHECK_FALSE(outcome.pass);
  CHECK(outcome.run.findingCounts[int(FindingKind::LdsRace)] +
            outcome.run.findingCounts[int(FindingKind::UninitializedRead)] >
        0);
}

TEST_CASE("W13 with a per-expert bias matches the oracle, which without the "
          "bias disagrees",
          "[w13][bias]") {
  // AITER's FlyDSL bias1: FP32 [E, 2I] in logical gate/up order added to
  // the accumulators before the clamp, whatever the weights' interleave.
  W13Knobs base{32, 128, 4, "m16n16k128", "b_major", "nt", 0, 10};
  base.bias = true;
  std::vector<W13Knobs> knobs;
  for (int interleave : {0, 16})
    for (bool gptOss : {false, true}) {
      W13Knobs k = base;
      k.interleave = interleave;
      k.gptOss = gptOss;
      k.swigluLimit = gptOss ? 7 : 10;
      knobs.push_back(k);
    }
  // The other orientation and MFMA shape (one bias value per lane, or 16
  // per accumulator), and b_direct.
  W13Knobs aMajor = base;
  aMajor.orientation = "a_major";
  aMajor.interleave = 16;
  knobs.push_back(aMajor);
  W13Knobs mfma32{128, 256, 8, "m32n32k64", "b_major", "cached", 0, 10};
  mfma32.bias = true;
  knobs.push_back(mfma32);
  W13Knobs direct = base;
  direct.bDirect = true;
  knobs.push_back(direct);
  for (const W13Knobs &k : knobs) {
    DataOptions options;
    options.seed = 9;
    options.tokens = 24;
    options.invalidFraction = 0.1;
    LayerData data;
    StageOutcome outcome = runW13Case(k, options, {}, &data);
    const int64_t size = 2 * std::max(k.n, 256);
    const double unbiased = relL2AgainstUnbiased(k, data, size, size);
    INFO(k.m << "x" << k.n << " " << k.mfma << " " << k.orientation
              << " interleave=" << k.interleave << " limit=" << k.swigluLimit
              << (k.gptOss ? " gpt_oss_swiglu" : "")
              << (k.bDirect ? " b_direct" : "") << ": " << outcome.summary
              << "; rel L2 vs the oracle without bias " << unbiased);
    CHECK(outcome.pass);
    CHECK(outcome.elementsChecked > 0);
    CHECK(outcome.run.totalFindings() == 0);
    // Ignoring the bias would be caught: far outside the bound.
    CHECK(unbiased > 4 * kW13RelL2Bound);
  }
}

TEST_CASE("W13 with a bias and an FHMoE shared expert: its row is the last",
          "[w13][bias]") {
  // The shared expert (local expert 7 of 8, EP 1) reads bias row 7.
  for (bool gptOss : {false, true}) {
    W13Knobs k{32, 128, 4, "m16n16k128", "b_major", "nt", 16, gptOss ? 7 : 10};
    k.gptOss = gptOss;
    k.bias = true;
    k.shared = true;
    DataOptions options;
    options.seed = 13;
    options.tokens = 24;
    LayerData data;
    StageOutcome outcome = runW13Case(k, options, {}, &data);
    INFO((gptOss ? "gpt_oss_swiglu: " : "silu: ") << outcome.summary);
    CHECK(outcome.pass);
    CHECK(outcome.elementsChecked > 0);
    CHECK(outcome.run.totalFindings() == 0);
    bool sharedListed = false;
    for (int32_t e : data.ranks[0].sorted.tileExperts)
      sharedListed |= e == 7;
    CHECK(sharedListed);
  }
}

TEST_CASE("W13 with tile.b_direct computes bit for bit what the LDS tile does",
          "[w13]") {
  // The same weight bytes reach the same MFMA lanes in the same order from
  // global memory instead of LDS: identical FP8 codes and scales, for the
  // 32x32 MFMA at the 128-row prefill tile the shipped tables pick and
  // for the 16x16 one with interleaved gate/up rows.
  for (W13Knobs k : {W13Knobs{128, 256, 4, "m32n32k64", "b_major", "cached", 0, 10},
                     W13Knobs{32, 128, 4, "m16n16k128", "b_major", "nt", 16, 7,
                              false, false, true}}) {
    auto run = [&](bool bDirect, LayerData &data) {
      k.bDirect = bDirect;
      BuiltKernel kernel;
      std::string error;
      REQUIRE(mlir::succeeded(buildKernelIR(
          test::stageContext(), w13Spec(k, 2 * std::max(k.n, 256)), kernel,
          error)));
      std::unique_ptr<StageHarness> harness =
          StageHarness::create(kernel, error);
      REQUIRE(harness);
      DataOptions options;
      options.seed = 43;
      options.tokens = 96;
      options.invalidFraction = 0.1;
      StageOutcome outcome;
      REQUIRE(mlir::succeeded(harness->check(data, /*rank=*/0, options,
                                             LaunchConfig(), outcome, error)));
      INFO("b_direct " << bDirect << ": " << outcome.summary);
      CHECK(outcome.pass);
      CHECK(outcome.run.totalFindings() == 0);
    };
    LayerData staged, direct;
    run(false, staged);
    run(true, direct);
    const Fp8Rows &a = staged.rank(0).intermediate, &b = direct.rank(0).intermediate;
    REQUIRE(a.codes.size() == b.codes.size());
    CHECK(a.codes == b.codes);
    CHECK(a.scales == b.scales);
    CHECK(a.codesWritten == b.codesWritten);
  }
}
