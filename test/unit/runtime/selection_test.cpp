#include "moec/bundle.h"
#include "moec/selection.h"

#include "test_support.h"

#include <catch2/catch.hpp>

using namespace moec::rt;
using namespace moec::test;

namespace {

SelectionTable makeTable(std::vector<uint32_t> ms, AboveMaxPolicy policy,
                         uint32_t workspace = 1024, uint32_t ep = 4) {
  SelectionTable table;
  table.network = "flash";
  table.ep = ep;
  table.workspace = workspace;
  table.transport = Transport::FixedSlot;
  table.aboveMax = policy;
  for (size_t i = 0; i < ms.size(); ++i)
    table.rows.push_back({ms[i], static_cast<uint32_t>(i)});
  return table;
}

Selector buildSelector(std::vector<SelectionTable> tables, size_t configs = 16) {
  Selector selector;
  std::string error;
  INFO(error);
  REQUIRE(Selector::build(std::move(tables), configs, selector, error));
  return selector;
}

TableHandle resolve(const Selector &selector, uint32_t ep, uint32_t workspace) {
  TableHandle handle;
  std::string error;
  INFO(error);
  REQUIRE(selector.resolveTable("flash", ep, workspace, handle, error));
  return handle;
}

} // namespace

TEST_CASE("nearest row wins, ties choose the larger", "[selection]") {
  Selector selector = buildSelector({makeTable({6, 12, 24, 64}, AboveMaxPolicy::Largest)});
  TableHandle table = resolve(selector, 4, 1024);
  struct Case {
    uint32_t m, expectedRowM;
  } cases[] = {
      {1, 6},   {5, 6},   {6, 6},   {8, 6},   {9, 12}, // 9: tie 6|12 -> 12
      {11, 12}, {12, 12}, {17, 12}, {18, 24},          // 18: tie 12|24 -> 24
      {23, 24}, {43, 24}, {44, 64},                    // 44: tie 24|64 -> 64
      {63, 64}, {64, 64},
  };
  for (const Case &c : cases) {
    Selection s = selector.select(table, c.m);
    INFO("m " << c.m);
    CHECK(s.status == SelectStatus::Hit);
    CHECK(s.rowM == c.expectedRowM);
    CHECK(s.exact == (c.m == c.expectedRowM));
  }
  // The row's config comes along.
  CHECK(selector.select(table, 20).config == 2);
}

TEST_CASE("m = 0 (an empty rank) picks the smallest row", "[selection]") {
  Selector selector = buildSelector({makeTable({6, 12}, AboveMaxPolicy::Error)});
  Selection s = selector.select(resolve(selector, 4, 1024), 0);
  CHECK(s.status == SelectStatus::Hit);
  CHECK(s.row == 0);
  CHECK(s.rowM == 6);
  CHECK_FALSE(s.exact);
}

TEST_CASE("above the largest row: policy largest is a flagged fallback", "[selection]") {
  Selector selector = buildSelector({makeTable({6, 12, 64}, AboveMaxPolicy::Largest)});
  TableHandle table = resolve(selector, 4, 1024);
  Selection s = selector.select(table, 65);
  CHECK(s.status == SelectStatus::Fallback);
  CHECK(s.rowM == 64);
  CHECK(s.row == 2);
  CHECK(selector.select(table, UINT32_MAX).status == SelectStatus::Fallback);
  CHECK(selector.select(table, 64).status == SelectStatus::Hit);
}

TEST_CASE("above the largest row: policy error is a miss", "[selection]") {
  Selector selector = buildSelector({makeTable({6, 12, 64}, AboveMaxPolicy::Error)});
  TableHandle table = resolve(selector, 4, 1024);
  CHECK(selector.select(table, 64).status == SelectStatus::Hit);
  CHECK(selector.select(table, 65).status == SelectStatus::Miss);
  CHECK(selector.select(table, 100000).status == SelectStatus::Miss);
  CHECK(selector.select(TableHandle{}, 6).status == SelectStatus::Miss); // bad handle
}

TEST_CASE("a fused table refuses m above its capacity whatever above_max says",
          "[selection]") {
  SelectionTable fused = makeTable({6, 192, 768}, AboveMaxPolicy::Largest);
  fused.network = "flash";
  fused.maxTokens = 1024;
  Selector selector = buildSelector({fused});
  TableHandle table = resolve(selector, 4, 1024);
  // Between the largest row and the capacity: the declared fallback.
  CHECK(selector.select(table, 768).status == SelectStatus::Hit);
  Selection atCapacity = selector.select(table, 1024);
  CHECK(atCapacity.status == SelectStatus::Fallback);
  CHECK(atCapacity.rowM == 768);
  CHECK(selector.select(table, 1025).status == SelectStatus::Miss);
  CHECK(selector.select(table, 5000).status == SelectStatus::Miss);
  CHECK(describeSelectionMiss(fused, 5000) ==
        "flash ep4 ws1024: m 5000 is above the table's capacity of 1024 "
        "tokens per rank (its fused kernels' max_tokens)");
  // The last row's range names no fallback beyond the capacity when the
  // row sits at it.
  fused.rows.back().m = 1024;
  Selector atCap = buildSelector({fused});
  CHECK_FALSE(atCap.rowRanges(resolve(atCap, 4, 1024)).back().servesAboveMax);
  // An unfused table with the same rows still falls back above them.
  Selector unfused = buildSelector({makeTable({6, 192, 768}, AboveMaxPolicy::Largest)});
  CHECK(unfused.select(resolve(unfused, 4, 1024), 5000).status ==
        SelectStatus::Fallback);
  CHECK(describeSelectionMiss(makeTable({6, 64}, AboveMaxPolicy::Error), 65) ==
        "flash ep4 ws1024: m 65 is above the largest row (m 64) and above_max "
        "is 'error'");
}

TEST_CASE("a row above a fused table's capacity is refused", "[selection]") {
  SelectionTable fused = makeTable({6, 2048}, AboveMaxPolicy::Largest);
  fused.maxTokens = 1024;
  std::string error;
  Selector selector;
  CHECK_FALSE(Selector::build({fused}, 16, selector, error));
  CHECK(error == "selection[0] (flash ep4 ws1024) row 1 (m 2048): above the "
                 "table's capacity of 1024 tokens per rank, so unreachable");
}

TEST_CASE("workspace picks the smallest class that is large enough", "[selection]") {
  Selector selector = buildSelector({makeTable({8}, AboveMaxPolicy::Largest, 16384),
                                     makeTable({8}, AboveMaxPolicy::Largest, 1024),
                                     makeTable({8}, AboveMaxPolicy::Largest, 8192),
                                     makeTable({8}, AboveMaxPolicy::Largest, 512, 2)});
  CHECK(resolve(selector, 4, 0).index == 1);
  CHECK(resolve(selector, 4, 1024).index == 1);
  CHECK(resolve(selector, 4, 1025).index == 2);
  CHECK(resolve(selector, 4, 8192).index == 2);
  CHECK(resolve(selector, 4, 8193).index == 0);
  CHECK(resolve(selector, 4, 16384).index == 0);
  CHECK(resolve(selector, 2, 100).index == 3);

  TableHandle handle;
  std::string error;
  CHECK_FALSE(selector.resolveTable("flash", 4, 16385, handle, error));
  CHECK(error == "no selection table for network 'flash' ep 4 with workspace class >= 16385 "
                 "(largest is 16384)");
  CHECK_FALSE(selector.resolveTable("flash", 8, 1, handle, error));
  CHECK(error == "no selection table for network 'flash' ep 8");
  CHECK_FALSE(selector.resolveTable("pro", 4, 1, handle, error));
  CHECK(error == "no selection table for network 'pro' ep 4");
}

TEST_CASE("row ranges cover every m exactly once and agree with select", "[selection]") {
  for (AboveMaxPolicy policy : {AboveMaxPolicy::Largest, AboveMaxPolicy::Error}) {
    Selector selector =
        buildSelector({makeTable({1, 2, 3, 6, 7, 12, 100, 101, 1024}, policy)});
    TableHandle table = resolve(selector, 4, 1024);
    std::vector<RowRange> ranges = selector.rowRanges(table);
    REQUIRE(ranges.size() == 9);
    CHECK(ranges.front().mLow == 0);
    CHECK(ranges.back().mHigh == 1024);
    CHECK(ranges.back().servesAboveMax == (policy == AboveMaxPolicy::Largest));
    for (size_t i = 0; i < ranges.size(); ++i) {
      CHECK(ranges[i].mLow <= ranges[i].m);
      CHECK(ranges[i].m <= ranges[i].mHigh);
      if (i > 0)
        CHECK(ranges[i].mLow == ranges[i - 1].mHigh + 1);
    }
    // Spot values: 6|7 split, 12|100 tie at 56.
    CHECK(ranges[3].mHigh == 6);
    CHECK(ranges[5].mHigh == 55);
    CHECK(ranges[6].mLow == 56);
    for (uint32_t m = 0; m <= 1100; ++m) {
      Selection s = selector.select(table, m);
      if (m > 1024) {
        CHECK(s.status == (policy == AboveMaxPolicy::Largest ? SelectStatus::Fallback
                                                             : SelectStatus::Miss));
        continue;
      }
      REQUIRE(s.status == SelectStatus::Hit);
      const RowRange &range = ranges[s.row];
      REQUIRE(range.mLow <= m);
      REQUIRE(m <= range.mHigh);
    }
  }
}

TEST_CASE("nearest rule agrees with a brute-force reference", "[selection]") {
  const std::vector<uint32_t> ms = {3, 4, 9, 10, 33, 64, 65, 200, 511};
  Selector selector = buildSelector({makeTable(ms, AboveMaxPolicy::Largest)});
  TableHandle table = resolve(selector, 4, 1024);
  for (uint32_t m = 0; m <= 511; ++m) {
    size_t best = 0;
    for (size_t i = 1; i < ms.size(); ++i) {
      const uint32_t dBest = m > ms[best] ? m - ms[best] : ms[best] - m;
      const uint32_t d = m > ms[i] ? m - ms[i] : ms[i] - m;
      if (d <= dBest) // ties go to the larger (later) row
        best = i;
    }
    INFO("m " << m);
    REQUIRE(selector.select(table, m).row == best);
  }
}

TEST_CASE("invalid tables are refused at open, naming table and row", "[selection]") {
  std::string error;
  Selector selector;
  CHECK_FALSE(Selector::build({makeTable({6, 12, 12}, AboveMaxPolicy::Largest)}, 16, selector,
                              error));
  CHECK(error == "selection[0] (flash ep4 ws1024) row 2: duplicate m 12 (row 1 has it; one is "
                 "unreachable)");
  CHECK_FALSE(Selector::build({makeTable({6, 24, 12}, AboveMaxPolicy::Largest)}, 16, selector,
                              error));
  CHECK(error == "selection[0] (flash ep4 ws1024) row 2: rows not sorted by m (m 12 after m 24)");
  CHECK_FALSE(Selector::build({makeTable({0, 6}, AboveMaxPolicy::Largest)}, 16, selector, error));
  CHECK(error.find("row 0: m must be >= 1") != std::string::npos);
  CHECK_FALSE(Selector::build({makeTable({6, 12}, AboveMaxPolicy::Largest)}, 1, selector, error));
  CHECK(error == "selection[0] (flash ep4 ws1024) row 1 (m 12): config index 1 but the bundle "
                 "has 1 configurations");
  CHECK_FALSE(Selector::build({makeTable({}, AboveMaxPolicy::Largest)}, 16, selector, error));
  CHECK(error == "selection[0] (flash ep4 ws1024): no rows");
  CHECK_FALSE(Selector::build({makeTable({6}, AboveMaxPolicy::Largest),
                               makeTable({8}, AboveMaxPolicy::Error)},
                              16, selector, error));
  CHECK(error == "selection[1] (flash ep4 ws1024): same key as selection[0], so one of them is "
                 "unreachable");
  CHECK(selector.tables().empty()); // failures leave the selector untouched
}

TEST_CASE("a bundle with an unreachable row cannot be written or opened", "[selection]") {
  std::vector<uint8_t> out;
  std::string error;
  CHECK_FALSE(serializeBundle(manifestWithRows({6, 6}).dump(), sampleCodeObjects(), out, error));
  CHECK(error == "manifest: selection[0] (flash ep4 ws1024) row 1: duplicate m 6 (row 0 has "
                 "it; one is unreachable)");
  auto manifest = sampleManifest();
  manifest["selection"][0]["rows"][1]["config"] = 9;
  CHECK_FALSE(serializeBundle(manifest.dump(), sampleCodeObjects(), out, error));
  CHECK(error.find("selection[0] (flash ep4 ws1024) row 1 (m 12): config index 9") !=
        std::string::npos);
  manifest = sampleManifest();
  manifest["selection"][1]["above_max"] = "smallest";
  CHECK_FALSE(serializeBundle(manifest.dump(), sampleCodeObjects(), out, error));
  CHECK(error == "manifest: selection[1].above_max: unknown policy 'smallest' (expected largest "
                 "or error)");
}

TEST_CASE("selection through an opened bundle", "[selection]") {
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("s.moeb"), sampleManifest().dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("s.moeb"), error);
  REQUIRE(bundle);
  const Selector &selector = bundle->selector();
  TableHandle fixedSlot = resolve(selector, 4, 1000);
  TableHandle compact = resolve(selector, 4, 9000);
  CHECK(selector.tables()[fixedSlot.index].transport == Transport::FixedSlot);
  CHECK(selector.tables()[compact.index].transport == Transport::Compact);
  CHECK(selector.select(fixedSlot, 10).config == 1);
  CHECK(selector.select(fixedSlot, 1000).status == SelectStatus::Fallback);
  CHECK(selector.select(compact, 1000).rowM == 512);
  CHECK(selector.select(compact, 5000).status == SelectStatus::Miss);
}

TEST_CASE("a table's max_tokens round-trips through the manifest and is checked",
          "[selection][manifest]") {
  nlohmann::json json = manifestWithRows({6, 64}, "largest");
  json["selection"][0]["max_tokens"] = 1024;
  Manifest manifest;
  std::string error;
  INFO(error);
  REQUIRE(parseManifest(json.dump(), 2, manifest, error));
  CHECK(manifest.selection[0].maxTokens == 1024);
  Manifest again;
  REQUIRE(parseManifest(serializeManifest(manifest), 2, again, error));
  CHECK(again.selection[0].maxTokens == 1024);
  // Absent: no capacity.
  REQUIRE(parseManifest(manifestWithRows({6, 64}, "largest").dump(), 2, manifest,
                        error));
  CHECK(manifest.selection[0].maxTokens == 0);
  // A row above it is refused naming the row.
  json["selection"][0]["max_tokens"] = 32;
  CHECK_FALSE(parseManifest(json.dump(), 2, manifest, error));
  CHECK(error.find("row 1 (m 64): above the table's capacity of 32") !=
        std::string::npos);
}

TEST_CASE("a row's provenance round-trips through the manifest and is checked",
          "[selection][manifest]") {
  nlohmann::json json = manifestWithRows({6, 64}, "largest");
  json["selection"][0]["rows"][0].update(
      {{"provenance", "model-ranked"}, {"model", "moec-cost-1"},
       {"predicted_us", 12.5}});
  json["selection"][0]["rows"][1].update(
      {{"provenance", "measured"}, {"device", "MI355X"},
       {"method", "hip-graph-median"}, {"date", "2026-11-30"},
       {"measured_us", 201.25}});
  Manifest manifest;
  std::string error;
  INFO(error);
  REQUIRE(parseManifest(json.dump(), 2, manifest, error));
  const RowProvenance &ranked = manifest.selection[0].rows[0].provenance;
  CHECK(ranked.present);
  CHECK(ranked.kind == Provenance::ModelRanked);
  CHECK(ranked.model == "moec-cost-1");
  CHECK(ranked.predictedUs == 12.5);
  CHECK(ranked.measuredUs < 0);
  const RowProvenance &measured = manifest.selection[0].rows[1].provenance;
  CHECK(measured.kind == Provenance::Measured);
  CHECK(measured.device == "MI355X");
  CHECK(measured.measuredUs == 201.25);
  CHECK(measured.predictedUs < 0);
  const std::string text = serializeManifest(manifest);
  Manifest again;
  REQUIRE(parseCanonicalManifest(text, 2, again, error));
  CHECK(again.selection[0].rows[0].provenance == ranked);
  CHECK(again.selection[0].rows[1].provenance == measured);

  // A model-ranked row cannot carry a measurement, a measured row needs one.
  nlohmann::json bad = json;
  bad["selection"][0]["rows"][0]["measured_us"] = 3;
  CHECK_FALSE(parseManifest(bad.dump(), 2, manifest, error));
  CHECK(error == "selection[0].rows[0].measured_us: only a measured row has it");
  bad = json;
  bad["selection"][0]["rows"][1].erase("measured_us");
  CHECK_FALSE(parseManifest(bad.dump(), 2, manifest, error));
  CHECK(error == "selection[0].rows[1].measured_us: expected a time in "
                 "microseconds >= 0");
  bad = json;
  bad["selection"][0]["rows"][0].erase("provenance");
  CHECK_FALSE(parseManifest(bad.dump(), 2, manifest, error));
  CHECK(error == "selection[0].rows[0].model: needs a provenance");
}
