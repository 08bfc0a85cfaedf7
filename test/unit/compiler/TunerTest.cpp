//===- TunerTest.cpp - the tuner's keys and the cost model's counts -------===//

#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/Tuner.h"
#include "moec/Compiler/TuningTable.h"

#include <catch2/catch.hpp>

namespace {

/// A spec with the six Flash classes of one EP size (one template row each).
moec::TuningTable flashSpec(int ep, int fixedCapacity) {
  const std::string e = std::to_string(ep);
  const std::string text =
      "moec-table 1\n"
      "problem p family=megamoe hidden=512 intermediate=256 experts=8 top_k=2 ep=" + e + "\n"
      "kernel a stage=w2 problem=p m=32 n=128\n"
      "config c kernels=a\n"
      "select network=n family=megamoe ep=" + e + " workspace=" +
      std::to_string(fixedCapacity) + " transport=fixed_slot\nrow m=1 config=c\n"
      "select network=n family=megamoe ep=" + e +
      " workspace=8192 transport=compact\nrow m=1 config=c\n"
      "select network=n family=megamoe ep=" + e +
      " workspace=16384 transport=compact\nrow m=1 config=c\n"
      "select network=t family=megamoe ep=" + e +
      " workspace=1024 transport=none\nrow m=8 config=c\nrow m=1024 config=c\n";
  moec::TuningTable table;
  std::string error;
  const bool parsed = moec::parseTuningTable("spec.table", text, table, error);
  INFO(error);
  REQUIRE(parsed);
  return table;
}

/// Flash EP4's W2 stage (H 5120, I 2304, 384 experts, top-6).
moec::GemmStageShape flashW2(int64_t tileM, int64_t tileN) {
  moec::GemmStageShape shape;
  shape.stage = moec::abi::Stage::W2;
  shape.hidden = 5120;
  shape.intermediate = 2304;
  shape.experts = 384;
  shape.topK = 6;
  shape.ep = 4;
  shape.tileM = tileM;
  shape.tileN = tileN;
  shape.waves = 4;
  return shape;
}

} // namespace

TEST_CASE("the seed's keys per Flash class", "[tuner]") {
  // The counts the Flash seed lists per (EP, workspace): 644 in all.
  moec::TuningTable ep2 = flashSpec(2, 512);
  moec::TuningTable ep4 = flashSpec(4, 1024);
  CHECK(moec::selectionKeys(ep2, ep2.selections[0]).size() == 142);
  CHECK(moec::selectionKeys(ep2, ep2.selections[1]).size() == 111);
  CHECK(moec::selectionKeys(ep2, ep2.selections[2]).size() == 112);
  CHECK(moec::selectionKeys(ep4, ep4.selections[0]).size() == 228);
  CHECK(moec::selectionKeys(ep4, ep4.selections[1]).size() == 25);
  CHECK(moec::selectionKeys(ep4, ep4.selections[2]).size() == 26);
  // Fixed slot: 1..64, then 6c and powers of two up to the capacity.
  std::vector<int64_t> fixed = moec::selectionKeys(ep4, ep4.selections[0]);
  CHECK(fixed.front() == 1);
  CHECK(fixed[63] == 64);
  CHECK(fixed[64] == 66);
  CHECK(fixed.back() == 1024);
  // Compact 8192 at EP4: 6c from 1026 to 1152, then 2048, 4096, 8192.
  std::vector<int64_t> compact = moec::selectionKeys(ep4, ep4.selections[1]);
  CHECK(compact.front() == 1026);
  CHECK(compact[21] == 1152);
  CHECK(std::vector<int64_t>(compact.begin() + 22, compact.end()) ==
        std::vector<int64_t>{2048, 4096, 8192});
  // Without a transport the spec's rows are the keys.
  CHECK(moec::selectionKeys(ep4, ep4.selections[3]) ==
        std::vector<int64_t>{8, 1024});
}

TEST_CASE("countTile: bytes and MFMAs of one W2 tile", "[tuner][cost]") {
  moec::GemmStageShape shape = flashW2(16, 128);
  const moec::TileCounts c = moec::countTile(shape);
  // 16 x 2304 FP8 + scales, 128 x 2304 E2M1 pairs + scales.
  CHECK(c.globalBytesRead == 16 * 2304 + 16 * 72 + 128 * 1152 + 128 * 72);
  CHECK(c.globalBytesWritten == 16 * 128 * 2);
  // 1 x 8 MFMAs of 16x16 over 2304 / 128 = 18 K steps.
  CHECK(c.scaledMfmas == 144);
  shape.stage = moec::abi::Stage::W13;
  shape.tileN = 64;
  // W13 reads gate and up: 128 weight rows over K = 5120.
  CHECK(moec::countTile(shape).scaledMfmas == 1 * 8 * 40);
}

TEST_CASE("tileGrid: balanced routing pads each expert's rows to the tile",
          "[tuner][cost]") {
  moec::GemmStageShape shape = flashW2(16, 256);
  // M = 1024 per rank: 24576 routes over 384 experts, all 96 local experts
  // active with 64 rows each: 4 tiles of 16 each.
  moec::TileGrid grid = moec::tileGrid(shape, 1024);
  CHECK(grid.rowsPerRank == 6144);
  CHECK(grid.activeExperts == Approx(96).epsilon(1e-9));
  CHECK(grid.mTiles == 96 * 4);
  CHECK(grid.nTiles == 20);
  // A 128-row tile pads 64 rows to 128 per expert.
  shape.tileM = 128;
  CHECK(moec::tileGrid(shape, 1024).paddedRows == 96 * 128);
  // M = 16: 384 routes; 96 (1 - (383/384)^384) = 60.7 experts expected.
  grid = moec::tileGrid(shape, 16);
  CHECK(grid.activeExperts == Approx(60.73).epsilon(1e-3));
  CHECK(grid.mTiles == 61);
  CHECK(moec::tileGrid(shape, 0).tiles() == 0);
}

TEST_CASE("choosing: refinements win by the margin, keys keep near-equal "
          "choices", "[tuner][choose]") {
  using moec::chooseCandidates;
  const size_t none = SIZE_MAX;
  // Grid candidates 0 and 1; 2 and 3 refine 0; 4 refines 2; 5 is rejected.
  const std::vector<size_t> parent = {none, none, 0, 0, 2, none};
  SECTION("a refinement must beat its parent by more than the margin") {
    const std::vector<std::vector<double>> us = {
        {100}, {150}, {98}, {96.5}, {90}, {}};
    // 3 % of 100: 96.5 wins (3.5 % faster), then its own refinements: none.
    CHECK(chooseCandidates(us, parent, 1, 0.03) == std::vector<size_t>{3});
    // With a 4 % margin no refinement of 0 qualifies.
    CHECK(chooseCandidates(us, parent, 1, 0.04) == std::vector<size_t>{0});
    // With no margin the fastest child (3) is taken; 4 refines 2, not 3.
    CHECK(chooseCandidates(us, parent, 1, 0.0) == std::vector<size_t>{3});
  }
  SECTION("refinements chain: a refinement of a refinement") {
    const std::vector<std::vector<double>> us = {
        {100}, {150}, {90}, {95}, {80}, {}};
    CHECK(chooseCandidates(us, parent, 1, 0.03) == std::vector<size_t>{4});
  }
  SECTION("the grid's fastest wins, ties to the earlier; a rejected "
          "candidate is never chosen") {
    const std::vector<std::vector<double>> us = {
        {100}, {100}, {101}, {101}, {101}, {}};
    CHECK(chooseCandidates(us, parent, 1, 0.03) == std::vector<size_t>{0});
    const std::vector<std::vector<double>> rejected = {{}, {}, {}, {}, {}, {}};
    CHECK(chooseCandidates(rejected, parent, 1, 0.03) ==
          std::vector<size_t>{none});
  }
  SECTION("a key keeps the previous key's choice within the margin") {
    // Key 0: 0 wins. Key 1: 1 is 2 % faster than 0: 0 kept. Key 2: 1 is
    // 10 % faster: 1. Key 3: 0 is 1 % faster than 1 again: 1 kept.
    const std::vector<size_t> gridOnly = {none, none};
    const std::vector<std::vector<double>> us = {{10, 100, 100, 99},
                                                 {20, 98, 90, 100}};
    CHECK(chooseCandidates(us, gridOnly, 4, 0.03) ==
          std::vector<size_t>({0, 0, 1, 1}));
    // Without the margin every key takes its fastest.
    CHECK(chooseCandidates(us, gridOnly, 4, 0.0) ==
          std::vector<size_t>({0, 1, 1, 0}));
  }
}
