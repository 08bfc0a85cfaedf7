// The report library: the m ranges each table row serves (docs/selection.md:
// the nearest row, ties to the larger) and moec report's page of a bundle.

#include "moec/Report/BundleAnalysis.h"
#include "moec/Report/HtmlReport.h"

#include "moec/Compiler/TableCompiler.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace moec;
using namespace moec::report;
namespace fs = std::filesystem;

namespace {

/// The row docs/selection.md gives m: the nearest, ties to the larger.
size_t nearestRow(const rt::SelectionTable &table, uint32_t m) {
  size_t best = 0;
  for (size_t i = 1; i < table.rows.size(); ++i) {
    const int64_t d = std::llabs(int64_t(table.rows[i].m) - int64_t(m));
    const int64_t bestD = std::llabs(int64_t(table.rows[best].m) - int64_t(m));
    if (d <= bestD)
      best = i;
  }
  return best;
}

} // namespace

TEST_CASE("every m up to the last row is served by its nearest row",
          "[report][ranges]") {
  rt::SelectionTable table;
  for (uint32_t m : {1u, 6u, 7u, 64u, 100u, 1024u})
    table.rows.push_back({m, 0, {}});
  table.aboveMax = rt::AboveMaxPolicy::Largest;
  const std::vector<ServedRange> ranges = servedRanges(table);
  REQUIRE(ranges.size() == table.rows.size());
  CHECK(ranges.front().mLow == 0);
  for (size_t i = 0; i < ranges.size(); ++i) {
    CHECK(ranges[i].mLow <= table.rows[i].m);
    CHECK(table.rows[i].m <= ranges[i].mHigh);
    if (i + 1 < ranges.size())
      CHECK(ranges[i + 1].mLow == ranges[i].mHigh + 1);
    CHECK(ranges[i].aboveMax == (i + 1 == ranges.size()));
    for (uint32_t m = std::max(1u, ranges[i].mLow); m <= ranges[i].mHigh; ++m)
      CHECK(nearestRow(table, m) == i);
  }
  CHECK(ranges.back().mHigh == 1024);
  table.aboveMax = rt::AboveMaxPolicy::Error;
  CHECK_FALSE(servedRanges(table).back().aboveMax);
}

TEST_CASE("text is escaped for HTML", "[report][html]") {
  CHECK(htmlEscape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  CHECK(htmlEscape("flash ep4 ws1024") == "flash ep4 ws1024");
}

TEST_CASE("the page of a compiled bundle names its tables and configurations",
          "[report][html]") {
  const fs::path dir = fs::temp_directory_path() /
                       ("moec-report-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string tablePath = (dir / "r.table").string();
  const std::string bundlePath = (dir / "r.moeb").string();
  {
    std::ofstream table(tablePath);
    table << "moec-table 1\n"
             "problem p family=megamoe hidden=512 intermediate=256 experts=8 "
             "top_k=2 ep=2\n"
             "kernel quant stage=quant problem=p waves=4\n"
             "kernel sort stage=sort problem=p m_tile=16 waves=4\n"
             "kernel w13 stage=w13 problem=p m=16 n=64 k=256 waves=4 "
             "orientation=b_major\n"
             "kernel w2 stage=w2 problem=p m=16 n=128 k=256 waves=4 "
             "orientation=b_major\n"
             "kernel combine stage=combine problem=p waves=4\n"
             "config small kernels=quant,sort,w13,w2,combine\n"
             "select network=rep family=megamoe ep=2 workspace=1024 "
             "transport=none\n"
             "row m=1 config=small\nrow m=64 config=small\n";
  }
  CompileOptions options;
  CompileSummary summary;
  std::string error;
  REQUIRE(compileTableToBundle(tablePath, bundlePath, options, summary, error) ==
          CompileStatus::Ok);
  std::unique_ptr<rt::Bundle> bundle = rt::Bundle::open(bundlePath, error);
  REQUIRE(bundle);
  const target::TargetInfo *chip =
      bundleChip(bundle->manifest(), bundlePath, error);
  REQUIRE(chip);
  std::string html;
  REQUIRE(writeHtmlReport(*bundle, *chip, "r.moeb", html, error));
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  // The table's key and the configuration's anchor.
  CHECK(html.find(rt::describeTableKey("rep", 2, 1024)) != std::string::npos);
  CHECK(html.find("id=\"config-0\"") != std::string::npos);
  CHECK(html.find(chip->arch) != std::string::npos);
  // No measurement given: no measured section.
  CHECK(html.find("id=\"model-check\"") == std::string::npos);
  CHECK(html.find("id=\"bench\"") == std::string::npos);

  // With measurements: one model-check figure of the bundle's network
  // (measured 10 us, predicted 20 us at M 4), one of another network and
  // one the model skipped; one synthetic bench key of the table, one of
  // another table.
  ModelCheckData modelCheck;
  ModelCheckEntry mine;
  mine.figure = "mine";
  mine.family = "megamoe";
  mine.stage = "layer";
  mine.network = "rep";
  mine.part = "train";
  mine.m = 4;
  mine.measuredUs = 10;
  mine.predictedUs = 20;
  mine.series = {"configuration rep"};
  ModelCheckEntry other = mine;
  other.figure = "other";
  other.network = "elsewhere";
  ModelCheckEntry skipped = mine;
  skipped.figure = "skipped";
  skipped.skipped = "no table";
  modelCheck.entries = {mine, other, skipped};
  BenchMeasurements bench;
  bench.device = "double";
  bench.method = "graph";
  bench.synthetic = true;
  bench.keys = {{"rep", 2, 1024, 64, 50.0, -1, ""},
                {"gone", 4, 512, 6, 30.0, -1, ""}};
  ReportMeasurements measurements;
  measurements.modelCheck = &modelCheck;
  measurements.bench = &bench;
  REQUIRE(writeHtmlReport(*bundle, *chip, "r.moeb", html, error, measurements));
  auto chart = [&](const std::string &id) {
    const size_t at = html.find("<svg class=\"chart\" id=\"" + id + "\"");
    REQUIRE(at != std::string::npos);
    return html.substr(at, html.find("</svg>", at) - at);
  };
  auto count = [](const std::string &text, const std::string &what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos;
         at = text.find(what, at + 1))
      ++n;
    return n;
  };
  // Scatter: both times in the decade 10 .. 100 over x 80 .. 600 and
  // y 540 .. 20: measured 10 at x 80, predicted 20 at
  // 540 - 520 * log10(2) = 383.5; filled (training part).
  const std::string scatter = chart("model-check-scatter");
  CHECK(scatter.find("data-points=\"1\"") != std::string::npos);
  CHECK(count(scatter, "class=\"point\"") == 1);
  CHECK(scatter.find("<circle cx=\"80.0\" cy=\"383.5\" r=\"4.5\" "
                     "class=\"point\" data-figure=\"mine\"") !=
        std::string::npos);
  // Error along M: M 4 on an axis to 8 over x 80 .. 960 is at
  // 80 + 880 * 2 / 3 = 666.7; the ratio 2 on 0.1 .. 10 over y 280 .. 16 at
  // 280 - 264 * (log10(2) + 1) / 2 = 108.3.
  const std::string alongM = chart("model-check-error");
  CHECK(count(alongM, "class=\"point\"") == 1);
  CHECK(alongM.find("<circle cx=\"666.7\" cy=\"108.3\"") != std::string::npos);
  CHECK(html.find("1 predicted · 1 not predicted · 3 in the file") !=
        std::string::npos);
  // Bench: the synthetic label, one measured point, the other key named.
  CHECK(html.find("<b>SYNTHETIC</b>") != std::string::npos);
  CHECK(count(chart("bench-table-0"), "class=\"point\"") == 1);
  CHECK(html.find("Measured keys of no table of this bundle (not drawn): gone "
                  "ep4 ws512.") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  fs::remove_all(dir);
}
