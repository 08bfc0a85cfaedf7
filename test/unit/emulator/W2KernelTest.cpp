//===- W2KernelTest.cpp - the generated W2 kernel vs the reference oracle -===//
//
// The W2 kernel as the codegen emits it, rebuilt from flat fields, executed
// on the emulator with poisoned outputs over fresh seeded data, and compared
// with the reference W2 stage on the same FP8 / MXFP4 inputs.
//
// Tolerance (the W2 StageHarness, docs/emulator.md): per element
//   |emu - oracle| <= ulp_bf16(max(|oracle|, |emu|)) + (I/mfmaK + 1) 2^-24 sum|a b|
// i.e. the kernel's single BF16 rounding of its FP32 sum (at most half an
// ulp, one ulp allowed because the oracle is FP32 too) plus one FP32 rounding
// per MFMA instruction; and relative L2 <= 2^-8, the BF16 unit roundoff.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"
#include "moec/Harness/StageHarness.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/MLIRContext.h"

#include "moec/reference/Formats.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <map>

using namespace moec;
using namespace moec::emu;

namespace {


struct Knobs {
  int m, n, waves;
  const char *mfma, *orientation, *bCache;
  int splitK = 1;
  int k = 256;
  /// Intermediate size of the test problem (640 = 5 K steps of 128 gives
  /// split-K an uneven last slice).
  int inter = 512;
  /// tile.async_a (direct-to-LDS A copies) and the knobs it meets in the
  /// K loop.
  bool asyncA = false, bPrefetch = false, scalePrefetch = false;
};

std::string describe(const Knobs &k) {
  return "m=" + std::to_string(k.m) + " n=" + std::to_string(k.n) +
         " k=" + std::to_string(k.k) + " waves=" + std::to_string(k.waves) +
         " mfma=" + k.mfma + " " + k.orientation + " b_cache=" + k.bCache +
         " split_k=" + std::to_string(k.splitK) +
         (k.asyncA ? " async_a" : "") + (k.bPrefetch ? " b_prefetch" : "") +
         (k.scalePrefetch ? " scale_prefetch" : "");
}

StageSpec w2Spec(const Knobs &k, int64_t hidden, int64_t inter,
                 int64_t experts, int64_t topK, int64_t ep) {
  StageSpec spec;
  spec.stage = moec::abi::Stage::W2;
  spec.fields = {{"hidden", std::to_string(hidden)},
                 {"intermediate", std::to_string(inter)},
                 {"experts", std::to_string(experts)},
                 {"top_k", std::to_string(topK)},
                 {"ep", std::to_string(ep)},
                 {"m", std::to_string(k.m)},
                 {"n", std::to_string(k.n)},
                 {"k", std::to_string(k.k)},
                 {"waves", std::to_string(k.waves)},
                 {"mfma", k.mfma},
                 {"orientation", k.orientation},
                 {"b_cache", k.bCache},
                 {"split_k", std::to_string(k.splitK)},
                 {"async_a", k.asyncA ? "true" : "false"},
                 {"b_prefetch", k.bPrefetch ? "true" : "false"},
                 {"scale_prefetch", k.scalePrefetch ? "true" : "false"}};
  return spec;
}

using Built = test::BuiltStage;

Built build(const StageSpec &spec) {
  return test::buildStageOrFail(spec);
}

/// MFMAs the kernel must issue: every non-empty tile, every N tile, every
/// wave, K / mfmaK steps, (m / dim) x (n / waves / dim) fragments per wave;
/// with BF16 A (A16W4) four BF16 MFMAs of 8 K per lane group replace each
/// scaled MFMA.
uint64_t expectedMfmas(const StageShape &s, const ref::SortedRoutes &sorted,
                       int64_t dim) {
  uint64_t validTiles = 0;
  for (int32_t e : sorted.tileExperts)
    validTiles += ref::isValidExpert(e, s.localExperts);
  const uint64_t perScaledMfma =
      s.midFormat == ref::ActivationFormat::Bf16 ? 4 : 1;
  return validTiles * uint64_t(s.hidden / s.tileN) *
         uint64_t(s.intermediate / s.mfmaK) *
         uint64_t((s.tileM / dim) * (s.tileN / dim)) * perScaledMfma;
}

/// One W2 run on rank 0's generated data and its comparison.
struct Case {
  LayerData data;
  StageOutcome outcome;
  const RouteRows &rows() const { return data.ranks[0].rows; }
};

Case runCase(Built &built, const DataOptions &options) {
  Case c;
  std::string error;
  bool ran = mlir::succeeded(built.harness->check(
      c.data, /*rank=*/0, options, LaunchConfig(), c.outcome, error));
  INFO(error);
  REQUIRE(ran);
  for (const Finding &f : c.outcome.run.findings)
    UNSCOPED_INFO(f.str());
  const int64_t dim = built.shape().mfmaK == 64 ? 32 : 16;
  CHECK(c.outcome.run.stats.mfmas ==
        expectedMfmas(built.shape(), c.data.ranks[0].sorted, dim));
  return c;
}

/// The W2 kernel of the schedule tests: 16 x 128 b_major tiles of 4 waves,
/// H = I = 512, 8 experts, top-2, EP 2.
StageSpec scheduleSpec() {
  return w2Spec(Knobs{16, 128, 4, "m16n16k128", "b_major", "nt"}, 512, 512, 8,
                2, 2);
}

/// Seeded data for the schedule tests: `tokens` tokens, a tenth of the
/// routes invalid, `emptyTiles` M tiles without routes.
DataOptions scheduleData(uint64_t seed, int64_t tokens, int64_t emptyTiles) {
  DataOptions options;
  options.seed = seed;
  options.tokens = tokens;
  options.invalidFraction = 0.1;
  options.emptyTiles = emptyTiles;
  return options;
}

/// A run that matches the oracle, writes every listed row exactly once and
/// nothing else, and raises no finding.
void checkEveryRowOnce(const StageOutcome &outcome) {
  CHECK(outcome.pass);
  CHECK(outcome.elementsChecked > 0);
  CHECK(outcome.listedRowsUnwritten == 0);
  CHECK(outcome.unlistedRowsWritten == 0);
  CHECK(outcome.run.totalFindings() == 0);
}

/// The knob sets of tuning_tables/*.table, plus both MFMA shapes and both
/// orientations at one tile, and other wave counts.
const std::vector<Knobs> &knobMatrix() {
  static const std::vector<Knobs> knobs = {
      // Shipped (flash_ep4.table).
      {16, 128, 4, "m16n16k128", "b_major", "nt"},
      {32, 128, 4, "m16n16k128", "b_major", "nt"},
      {64, 256, 4, "m16n16k128", "b_major", "cached"},
      {128, 256, 8, "m32n32k64", "b_major", "cached"},
      // Both shapes x both orientations.
      {32, 128, 4, "m16n16k128", "a_major", "cached"},
      {32, 128, 4, "m32n32k64", "a_major", "cached"},
      {32, 128, 4, "m32n32k64", "b_major", "nt"},
      {64, 128, 2, "m32n32k64", "a_major", "nt"},
      {16, 64, 1, "m16n16k128", "a_major", "cached"},
      {64, 512, 8, "m16n16k128", "a_major", "cached"},
      // Split-K (flash_tp4.table): FP32 partials, uneven last slice.
      {16, 128, 4, "m16n16k128", "b_major", "nt", 2, 128, 640},
      {32, 128, 4, "m32n32k64", "a_major", "cached", 4, 128, 512},
      // tile.async_a: the A tile by LDS DMA. One slot of whole waves (m 16),
      // two and four slots, one wave, 8 waves, with b_prefetch and
      // scale_prefetch; with k = 128 and split-K, waves 2 and 3 have no
      // chunk (the slot's guard).
      {16, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 512, true, true},
      {32, 128, 4, "m32n32k64", "a_major", "cached", 1, 256, 512, true},
      {64, 128, 2, "m16n16k128", "a_major", "nt", 1, 256, 512, true, false,
       true},
      {16, 64, 1, "m16n16k128", "b_major", "cached", 1, 256, 512, true, true,
       true},
      {128, 256, 8, "m32n32k64", "b_major", "cached", 1, 256, 512, true},
      {16, 128, 4, "m16n16k128", "b_major", "nt", 2, 128, 640, true},
      // SC0/SC1 cache bits on the weight loads (no effect on values).
      {32, 128, 4, "m16n16k128", "b_major", "sc0"},
      {32, 128, 4, "m32n32k64", "a_major", "sc0_sc1"},
  };
  return knobs;
}

} // namespace

TEST_CASE("W2 kernel matches the oracle for every knob set", "[w2]") {
  for (const Knobs &k : knobMatrix()) {
    Built built = build(w2Spec(k, /*hidden=*/2 * std::max(k.n, 256),
                               /*inter=*/k.inter, /*experts=*/8, /*topK=*/2,
                               /*ep=*/2));
    for (uint64_t seed : {1, 2}) {
      DataOptions options;
      options.seed = seed;
      options.tokens = 40;
      options.invalidFraction = 0.1;
      const StageOutcome outcome = runCase(built, options).outcome;
      INFO(describe(k) << " seed " << seed << ": " << outcome.summary);
      CHECK(outcome.pass);
      CHECK(outcome.elementsChecked > 0);
      CHECK(outcome.relL2 < (k.splitK > 1 ? kW2SplitRelL2Bound : kW2RelL2Bound));
      CHECK(outcome.run.totalFindings() == 0);
      // The A tile went through LDS DMA exactly when async_a asks for it.
      CHECK((outcome.run.stats.ldsDmaOps > 0) == k.asyncA);
    }
  }
}

TEST_CASE("W2 with tile.async_a computes bit for bit what the register copy "
          "does",
          "[w2]") {
  // Same data, same MFMAs on the same LDS bytes: identical outputs, also
  // for padding rows (zeros from the range check) and empty tiles.
  for (Knobs k : {Knobs{16, 128, 4, "m16n16k128", "b_major", "nt"},
                  Knobs{64, 256, 4, "m16n16k128", "a_major", "cached"}}) {
    Built plain = build(w2Spec(k, 512, 512, 8, 2, 2));
    k.asyncA = true;
    Built direct = build(w2Spec(k, 512, 512, 8, 2, 2));
    DataOptions options;
    options.seed = 31;
    options.tokens = 30;
    options.invalidFraction = 0.3;
    options.emptyTiles = 2;
    const Case caseA = runCase(plain, options);
    const Case caseB = runCase(direct, options);
    const StageOutcome &a = caseA.outcome, &b = caseB.outcome;
    INFO(describe(k) << ": " << b.summary);
    CHECK(a.pass);
    CHECK(b.pass);
    CHECK(b.run.totalFindings() == 0);
    CHECK(a.run.stats.ldsDmaOps == 0);
    CHECK(b.run.stats.ldsDmaOps > 0);
    // Padding rows: the DMA reads the same bytes, out of range included.
    CHECK(b.run.stats.rawLoadsOutOfRange > 0);
    CHECK(b.run.stats.rawLoadsOutOfRange == a.run.stats.rawLoadsOutOfRange);
    REQUIRE(caseA.rows().bf16.size() == caseB.rows().bf16.size());
    CHECK(caseA.rows().bf16 == caseB.rows().bf16);
    CHECK(caseA.rows().written == caseB.rows().written);
  }
}

TEST_CASE("W2 edge cases: invalid routes, padding, empty tiles, zero weights",
          "[w2]") {
  for (const Knobs &k : {knobMatrix()[0], knobMatrix()[3], knobMatrix()[5]}) {
    Built built = build(w2Spec(k, 512, 512, 8, 2, 2));
    DataOptions options;
    options.seed = 17;
    options.tokens = 30;
    options.invalidFraction = 0.3;
    options.emptyTiles = 3; // experts -1 and 4 (past the 4 local experts)
    options.zeroExperts = {1};
    const StageOutcome outcome = runCase(built, options).outcome;
    INFO(describe(k) << ": " << outcome.summary);
    CHECK(outcome.pass);
    CHECK(outcome.zeroExpertNonZero == 0);
    CHECK(outcome.unlistedRowsWritten == 0);
    CHECK(outcome.listedRowsUnwritten == 0);
    // Sentinel-padded rows exist and their A rows read past validBytes.
    CHECK(outcome.run.stats.rawLoadsOutOfRange > 0);
    CHECK(outcome.run.stats.rawStoresDropped > 0);
  }
}

TEST_CASE("W2 hot-rank routing and a batch with only empty tiles", "[w2]") {
  Built built = build(w2Spec(knobMatrix()[1], 256, 512, 8, 2, 2));
  DataOptions hot;
  hot.seed = 5;
  hot.tokens = 64;
  hot.hotRank = true;
  hot.invalidFraction = 0.0;
  const StageOutcome outcome = runCase(built, hot).outcome;
  INFO(outcome.summary);
  CHECK(outcome.pass);
  // Every route goes to this rank: every route row is computed.
  CHECK(outcome.elementsChecked == 64 * 2 * 256);

  DataOptions none;
  none.seed = 6;
  none.tokens = 8;
  none.invalidFraction = 1.0; // every slot invalid: no listed route
  none.emptyTiles = 2;
  const StageOutcome empty = runCase(built, none).outcome;
  INFO(empty.summary);
  CHECK(empty.pass);
  CHECK(empty.elementsChecked == 0);
  CHECK(empty.run.stats.mfmas == 0);
  CHECK(empty.run.stats.workgroups == 2 * (256 / 128));
}

TEST_CASE("the harness catches a broken W2 kernel", "[w2][detector]") {
  const Knobs k = knobMatrix()[6];
  DataOptions options;
  options.seed = 3;
  options.tokens = 40;

  SECTION("the barrier that protects the next K step's copy is removed") {
    Built built = build(w2Spec(k, 256, 512, 8, 2, 2));
    mlir::gpu::BarrierOp last;
    built.kernel->func->walk(
        [&](mlir::gpu::BarrierOp barrier) { last = barrier; });
    REQUIRE(last);
    last->erase();
    const StageOutcome outcome = runCase(built, options).outcome;
    CHECK_FALSE(outcome.pass);
    CHECK(outcome.run.findingCounts[int(FindingKind::LdsRace)] > 0);
  }
  SECTION("the two 16-byte FP8 chunks of each lane are swapped") {
    Built built = build(w2Spec(k, 256, 512, 8, 2, 2));
    int swapped = 0;
    built.kernel->func->walk([&](mlir::vector::ShuffleOp shuffle) {
      shuffle.setMask({4, 5, 6, 7, 0, 1, 2, 3});
      ++swapped;
    });
    REQUIRE(swapped > 0);
    const StageOutcome outcome = runCase(built, options).outcome;
    INFO(outcome.summary);
    CHECK_FALSE(outcome.pass);
    CHECK(outcome.elementsOverTolerance > 0);
    CHECK(outcome.run.totalFindings() == 0);
  }
}

// Not run by default: prints the comparison for every knob set, for the
// numbers in docs/emulator.md (moec-emulator-tests "[.report]").
TEST_CASE("W2 comparison report", "[.report]") {
  for (const Knobs &k : knobMatrix()) {
    Built built = build(w2Spec(k, 2 * std::max(k.n, 256), k.inter, 8, 2, 2));
    DataOptions options;
    options.seed = 1;
    options.tokens = 40;
    options.invalidFraction = 0.1;
    const StageOutcome outcome = runCase(built, options).outcome;
    std::cout << describe(k) << ": " << outcome.summary << " ("
              << outcome.run.stats.mfmas << " MFMAs in "
              << outcome.run.stats.seconds << " s)\n";
    CHECK(outcome.pass);
  }
}

TEST_CASE("weights of experts marked absent are poisoned for the kernel",
          "[w2][detector]") {
  // moec run generates only the experts some tile selects and marks the
  // rest absent. Marking a selected expert absent must make the kernel's
  // reads of its weights findings (and unmarked experts must stay silent).
  Built built = build(w2Spec(knobMatrix()[1], 256, 512, 8, 2, 2));
  DataOptions options;
  options.seed = 8;
  options.tokens = 40;
  LayerData data;
  REQUIRE(built.harness->generate(options, data, /*rank=*/0).ok());
  RankData &rank = data.ranks[0];
  const int64_t localExperts = built.shape().localExperts;
  rank.w2.present.assign(size_t(localExperts), 1);
  int32_t used = -1;
  for (int32_t e : rank.sorted.tileExperts)
    if (ref::isValidExpert(e, localExperts))
      used = e;
  REQUIRE(used >= 0);
  for (int32_t e = 0; e < localExperts; ++e) {
    bool selected = false;
    for (int32_t t : rank.sorted.tileExperts)
      selected |= t == e;
    if (!selected)
      rank.w2.present[size_t(e)] = 0; // truly unused: must stay silent
  }
  std::string error;
  StageOutcome clean;
  REQUIRE(mlir::succeeded(
      built.harness->run(data, 0, LaunchConfig(), clean, error)));
  CHECK(clean.run.totalFindings() == 0);

  rank.w2.present[size_t(used)] = 0;
  StageOutcome poisoned;
  REQUIRE(mlir::succeeded(
      built.harness->run(data, 0, LaunchConfig(), poisoned, error)));
  CHECK(poisoned.run.findingCounts[int(FindingKind::UninitializedRead)] > 0);
  REQUIRE(!poisoned.run.findings.empty());
  CHECK(poisoned.run.findings[0].detail.find("'b") != std::string::npos);
}

TEST_CASE("W2 with tile.group_m computes every tile exactly once", "[w2]") {
  // 40 tokens x 2 routes over 4 local experts give about 6 M tiles of 16:
  // groups of 4 leave a shorter last group.
  for (int64_t group : {2, 4}) {
    StageSpec spec = scheduleSpec();
    spec.fields["group_m"] = std::to_string(group);
    Built built = build(spec);
    const StageOutcome outcome =
        runCase(built, scheduleData(23, 40, 1)).outcome;
    INFO("group_m " << group << ": " << outcome.summary);
    checkEveryRowOnce(outcome);
  }
}

TEST_CASE("W2 with tile.persist_skew computes every tile exactly once",
          "[w2]") {
  // 3 persistent workgroup rows over about 6 M tiles, contiguous and
  // strided, each starting at a rotated position in its own list.
  for (bool strided : {false, true}) {
    StageSpec spec = scheduleSpec();
    spec.fields["persist_cu"] = "3";
    spec.fields["persist_strided"] = strided ? "true" : "false";
    spec.fields["persist_skew"] = "1";
    Built built = build(spec);
    const StageOutcome outcome =
        runCase(built, scheduleData(29, 40, 1)).outcome;
    INFO("strided " << strided << ": " << outcome.summary);
    checkEveryRowOnce(outcome);
  }
}

TEST_CASE("W2 with tile.xcd_swizzle then tile.group_m computes every tile "
          "exactly once",
          "[w2]") {
  // AITER's _xcd4 schedule: the XCD renumbering, then groups of 4 M tiles.
  // 4 N tiles x about 6 M tiles: over several token counts the workgroup
  // count is sometimes a multiple of the 8 XCDs (renumbered) and sometimes
  // not (plain order kept).
  StageSpec spec = scheduleSpec();
  spec.fields["xcd_swizzle"] = "true";
  spec.fields["group_m"] = "4";
  Built built = build(spec);
  for (int64_t tokens : {36, 40, 44, 49}) {
    const StageOutcome outcome =
        runCase(built, scheduleData(31, tokens, 0)).outcome;
    INFO("tokens " << tokens << ": " << outcome.summary);
    checkEveryRowOnce(outcome);
  }
}

TEST_CASE("W2 with sort_block_m reads M tiles inside larger sort blocks",
          "[w2]") {
  // AITER's _sbm: a sort in blocks of 32 or 64 rows, W2 tiles of 16. Each
  // M tile must take its block's expert; a tile taking the expert of block
  // i instead of i * 16 / block would multiply by the wrong weights.
  for (int64_t block : {32, 64}) {
    StageSpec spec = scheduleSpec();
    spec.fields["sort_block_m"] = std::to_string(block);
    Built built = build(spec);
    CHECK(built.harness->shape().tileM == block);
    CHECK(built.harness->shape().tilesPerSortBlock == block / 16);
    const StageOutcome outcome =
        runCase(built, scheduleData(37, 40, 1)).outcome;
    INFO("sort block " << block << ": " << outcome.summary);
    checkEveryRowOnce(outcome);
  }
}

TEST_CASE("W2 with tile.b_direct computes bit for bit what the LDS tile does",
          "[w2]") {
  // The same weight bytes reach the same MFMA lanes from global memory
  // instead of LDS: identical outputs, the routed experts' E2M1 rows and an
  // FHMoE shared expert's FP8 rows alike; LDS holds only the A tile.
  for (bool shared : {false, true})
    for (Knobs k : {Knobs{16, 128, 4, "m16n16k128", "b_major", "nt"},
                    Knobs{64, 256, 4, "m32n32k64", "a_major", "cached"}}) {
      StageSpec spec = w2Spec(k, 512, 512, 8, 2, shared ? 1 : 2);
      if (shared)
        spec.fields["shared_fp8_expert"] = "true";
      Built staged = build(spec);
      spec.fields["b_direct"] = "true";
      Built direct = build(spec);
      DataOptions options;
      options.seed = 41;
      options.tokens = 30;
      options.invalidFraction = 0.3;
      options.emptyTiles = 1;
      const Case caseA = runCase(staged, options);
      const Case caseB = runCase(direct, options);
      const StageOutcome &a = caseA.outcome, &b = caseB.outcome;
      INFO(describe(k) << (shared ? " shared" : "") << ": " << b.summary);
      CHECK(a.pass);
      CHECK(b.pass);
      CHECK(b.run.totalFindings() == 0);
      // Only A goes through LDS now.
      CHECK(b.run.stats.ldsBytesWritten < a.run.stats.ldsBytesWritten);
      REQUIRE(caseA.rows().bf16.size() == caseB.rows().bf16.size());
      CHECK(caseA.rows().bf16 == caseB.rows().bf16);
      CHECK(caseA.rows().written == caseB.rows().written);
    }
}

namespace {

/// Relative L2 of rank 0's route rows (as the kernel wrote them, split-K
/// partials summed) against the oracle without the W2 bias, over the
/// listed routes.
double w2RelL2AgainstUnbiased(const Case &c, const StageShape &s) {
  const RankData &mine = c.data.ranks[0];
  ref::SortedRoutes view;
  REQUIRE(oracleRoutes(mine.sorted, s.tileM, s.localExperts, view));
  const int64_t routes = c.data.numRoutes(), hidden = s.hidden;
  std::vector<float> unbiased(size_t(routes * hidden),
                              std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref::runW2Stage(mine.intermediate.codes.data(),
                          mine.intermediate.scales.data(),
                          mine.w2.packed.data(), mine.w2.scales.data(),
                          s.localExperts, hidden, s.intermediate, view,
                          unbiased.data()));
  double errorSquares = 0.0, referenceSquares = 0.0;
  for (int64_t r = 0; r < routes; ++r)
    for (int64_t h = 0; h < hidden; ++h) {
      const double want = unbiased[size_t(r * hidden + h)];
      if (std::isnan(want))
        continue;
      double got = 0.0;
      if (s.splitK > 1)
        for (int64_t z = 0; z < s.splitK; ++z)
          got += c.rows().partials[size_t((r * s.splitK + z) * hidden + h)];
      else
        got = ref::decodeBf16(c.rows().bf16[size_t(r * hidden + h)]);
      errorSquares += (got - want) * (got - want);
      referenceSquares += want * want;
    }
  REQUIRE(referenceSquares > 0.0);
  return std::sqrt(errorSquares / referenceSquares);
}

} // namespace

TEST_CASE("W2 with a per-expert bias matches the oracle, which without the "
          "bias disagrees",
          "[w2][bias]") {
  // AITER's FlyDSL bias2: FP32 [E, H] added to each route's row before it
  // is stored. Both orientations and MFMA shapes, split-K (slice 0 adds it)
  // and bf16_lds.
  struct BiasCase {
    Knobs k;
    bool bf16Lds;
  };
  const std::vector<BiasCase> cases = {
      {{16, 128, 4, "m16n16k128", "b_major", "nt"}, false},
      {{32, 128, 4, "m16n16k128", "a_major", "cached"}, false},
      {{128, 256, 8, "m32n32k64", "b_major", "cached"}, false},
      {{32, 128, 4, "m32n32k64", "a_major", "cached"}, false},
      {{16, 128, 4, "m16n16k128", "b_major", "nt", 2, 128, 640}, false},
      {{32, 128, 4, "m32n32k64", "a_major", "cached", 4, 128, 512}, false},
      {{32, 128, 4, "m16n16k128", "b_major", "nt"}, true},
  };
  for (const BiasCase &bc : cases) {
    StageSpec spec = w2Spec(bc.k, 2 * std::max(bc.k.n, 256), bc.k.inter, 8, 2, 2);
    spec.fields["bias"] = "true";
    if (bc.bf16Lds)
      spec.fields["bf16_lds"] = "true";
    Built built = build(spec);
    REQUIRE(built.shape().bias);
    DataOptions options;
    options.seed = 3;
    options.tokens = 40;
    options.invalidFraction = 0.2;
    options.emptyTiles = 1;
    const Case c = runCase(built, options);
    const double unbiased = w2RelL2AgainstUnbiased(c, built.shape());
    const double bound = bc.k.splitK > 1 ? kW2SplitRelL2Bound : kW2RelL2Bound;
    INFO(describe(bc.k) << (bc.bf16Lds ? " bf16_lds" : "") << ": "
                        << c.outcome.summary
                        << "; rel L2 vs the oracle without bias " << unbiased);
    CHECK(c.outcome.pass);
    CHECK(c.outcome.elementsChecked > 0);
    CHECK(c.outcome.run.totalFindings() == 0);
    // Ignoring the bias would be caught: far outside the bound (adding it
    // in every split-K slice fails the oracle comparison above).
    CHECK(unbiased > 64 * bound);
  }
}

TEST_CASE("W2 with a bias and an FHMoE shared expert: its row is the last",
          "[w2][bias]") {
  for (Knobs k : {Knobs{16, 128, 4, "m16n16k128", "b_major", "nt"},
                  Knobs{64, 256, 4, "m32n32k64", "a_major", "cached"}}) {
    StageSpec spec = w2Spec(k, 512, 512, 8, 2, /*ep=*/1);
    spec.fields["shared_fp8_expert"] = "true";
    spec.fields["bias"] = "true";
    Built built = build(spec);
    DataOptions options;
    options.seed = 43;
    options.tokens = 30;
    options.invalidFraction = 0.2;
    const Case c = runCase(built, options);
    INFO(describe(k) << " shared: " << c.outcome.summary);
    CHECK(c.outcome.pass);
    CHECK(c.outcome.elementsChecked > 0);
    CHECK(c.outcome.run.totalFindings() == 0);
    // Some tile ran the shared expert (local expert 7).
    bool sharedListed = false;
    for (int32_t e : c.data.ranks[0].sorted.tileExperts)
      sharedListed |= e == 7;
    CHECK(sharedListed);
  }
}

TEST_CASE("W2 with a K tail (tile.k not dividing I) matches the oracle and, "
          "without split-K, tile.k = 128 bit for bit",
          "[w2][ktail]") {
  // I = 384 with k = 256 (DeepSeek V4's stage 2: one step and a tail of
  // 128), I = 896 with k = 512 (a tail of 384: 24 chunks a row, whose A
  // swizzle is the power of two 8) and under split-K I = 640 with k = 256
  // (2 slices) and I = 896 with k = 256 (4 slices, the last of them the
  // tail alone); FP8, MXFP4 and BF16 A. Every
  // MFMA adds its 128 or 64 K to the accumulator in increasing K
  // whatever tile.k is, so a tail kernel must give exactly the outputs of
  // k = 128 (which divides every I here); split-K slices differ in their
  // FP32 partial sums and are held to the oracle.
  struct TailCase {
    Knobs k;
    std::map<std::string, std::string> extra;
  };
  const std::vector<TailCase> cases = {
      {{32, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384}, {}},
      {{32, 128, 4, "m32n32k64", "a_major", "cached", 1, 256, 384}, {}},
      {{16, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384, true, true,
        true},
       {}},
      {{32, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384},
       {{"b_direct", "true"}}},
      {{32, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384},
       {{"bf16_lds", "true"}, {"a_swizzle", "true"}}},
      {{64, 256, 4, "m16n16k128", "a_major", "cached", 1, 512, 896},
       {{"a_swizzle", "true"}}},
      {{16, 128, 4, "m16n16k128", "b_major", "nt", 2, 256, 640, false, true},
       {}},
      // MXFP4 A (A4W4) and BF16 A (A16W4): rows of half and twice the FP8
      // bytes, the same K tail.
      {{32, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384},
       {{"activation", "f4E2M1FN"}}},
      {{32, 128, 4, "m32n32k64", "a_major", "cached", 1, 256, 384, true},
       {{"activation", "f4E2M1FN"}}},
      {{32, 128, 4, "m16n16k128", "b_major", "nt", 1, 256, 384, false, true},
       {{"activation", "bf16"}}},
      {{32, 128, 4, "m32n32k64", "a_major", "cached", 1, 512, 896},
       {{"activation", "bf16"}, {"a_swizzle", "true"}}},
      {{32, 128, 4, "m32n32k64", "a_major", "cached", 4, 256, 896, true},
       {}},
  };
  for (const TailCase &tc : cases) {
    REQUIRE(tc.k.inter % tc.k.k != 0);
    const int64_t hidden = 2 * std::max(tc.k.n, 256);
    StageSpec spec = w2Spec(tc.k, hidden, tc.k.inter, 8, 2, 2);
    for (const auto &[field, value] : tc.extra)
      spec.fields[field] = value;
    Built tail = build(spec);
    DataOptions options;
    options.seed = 47;
    options.tokens = 40;
    options.invalidFraction = 0.2;
    options.emptyTiles = 1;
    const Case c = runCase(tail, options);
    std::string extras;
    for (const auto &[field, value] : tc.extra)
      extras += " " + field + "=" + value;
    INFO(describe(tc.k) << " I=" << tc.k.inter << extras << ": "
                        << c.outcome.summary);
    CHECK(c.outcome.pass);
    CHECK(c.outcome.elementsChecked > 0);
    CHECK(c.outcome.listedRowsUnwritten == 0);
    CHECK(c.outcome.unlistedRowsWritten == 0);
    CHECK(c.outcome.relL2 <
          (tc.k.splitK > 1 ? kW2SplitRelL2Bound : kW2RelL2Bound));
    // No out-of-bounds access, race or uninitialised read.
    CHECK(c.outcome.run.totalFindings() == 0);
    CHECK((c.outcome.run.stats.ldsDmaOps > 0) == tc.k.asyncA);
    if (tc.k.splitK > 1)
      continue;
    StageSpec whole = spec;
    whole.fields["k"] = "128";
    Built dividing = build(whole);
    const Case d = runCase(dividing, options);
    CHECK(d.outcome.pass);
    REQUIRE(c.rows().bf16.size() == d.rows().bf16.size());
    size_t differing = 0;
    for (size_t i = 0; i < c.rows().bf16.size(); ++i)
      differing += c.rows().bf16[i] != d.rows().bf16[i];
    CHECK(differing == 0);
    CHECK(c.rows().written == d.rows().written);
  }
}
