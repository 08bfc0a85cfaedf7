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
#include "moec/Emulator/StageHarness.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

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
};

StageSpec w13Spec(const W13Knobs &k, int64_t size) {
  StageSpec spec;
  spec.stage = "w13";
  spec.fields = {{"hidden", std::to_string(size)},
                 {"intermediate", std::to_string(size)},
                 {"experts", "8"},
                 {"top_k", "2"},
                 {"ep", "2"},
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
  return spec;
}

/// Builds the kernel (with `edit` applied to its IR) and runs its harness
/// on rank 0's generated data.
StageOutcome runW13Case(const W13Knobs &k, const DataOptions &options,
                        llvm::function_ref<void(BuiltKernel &)> edit = {}) {
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
  return outcome;
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
