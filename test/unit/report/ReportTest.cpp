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
  fs::remove_all(dir);
}
