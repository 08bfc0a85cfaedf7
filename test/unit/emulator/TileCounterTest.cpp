//===- TileCounterTest.cpp - moec tune's counted tile vs the analytic one -===//
//
// The tuner's emulated tile counter (tools/moec/EmulatedTileCounter.h) on
// one W2 and one W13 tile of DeepSeek V4.1 Flash at the real K (W2: I 2304,
// W13: H 5120): the scaled MFMAs equal the analytic count exactly, and the
// global bytes read are the analytic A + B bytes plus the tile's route-list
// lines.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/EmulatedTileCounter.h"

#include "moec/Compiler/CostModel.h"
#include "moec/Harness/StageKernel.h"

#include <catch2/catch.hpp>

using namespace moec;

namespace {

/// A Flash EP4 kernel (H 5120, I 2304, 384 experts, top-6) with its knobs.
StageSpec flashSpec(abi::Stage stage,
                    std::map<std::string, std::string> knobs) {
  StageSpec spec;
  spec.stage = stage;
  spec.fields = {{"hidden", "5120"}, {"intermediate", "2304"},
                 {"experts", "384"}, {"top_k", "6"},
                 {"ep", "4"},        {"k", "256"},
                 {"orientation", "b_major"}, {"scale_prefetch", "true"}};
  if (stage == abi::Stage::W13)
    spec.fields["swiglu_limit"] = "10";
  for (auto &[name, value] : knobs)
    spec.fields[name] = value;
  return spec;
}

GemmStageShape shapeOf(const StageSpec &spec) {
  GemmStageShape shape;
  shape.stage = spec.stage;
  shape.hidden = emu::specInteger(spec, "hidden", 0);
  shape.intermediate = emu::specInteger(spec, "intermediate", 0);
  shape.experts = emu::specInteger(spec, "experts", 0);
  shape.topK = emu::specInteger(spec, "top_k", 0);
  shape.ep = emu::specInteger(spec, "ep", 1);
  shape.tileM = emu::specInteger(spec, "m", 16);
  shape.tileN = emu::specInteger(spec, "n", 64);
  shape.waves = emu::specInteger(spec, "waves", 4);
  shape.mfma32 = emu::specText(spec, "mfma") == "m32n32k64";
  shape.bDirect = emu::specFlag(spec, "b_direct");
  return shape;
}

/// The analytic global bytes one tile reads: FP8 A + its E8M0 scales, E2M1
/// B + its scales (countTile()'s formula).
double analyticABBytes(const GemmStageShape &s) {
  const bool w13 = s.stage == abi::Stage::W13;
  const double k = double(w13 ? s.hidden : s.intermediate);
  const double rows = double(w13 ? 2 * s.tileN : s.tileN);
  return double(s.tileM) * k * (1 + 1.0 / 32) + rows * k * (0.5 + 1.0 / 32);
}

void checkCounted(harness::EmulatedTileCounter &counter, const StageSpec &spec) {
  const GemmStageShape shape = shapeOf(spec);
  TileCounts counted;
  std::string error;
  const bool ok = counter.count(spec, counted, error);
  INFO(error);
  REQUIRE(ok);
  const TileCounts analytic = countTile(shape);
  INFO(abi::stageName(spec.stage) << " m " << shape.tileM << " n " << shape.tileN << " waves "
                  << shape.waves << (shape.mfma32 ? " mfma32" : "")
                  << (shape.bDirect ? " b_direct" : "") << ": counted read "
                  << counted.globalBytesRead << " written "
                  << counted.globalBytesWritten << " lds read "
                  << counted.ldsBytesRead << " written "
                  << counted.ldsBytesWritten << " conflicts "
                  << counted.ldsBankConflicts << " mfmas "
                  << counted.scaledMfmas << " other "
                  << counted.otherInstructions << "; analytic read "
                  << analytic.globalBytesRead << " written "
                  << analytic.globalBytesWritten << " mfmas "
                  << analytic.scaledMfmas);
  CHECK(counted.source == "emulator");
  // Scaled MFMAs are exact: ceil(m / d) ceil(B rows / d) (K / mfma K).
  CHECK(counted.scaledMfmas == analytic.scaledMfmas);
  // Distinct lines read: A and B with their scales (whole lines: every row
  // is a multiple of 64 bytes) plus the route list's few lines (the tile's
  // route ids and expert id), so within 1% above the analytic bytes.
  const double ab = analyticABBytes(shape);
  CHECK(analytic.globalBytesRead == ab);
  CHECK(counted.globalBytesRead >= ab);
  CHECK(counted.globalBytesRead <= ab * 1.01);
  // Written: the output tile (W13 FP8 + scales, W2 BF16) in whole lines;
  // the W13 scales (tile n / 32 bytes a row) round up to a line.
  CHECK(counted.globalBytesWritten >= analytic.globalBytesWritten);
  CHECK(counted.globalBytesWritten <= analytic.globalBytesWritten + 64);
  // Every operand byte staged through LDS is written there at least once.
  CHECK(counted.ldsBytesWritten > 0);
  CHECK(counted.ldsBytesRead > 0);
  CHECK(counted.otherInstructions > 0);
  // The same kernel is counted once and gives the same figures.
  TileCounts again;
  REQUIRE(counter.count(spec, again, error));
  CHECK(again.globalBytesRead == counted.globalBytesRead);
  CHECK(again.ldsBankConflicts == counted.ldsBankConflicts);
  CHECK(again.otherInstructions == counted.otherInstructions);
}

} // namespace

TEST_CASE("counted W2 tile: MFMAs exact, bytes read close to A + B",
          "[tilecounter]") {
  harness::EmulatedTileCounter counter;
  checkCounted(counter, flashSpec(abi::Stage::W2, {{"m", "16"}, {"n", "128"}, {"waves", "4"}}));
  checkCounted(counter, flashSpec(abi::Stage::W2, {{"m", "32"}, {"n", "128"},
                                         {"waves", "4"}, {"b_direct", "true"}}));
}

TEST_CASE("counted W13 tile: MFMAs exact, bytes read close to A + B",
          "[tilecounter]") {
  harness::EmulatedTileCounter counter;
  checkCounted(counter,
               flashSpec(abi::Stage::W13, {{"m", "16"}, {"n", "64"}, {"waves", "4"}}));
  checkCounted(counter, flashSpec(abi::Stage::W13, {{"m", "32"},
                                          {"n", "128"},
                                          {"waves", "4"},
                                          {"mfma", "m32n32k64"}}));
}

TEST_CASE("a fused stage is counted as its one-tile GEMM", "[tilecounter]") {
  std::map<std::string, std::string> knobs = {
      {"m", "16"}, {"n", "128"}, {"waves", "4"}};
  const StageSpec plain = flashSpec(abi::Stage::W2, knobs);
  knobs.insert({{"transport", "fixed_slot"},
                {"capacity", "4096"},
                {"max_tokens", "1024"},
                {"workgroups", "256"}});
  const StageSpec fused = flashSpec(abi::Stage::W2, knobs);
  const StageSpec one = harness::oneTileSpec(fused);
  CHECK(one.fields == harness::oneTileSpec(plain).fields);
  CHECK(one.fields.at("experts") == "1");
  CHECK(one.fields.at("top_k") == "1");
  CHECK(one.fields.at("ep") == "1");
  CHECK(one.fields.at("hidden") == "128");
  CHECK(one.fields.at("intermediate") == "2304");
  CHECK(one.fields.count("transport") == 0);
  harness::EmulatedTileCounter counter;
  TileCounts a, b;
  std::string error;
  REQUIRE(counter.count(plain, a, error));
  REQUIRE(counter.count(fused, b, error));
  CHECK(a.otherInstructions == b.otherInstructions);
}
