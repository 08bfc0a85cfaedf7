#include "moec/bundle.h"
#include "moec/selection.h"

#include "test_support.h"

#include <catch2/catch.hpp>

using namespace moec::rt;
using namespace moec::test;

namespace {

std::unique_ptr<Bundle> openSample(TempDir &dir) {
  std::string error;
  REQUIRE(writeBundle(dir.file("o.moeb"), sampleManifest().dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("o.moeb"), error);
  REQUIRE(bundle);
  return bundle;
}

Selection selectKey(const Bundle &bundle, uint32_t ep, uint32_t workspace, uint32_t m) {
  TableHandle handle;
  std::string error;
  INFO(error);
  REQUIRE(bundle.selector().resolveTable("flash", ep, workspace, handle, error));
  return bundle.selector().select(handle, m);
}

} // namespace

TEST_CASE("an override replaces and adds single rows, never the whole table", "[override]") {
  TempDir dir;
  auto bundle = openSample(dir);
  // Base ep4 ws1024 rows: 6->0, 12->1, 24->1, 64->2.
  const char *overrides = R"({"selection": [
      {"network": "flash", "ep": 4, "workspace": 1024,
       "rows": [{"m": 12, "config": "large"}, {"m": 32, "config": 0}]}]})";
  OverrideReport report;
  std::string error;
  REQUIRE(bundle->applySelectionOverrides(overrides, report, error));
  CHECK(report.replaced == 1);
  CHECK(report.added == 1);
  CHECK(report.unchanged == 0);
  REQUIRE(report.changes.size() == 2);
  CHECK(report.changes[0].kind == OverrideChange::Kind::Replaced);
  CHECK(report.changes[0].oldConfig == 1);
  CHECK(report.changes[0].newConfig == 2);
  CHECK(report.changes[1].kind == OverrideChange::Kind::Added);

  // Untouched rows keep their configs; the override rows take effect.
  CHECK(selectKey(*bundle, 4, 1024, 6).config == 0);
  CHECK(selectKey(*bundle, 4, 1024, 12).config == 2);
  CHECK(selectKey(*bundle, 4, 1024, 24).config == 1);
  CHECK(selectKey(*bundle, 4, 1024, 32).config == 0);
  CHECK(selectKey(*bundle, 4, 1024, 64).config == 2);
  const auto &rows = bundle->selector().tables()[0].rows;
  REQUIRE(rows.size() == 5);
  CHECK(rows[3].m == 32);
  // Nearest now sees the new row: 28 is a tie between 24 and 32 -> 32.
  CHECK(selectKey(*bundle, 4, 1024, 28).rowM == 32);
  // Other tables untouched.
  CHECK(selectKey(*bundle, 4, 16384, 512).config == 2);
  CHECK(selectKey(*bundle, 2, 512, 1).config == 0);
  // The shipped manifest is still what the file says.
  CHECK(bundle->manifest().selection[0].rows.size() == 4);
}

TEST_CASE("an override may add a new table when it says everything", "[override]") {
  TempDir dir;
  auto bundle = openSample(dir);
  OverrideReport report;
  std::string error;
  CHECK_FALSE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 8, "workspace": 256, "rows": [{"m": 4, "config": 0}]}])",
      report, error));
  CHECK(error == "override selection[0] (flash ep8 ws256): no such table in the bundle, so "
                 "family, transport and above_max are required to add it");
  REQUIRE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 8, "workspace": 256, "family": "megamoe",
           "transport": "fixed-slot", "above_max": "error", "rows": [{"m": 4, "config": 0}]}])",
      report, error));
  CHECK(report.tablesAdded == 1);
  CHECK(report.added == 1);
  CHECK(selectKey(*bundle, 8, 100, 4).config == 0);
  CHECK(selectKey(*bundle, 8, 100, 5).status == SelectStatus::Miss);
}

TEST_CASE("bad overrides are refused and change nothing", "[override]") {
  TempDir dir;
  auto bundle = openSample(dir);
  OverrideReport report;
  std::string error;
  auto unchanged = [&] {
    CHECK(bundle->selector().tables()[0].rows.size() == 4);
    CHECK(selectKey(*bundle, 4, 1024, 12).config == 1);
  };
  CHECK_FALSE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 4, "workspace": 1024,
           "rows": [{"m": 12, "config": "nope"}]}])",
      report, error));
  CHECK(error == "selection[0].rows[0].config: no configuration with id 'nope'");
  unchanged();
  CHECK_FALSE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 4, "workspace": 1024, "rows": [{"m": 12, "config": 9}]}])",
      report, error));
  CHECK(error.find("config index 9 but the bundle has 3 configurations") != std::string::npos);
  unchanged();
  CHECK_FALSE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 4, "workspace": 1024, "transport": "compact",
           "rows": [{"m": 12, "config": 0}]}])",
      report, error));
  CHECK(error == "override selection[0] (flash ep4 ws1024): transport 'compact' conflicts "
                 "with the bundle's 'fixed-slot'");
  unchanged();
  CHECK_FALSE(bundle->applySelectionOverrides(
      R"([{"network": "flash", "ep": 4, "workspace": 1024,
           "rows": [{"m": 12, "config": 0}, {"m": 12, "config": 2}]}])",
      report, error));
  CHECK(error.find("key m 12 is overridden twice") != std::string::npos);
  unchanged();
  CHECK_FALSE(bundle->applySelectionOverrides("[", report, error));
  CHECK(error.rfind("invalid JSON", 0) == 0);
  unchanged();
  CHECK_FALSE(bundle->applySelectionOverridesFile(dir.file("missing.json"), report, error));
  CHECK(error.find("missing.json: cannot open") != std::string::npos);
  unchanged();
}

TEST_CASE("override from a file; a same-config row is reported as unchanged", "[override]") {
  TempDir dir;
  auto bundle = openSample(dir);
  writeTextFile(dir.file("o.json"), R"({"selection": [{"network": "flash", "ep": 4,
      "workspace": 1024, "rows": [{"m": 6, "config": 0}]}]})");
  OverrideReport report;
  std::string error;
  REQUIRE(bundle->applySelectionOverridesFile(dir.file("o.json"), report, error));
  CHECK(report.unchanged == 1);
  CHECK(report.replaced + report.added == 0);
}

TEST_CASE("mergeSelectionOverrides on plain structs", "[override]") {
  std::vector<SelectionTable> tables(1);
  tables[0].network = "flash";
  tables[0].ep = 2;
  tables[0].workspace = 512;
  tables[0].rows = {{1, 0}, {8, 1}};
  SelectionTableOverride override;
  override.network = "flash";
  override.ep = 2;
  override.workspace = 512;
  override.rows = {{4, 1}, {8, 0}};
  OverrideReport report;
  std::string error;
  REQUIRE(mergeSelectionOverrides(tables, {override}, 2, report, error));
  REQUIRE(tables[0].rows.size() == 3);
  CHECK(tables[0].rows[1].m == 4);
  CHECK(tables[0].rows[2].config == 0);
  // Different workspace is a different key: a new table would be needed.
  override.workspace = 1024;
  CHECK_FALSE(mergeSelectionOverrides(tables, {override}, 2, report, error));
  CHECK(tables.size() == 1);
}
