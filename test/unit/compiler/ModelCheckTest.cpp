//===- ModelCheckTest.cpp - moec model-check's parsing and arithmetic -----===//
//
// The expected predictions are worked out by hand from the formulas of
// docs/cost-model.md with gfx950's facts (8 TB/s, 2.4 GHz, 128 LDS bytes
// per CU and cycle, 32 cycles per 16x16x128 scaled MFMA, 4 SIMDs, 256 CUs).
//
//===----------------------------------------------------------------------===//

#include "moec/Compiler/ModelCheck.h"
#include "moec/target/target_info.h"

#include <catch2/catch.hpp>

#include <cmath>

namespace {

/// W2 of H 1024, I 256, one expert, top-1: one M tile of 16 rows at M 16,
/// 1024 / 128 = 8 N tiles, K 256.
moec::ModelKernel smallW2() {
  moec::ModelKernel kernel;
  kernel.name = "w2";
  kernel.gemm = true;
  kernel.shape.stage = moec::abi::Stage::W2;
  kernel.shape.hidden = 1024;
  kernel.shape.intermediate = 256;
  kernel.shape.experts = 1;
  kernel.shape.topK = 1;
  kernel.shape.ep = 1;
  kernel.shape.tileM = 16;
  kernel.shape.tileN = 128;
  kernel.shape.waves = 4;
  kernel.resources.vgpr = 64;
  kernel.resources.sgpr = 32;
  kernel.workgroupSize = 256;
  kernel.counts = moec::countTile(kernel.shape);
  return kernel;
}

moec::ModelKernel otherKernel() {
  moec::ModelKernel kernel;
  kernel.name = "quant";
  return kernel;
}

/// `base` with round numbers that make each term easy to work by hand:
/// half the HBM bandwidth, 1 GB/s a CU, 2 us a round of tiles, 4 us a
/// launch, 5 us a kernel other than a GEMM.
moec::CostModelParameters perCuBound(moec::CostModelParameters base) {
  base.hbmEfficiency = 0.5;
  base.cuBytesPerSecond = 1e9;
  base.tileRoundUs = 2;
  base.launchOverheadUs = 4;
  base.otherKernelUs = 5;
  return base;
}

const char *kFigures =
    "figure,source,family,network,hidden,inter,experts,topk,ep,tp,capacity,"
    "path,phase,m,quantity,measured_us,baseline_us\n"
    "a,s,megamoe,n,1024,256,1,1,1,1,0,,decode,16,layer,12.364166,\n"
    "b,s,megamoe,n,1024,256,1,1,1,1,0,,decode,16,layer,6.182083,\n"
    "c,s,megamoe,n,1024,256,1,1,1,1,0,,decode,16,layer,3.0910415,\n";

} // namespace

TEST_CASE("model-check: hand-checked predictions of one small layer",
          "[modelcheck]") {
  std::vector<moec::ModelKernel> kernels = {otherKernel(), smallW2()};
  // Analytic tile: A 16 x 256 FP8 + 128 scale bytes = 4224, B 128 x 256 / 2
  // + 1024 scale bytes = 17408; 4096 BF16 bytes written; LDS 21632 written
  // and 4 x 4224 + 17408 = 34304 read; 16 MFMAs; 4 x 24 + 32 = 128 other.
  const moec::TileCounts &c = kernels[1].counts;
  REQUIRE(c.globalBytesRead == 21632);
  REQUIRE(c.ldsBytesRead + c.ldsBytesWritten == 55936);
  REQUIRE(c.scaledMfmas == 16);
  REQUIRE(c.otherInstructions == 128);
  // 8 tiles, one per CU, 4 SIMDs busy. LDS 55936 / 128 = 437 cycles =
  // 0.182083 us is the largest term (HBM 8 x 25728 B / 8 TB/s = 0.0257 us,
  // MFMA 16 x 32 / 4 + issue 128 / 4 = 160 cycles = 0.0667 us); + 3 us.
  moec::CostModelParameters cost2;
  REQUIRE(moec::costModelParameters("moec-cost-2", cost2));
  CHECK(moec::predictKernels(kernels, {1}, 16, cost2,
                              moec::target::kGfx950) ==
        Approx(3.182083).epsilon(1e-6));
  // The layer adds the quant kernel's 3 us.
  CHECK(moec::predictKernels(kernels, {0, 1}, 16, cost2,
                              moec::target::kGfx950) ==
        Approx(6.182083).epsilon(1e-6));
  // A per-CU bound of 1 GB/s: 25728 B take 25.728 us; one round of tiles
  // adds 2 us; launch 4 us; the quant costs 5 us.
  const moec::CostModelParameters p = perCuBound(cost2);
  CHECK(moec::predictKernels(kernels, {0, 1}, 16, p,
                              moec::target::kGfx950) ==
        Approx(36.728).epsilon(1e-6));
  moec::CostModelParameters unknown;
  CHECK_FALSE(moec::costModelParameters("moec-cost-9", unknown));
}

TEST_CASE("model-check: the chip's CU count bounds the tiles a CU runs",
          "[modelcheck]") {
  std::vector<moec::ModelKernel> kernels = {otherKernel(), smallW2()};
  // M 1024 on one expert: 64 M tiles x 8 N tiles = 512 tiles, 2 a CU on
  // gfx950's 256 CUs and 4 on mi350p's 128. A per-CU bound of 1 GB/s makes
  // each CU's 25728 bytes a tile the largest term (HBM: 512 x 25728 B at
  // 2 TB/s = 6.6 us): 51.456 us against 102.912 us, each plus one round of
  // resident tiles (2 us), the launch (4 us) and the quant kernel (5 us).
  moec::CostModelParameters cost2;
  REQUIRE(moec::costModelParameters("moec-cost-2", cost2));
  const moec::CostModelParameters p = perCuBound(cost2);
  CHECK(moec::predictKernels(kernels, {0, 1}, 1024, p,
                              moec::target::kGfx950) ==
        Approx(62.456).epsilon(1e-6));
  CHECK(moec::predictKernels(kernels, {0, 1}, 1024, p,
                              moec::target::kMi350p) ==
        Approx(113.912).epsilon(1e-6));
}

TEST_CASE("model-check: the peer exchange prices the return payload",
          "[modelcheck]") {
  // DeepSeek V4 Pro at EP8, 2048 tokens per rank: 2048 x 6 routes of
  // H 7168 over 1e11 B/s per link, 1/8 of them on each link, plus 100 us.
  // Out: 1 FP8 byte per element; back: 2 BF16 bytes (330.30144 us of
  // bytes), or an FP8 byte and an E8M0 scale per 32 (223.6416 us).
  moec::CostModelParameters p;
  p.peerBytesPerSecond = 1e11;
  p.exchangeFixedUs = 100;
  CHECK(moec::predictPeerExchange(7168, 6, 8, 2048, 2, p) ==
        Approx(430.30144).epsilon(1e-9));
  CHECK(moec::predictPeerExchange(7168, 6, 8, 2048, 1 + 1.0 / 32, p) ==
        Approx(323.6416).epsilon(1e-9));
  CHECK(moec::predictPeerExchange(7168, 6, 1, 2048, 2, p) == 0);
  // predictEntry adds it to the kernels for an EP entry, with the entry's
  // payload.
  moec::ModelCheckData data;
  data.chip = &moec::target::kGfx950;
  data.kernels = {otherKernel()};
  moec::ModelCheckEntry entry;
  entry.kernels = {0};
  entry.m = 2048;
  entry.hidden = 7168;
  entry.topK = 6;
  entry.ep = 8;
  p.otherKernelUs = 5;
  CHECK(moec::predictEntry(data, entry, p) == Approx(435.30144).epsilon(1e-9));
  entry.returnBytesPerHidden = 1 + 1.0 / 32;
  CHECK(moec::predictEntry(data, entry, p) == Approx(328.6416).epsilon(1e-9));
}

TEST_CASE("model-check: figures, summary and its statistics", "[modelcheck]") {
  std::vector<moec::PublishedFigure> figures;
  std::string error;
  REQUIRE(moec::parsePublishedFigures("f.csv", kFigures, figures, error));
  REQUIRE(figures.size() == 3);
  CHECK(figures[0].where.line == 2);
  CHECK(figures[2].measuredUs == Approx(3.0910415));
  moec::ModelCheckData data;
  data.chip = &moec::target::kGfx950;
  data.kernels = {otherKernel(), smallW2()};
  for (const moec::PublishedFigure &figure : figures) {
    moec::ModelCheckEntry entry;
    entry.figure = figure.id;
    entry.family = figure.family;
    entry.stage = figure.quantity;
    entry.part = "train";
    entry.m = figure.m;
    entry.measuredUs = figure.measuredUs;
    entry.kernels = {0, 1};
    data.entries.push_back(entry);
  }
  moec::predictEntries(data, moec::CostModelParameters());
  // Predicted 6.182083 us each: ratios 0.5, 1 and 2.
  const moec::ModelCheckSummary summary = moec::summarize(data);
  bool found = false;
  for (const moec::ErrorSummary &e : summary.errors)
    if (e.group == "train megamoe layer") {
      found = true;
      CHECK(e.count == 3);
      CHECK(e.medianAbsLog == Approx(std::log(2.0)).epsilon(1e-5));
      CHECK(e.p90AbsLog == Approx(std::log(2.0)).epsilon(1e-5));
      CHECK(e.medianRatio == Approx(1.0).epsilon(1e-5));
    }
  CHECK(found);
  CHECK(summary.winnerKeys == 0);
}

TEST_CASE("model-check: the published-winner check", "[modelcheck]") {
  moec::ModelCheckData data;
  data.chip = &moec::target::kGfx950;
  moec::ModelKernel wide = smallW2();
  // N 256: 4 tiles; LDS (4224 + 34816 written, 4 x 4224 + 34816 read) =
  // 90752 bytes = 709 cycles = 0.295 us, slower than N 128's 0.182 us.
  wide.shape.tileN = 256;
  wide.counts = moec::countTile(wide.shape);
  data.kernels = {smallW2(), wide};
  for (size_t k : {0, 1}) {
    moec::ModelCheckEntry entry;
    entry.figure = "row" + std::to_string(k);
    entry.family = "aiter-fmoe";
    entry.stage = "stage2";
    entry.part = "validation";
    entry.m = 16;
    entry.measuredUs = 3.2;
    entry.kernels = {k};
    entry.alternatives = {{0}, {1}};
    data.entries.push_back(entry);
  }
  moec::predictEntries(data, moec::CostModelParameters());
  CHECK(data.entries[1].predictedUs == Approx(3.295417).epsilon(1e-6));
  const moec::ModelCheckSummary summary = moec::summarize(data);
  // The N 128 row is the model's choice among the two; the N 256 row is not.
  CHECK(summary.winnerKeys == 2);
  CHECK(summary.winnerPicked == 1);
}

TEST_CASE("model-check: median, percentile and Spearman", "[modelcheck]") {
  CHECK(moec::median({1, 3, 2}) == 2);
  CHECK(moec::median({4, 1, 3, 2}) == 2.5);
  CHECK(moec::percentile90({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) == 9);
  CHECK(moec::spearman({1, 2, 3}, {10, 20, 30}) == Approx(1));
  CHECK(moec::spearman({1, 2, 3}, {30, 20, 10}) == Approx(-1));
  // Tied y ranks 1.5, 1.5, 3: 1.5 / sqrt(2 x 1.5).
  CHECK(moec::spearman({1, 2, 3}, {1, 1, 2}) == Approx(0.8660254));
}

TEST_CASE("model-check: random routing's expected tiles", "[modelcheck]") {
  // Two experts, top-1, M 2: rows of an expert are Binomial(2, 1/2): 0, 1,
  // 2 with 1/4, 1/2, 1/4; a 16-row tile is needed unless 0 rows: 2 x 3/4.
  moec::GemmStageShape shape = smallW2().shape;
  shape.experts = 2;
  CHECK(moec::tileGrid(shape, 2, true).mTiles == Approx(1.5));
  // Balanced routing expects 1.5 active experts and pads to 2 whole ones.
  CHECK(moec::tileGrid(shape, 2, false).mTiles == 2);
}

TEST_CASE("model-check: bad input names the file and line", "[modelcheck]") {
  std::vector<moec::PublishedFigure> figures;
  std::string error;
  const std::string header = "figure,source,family,network,hidden,inter,"
                             "experts,topk,ep,tp,capacity,path,phase,m,"
                             "quantity,measured_us\n";
  CHECK_FALSE(moec::parsePublishedFigures(
      "f.csv", header + "a,s,f,n,1,1,1,1,1,1,0,,d,x,layer,3\n", figures, error));
  CHECK(error == "f.csv:2: column 'm': expected a count, got 'x'");
  CHECK_FALSE(moec::parsePublishedFigures("f.csv", header + "a,s\n", figures,
                                          error));
  CHECK(error == "f.csv:2: 2 fields, the header has 16");
  CHECK_FALSE(moec::parsePublishedFigures("f.csv", "figure,source\n", figures,
                                          error));
  CHECK(error == "f.csv:1: missing column 'family'");
  std::map<int, moec::AiterStageTimes> times;
  CHECK_FALSE(moec::parseAiterStageTimes(
      "a.csv", "token,us1,us2,us\n1,2,3,5\n1,x,3,5\n", times, error));
  CHECK(error == "a.csv:3: column 'us1': expected a time in microseconds, got 'x'");
  times.clear();
  REQUIRE(moec::parseAiterStageTimes("a.csv", "token,kernelName1\n1,k\n", times,
                                     error));
  CHECK(times.empty());
}
