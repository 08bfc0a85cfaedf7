// The report's log axes and the readers of the measurements it draws
// (moec/Report/PlotScales.h, moec/Report/Measurements.h), with values
// worked out by hand.

#include "moec/Report/Measurements.h"
#include "moec/Report/PlotScales.h"

#include <catch2/catch.hpp>

using namespace moec;
using namespace moec::report;

TEST_CASE("a log10 scale spans whole decades and ticks them",
          "[report][plot]") {
  // 3.2 .. 640 lies in the decades 1 .. 1000: three decades over 300 px,
  // 100 px each.
  const LogScale wide = LogScale::covering(3.2, 640, 0, 300);
  CHECK(wide.low == Approx(1));
  CHECK(wide.high == Approx(1000));
  CHECK(wide.position(10) == Approx(100));
  CHECK(wide.position(100) == Approx(200));
  CHECK(wide.position(1000) == Approx(300));
  CHECK(wide.position(31.6227766) == Approx(150)); // 10^1.5
  // More than two decades: only the powers of ten.
  const std::vector<double> wideTicks = wide.ticks();
  REQUIRE(wideTicks.size() == 4);
  CHECK(wideTicks[0] == Approx(1));
  CHECK(wideTicks[3] == Approx(1000));

  // A vertical ratio axis, 0.37 .. 2.07 in 0.1 .. 10, bottom at 100 px:
  // 1 in the middle, 2 at 100 - 100 * (log10 2 + 1) / 2 = 34.9485.
  const LogScale ratio = LogScale::covering(0.37, 2.07, 100, 0);
  CHECK(ratio.low == Approx(0.1));
  CHECK(ratio.high == Approx(10));
  CHECK(ratio.position(1) == Approx(50));
  CHECK(ratio.position(0.1) == Approx(100));
  CHECK(ratio.position(10) == Approx(0));
  CHECK(ratio.position(2) == Approx(34.9485).epsilon(1e-4));
  // Two decades: 1, 2 and 5 of each.
  const std::vector<double> expected = {0.1, 0.2, 0.5, 1, 2, 5, 10};
  const std::vector<double> ticks = ratio.ticks();
  REQUIRE(ticks.size() == expected.size());
  for (size_t i = 0; i < ticks.size(); ++i)
    CHECK(ticks[i] == Approx(expected[i]));

  // An exact power of ten stays in its decade; one value spans a decade.
  const LogScale single = LogScale::covering(1000, 1000, 0, 1);
  CHECK(single.low == Approx(1000));
  CHECK(single.high == Approx(10000));
  CHECK(LogScale::covering(0.05, 0.05, 0, 1).low == Approx(0.01));
  CHECK(tickText(0.2) == "0.2");
  CHECK(tickText(2000) == "2000");
}

TEST_CASE("the M axis is log2 from 1", "[report][plot]") {
  // 1 .. 2048 is 11 doublings over 910 px: M 32 at 60 + 910 * 5 / 11.
  const LogAxis axis{60, 910, 2048};
  CHECK(axis.x(1) == Approx(60));
  CHECK(axis.x(32) == Approx(473.636).epsilon(1e-5));
  CHECK(axis.x(2048) == Approx(970));
  CHECK(axis.x(0.5) == Approx(60));  // below 1: the left end
  CHECK(axis.x(4096) == Approx(970)); // above the end: the right end
  const std::vector<uint64_t> ticks = axis.ticks();
  REQUIRE(ticks.size() == 12);
  CHECK(ticks.front() == 1);
  CHECK(ticks.back() == 2048);
  // Above 2^16, every other power.
  const std::vector<uint64_t> sparse = LogAxis{0, 1, double(1 << 20)}.ticks();
  REQUIRE(sparse.size() == 11);
  CHECK(sparse[1] == 4);
  CHECK(mAxisEnd(1024) == 2048);
  CHECK(mAxisEnd(1000) == 2048);
  CHECK(mAxisEnd(0) == 2);
  CHECK(mText(16384) == "16K");
  CHECK(mText(1536) == "1536");
}

TEST_CASE("moec model-check's CSV reads back as entries", "[report][inputs]") {
  const std::string header =
      "figure,source,family,stage,shape,network,m,config,part,measured_us,"
      "predicted_us,ratio,upper_bound,hbm_us,lds_us,mfma_us,issue_us,"
      "cu_memory_us,tile_rounds_us,skipped\n";
  ModelCheckData data;
  std::string error;
  REQUIRE(parseModelCheckCsv(
      "mc.csv",
      header +
          "t1,s,tp-fused-moe,layer,H1024 I256 E8 k2 ep1,tiny,1,c,validation,"
          "12.36,6.18,0.500,0,0.05,0.18,0.05,0.01,0.00,0.00,\n"
          "x,s,megamoe,layer,H1024 I256 E8 k2 ep4,other,6,,validation,100,,,0,"
          "0.00,0.00,0.00,0.00,0.00,0.00,no table selects network other\n",
      data, error));
  REQUIRE(data.entries.size() == 2);
  const ModelCheckEntry &t1 = data.entries[0];
  CHECK(t1.figure == "t1");
  CHECK(t1.family == "tp-fused-moe");
  CHECK(t1.network == "tiny");
  CHECK(t1.m == 1);
  CHECK(t1.part == "validation");
  CHECK(t1.measuredUs == Approx(12.36));
  CHECK(t1.predictedUs == Approx(6.18));
  CHECK_FALSE(t1.upperBound);
  CHECK(t1.skipped.empty());
  REQUIRE(t1.series.size() == 1);
  CHECK(t1.series[0] == "configuration tp-fused-moe layer H1024 I256 E8 k2 ep1 c");
  CHECK(data.entries[1].skipped == "no table selects network other");

  ModelCheckData bad;
  CHECK_FALSE(parseModelCheckCsv(
      "mc.csv", header + "t1,s,f,layer,sh,n,1,c,train,12,x,1,0,0,0,0,0,0,0,\n",
      bad, error));
  CHECK(error == "mc.csv:2: column 'predicted_us': expected a time, got 'x'");
  CHECK_FALSE(parseModelCheckCsv("mc.csv", header + "t1,s\n", bad, error));
  CHECK(error == "mc.csv:2: 2 fields, the header has 20");
  CHECK_FALSE(parseModelCheckCsv("mc.csv", "figure,m\n", bad, error));
  CHECK(error.rfind("mc.csv:1: no column 'source'", 0) == 0);
}

TEST_CASE("moec bench's JSON header says how it timed", "[report][inputs]") {
  BenchMeasurements bench;
  std::string error;
  REQUIRE(parseBenchHeader(
      "b.json",
      "{\"device\": \"timing-double\", \"method\": \"mean-of-pass-medians\", "
      "\"date\": \"2026-12-02\", \"synthetic\": true, \"interrupted\": false,\n"
      " \"rows\": [\n ]}\n",
      bench, error));
  CHECK(bench.device == "timing-double");
  CHECK(bench.method == "mean-of-pass-medians");
  CHECK(bench.date == "2026-12-02");
  CHECK(bench.synthetic);
  BenchMeasurements real;
  REQUIRE(parseBenchHeader("b.json",
                           "{\"device\": \"gfx950\", \"method\": \"m\", "
                           "\"synthetic\": false,\n",
                           real, error));
  CHECK_FALSE(real.synthetic);
  CHECK_FALSE(parseBenchHeader("b.json", "network,ep\n", real, error));
  CHECK(error == "b.json: not moec bench --json output (no device and method)");
  CHECK(figureOfNetwork("flash", "flash-fused"));
  CHECK(figureOfNetwork("flash", "flash"));
  CHECK_FALSE(figureOfNetwork("flash", "flash-tp4"));
}
