//===- SmallTableTest.cpp - one small shape per configuration ------------===//
//
// `moec compile --small` (smallTable) shrinks the problems of a table to a
// small shape. A configuration whose kernels come from several problems (an
// AITER table's quant kernel serves every intermediate size of its hidden
// size) must find all of them at one shape, or its layer cannot be built;
// and kernels whose symbol names no H (the sort) must not become two
// kernels of one symbol: one shape for the whole table.
//
//===----------------------------------------------------------------------===//

#include "moec/Compiler/AiterCsv.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/Harness/StageKernel.h"
#include "moec/target/target_info.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace moec;
using namespace moec::emu;

namespace {

const TableProblem &problemOf(const TuningTable &table,
                              const std::string &kernelName) {
  const TableKernel *kernel = table.findKernel(kernelName);
  REQUIRE(kernel);
  const TableProblem *problem = table.findProblem(kernel->problem);
  REQUIRE(problem);
  return *problem;
}

/// Every kernel of every configuration sees one hidden and one
/// intermediate size; returns the number of configurations checked.
size_t checkConfigsShareOneShape(const TuningTable &table) {
  for (const TableConfig &config : table.configs) {
    INFO("config " << config.name);
    REQUIRE(!config.kernels.empty());
    const TableProblem &first = problemOf(table, config.kernels.front());
    for (const std::string &name : config.kernels) {
      INFO("kernel " << name);
      const TableProblem &problem = problemOf(table, name);
      CHECK(problem.hidden == first.hidden);
      CHECK(problem.intermediate == first.intermediate);
    }
  }
  return table.configs.size();
}

TuningTable aiterTable(const std::string &file) {
  const std::string path =
      std::string(MOEC_TUNING_TABLES_DIR) + "/aiter/" + file;
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<AiterCsvRow> rows;
  std::string error;
  REQUIRE(parseAiterCsv(path, text.str(), rows, error));
  AiterCompileOptions options;
  options.skipUnsupported = true;
  TuningTable table;
  std::vector<rt::AiterRowInfo> manifestRows;
  std::vector<std::string> unsupported;
  INFO(error);
  REQUIRE(buildAiterTable(rows, target::kGfx950, options, table, manifestRows,
                          unsupported, error));
  return table;
}

} // namespace

TEST_CASE("--small gives every kernel of a configuration one shape",
          "[tables][small]") {
  // GLM-5's FP4 table: one quant kernel for H 6144 serves the problems of
  // I 2048, 1024, 512 and 256, whose tiles differ.
  for (const char *file :
       {"glm5_fp4_tuned_fmoe.csv", "dsv3_fp4_tuned_fmoe.csv",
        "dsv4_fp8fp4_tuned_fmoe.csv", "kimik3_a4w4_tuned_fmoe.csv"}) {
    INFO(file);
    TuningTable table = aiterTable(file);
    // Configurations whose kernels come from more than one problem: what a
    // per-problem shrink gets wrong. GLM-5's table has them.
    size_t mixed = 0;
    for (const TableConfig &config : table.configs) {
      std::set<std::string> problems;
      for (const std::string &name : config.kernels)
        problems.insert(problemOf(table, name).name);
      mixed += problems.size() > 1;
    }
    if (std::string(file) == "glm5_fp4_tuned_fmoe.csv")
      CHECK(mixed > 0);
    smallTable(table);
    CHECK(checkConfigsShareOneShape(table) > 0);
    for (const TableProblem &problem : table.problems) {
      CHECK(problem.hidden <= 2048);
      CHECK(problem.hidden == problem.intermediate);
      CHECK(problem.hidden == table.problems.front().hidden);
    }
  }
}

TEST_CASE("--small shrinks every problem of a table to one shape",
          "[tables][small]") {
  TuningTable table;
  for (const char *name : {"wide", "narrow", "other"}) {
    TableProblem problem;
    problem.name = name;
    problem.family = "tp";
    problem.hidden = 6144;
    problem.intermediate = std::string(name) == "wide" ? 2048 : 256;
    problem.experts = std::string(name) == "other" ? 32 : 256;
    problem.topK = 8;
    table.problems.push_back(problem);
  }
  auto kernel = [&](const char *name, abi::Stage stage, const char *problem,
                    std::map<std::string, std::string> knobs) {
    TableKernel k;
    k.name = name;
    k.stage = stage;
    k.problem = problem;
    k.knobs = std::move(knobs);
    table.kernels.push_back(k);
  };
  // `quant` belongs to "wide" but also serves "narrow" (the AITER import's
  // deduplication). "other" shares nothing, but its sort would become the
  // same small kernel as "wide"'s (4 experts, top-4, m_tile 32), whose
  // symbol names no H: it must not differ from it in H.
  kernel("quant", abi::Stage::Quant, "wide", {{"waves", "4"}});
  kernel("sort_wide", abi::Stage::Sort, "wide", {{"m_tile", "32"}});
  kernel("sort_other", abi::Stage::Sort, "other", {{"m_tile", "32"}});
  kernel("w13_wide", abi::Stage::W13, "wide", {{"m", "32"}, {"n", "512"}});
  kernel("w13_narrow", abi::Stage::W13, "narrow", {{"m", "32"}, {"n", "64"}});
  kernel("w13_other", abi::Stage::W13, "other", {{"m", "32"}, {"n", "64"}});
  table.configs.push_back({"a", {"quant", "sort_wide", "w13_wide"}});
  table.configs.push_back({"b", {"quant", "sort_wide", "w13_narrow"}});
  table.configs.push_back({"c", {"sort_other", "w13_other"}});
  smallTable(table);
  REQUIRE(checkConfigsShareOneShape(table) == 3);
  // Twice the table's largest tile: n 512 -> 1024, for every problem.
  for (const TableProblem &problem : table.problems) {
    INFO(problem.name);
    CHECK(problem.hidden == 1024);
    CHECK(problem.intermediate == 1024);
    CHECK(problem.experts == 4);
    CHECK(problem.topK == 4);
  }
}

TEST_CASE("moec run --small keeps a W2 K tail where every kernel accepts it",
          "[small][ktail]") {
  // DeepSeek V4's stage 2 t32x128x256 at I 384 (one K step and a tail of
  // 128) behind a W13 of tile.n 64 or 256.
  auto spec = [](abi::Stage stage, int64_t inter, const char *n) {
    StageSpec s;
    s.stage = stage;
    s.fields = {{"hidden", "7168"}, {"intermediate", std::to_string(inter)},
                {"experts", "384"}, {"top_k", "6"}, {"ep", "1"},
                {"m", "32"},        {"n", n}};
    return s;
  };
  auto smallIntermediates = [](std::vector<StageSpec> specs) {
    smallConfigSpecs(specs);
    std::set<int64_t> inter;
    for (const StageSpec &s : specs) {
      CHECK(specInteger(s, "hidden", 0) == 512);
      inter.insert(specInteger(s, "intermediate", 0));
    }
    return inter;
  };
  // 2 max(n, k) = 512, plus the tail: 640 = 2 x 256 + 128.
  CHECK(smallIntermediates({spec(abi::Stage::W13, 384, "64"),
                            spec(abi::Stage::W2, 384, "128")}) ==
        std::set<int64_t>{640});
  // A W13 of tile.n 256 does not divide 640: the tail is dropped.
  CHECK(smallIntermediates({spec(abi::Stage::W13, 384, "256"),
                            spec(abi::Stage::W2, 384, "128")}) ==
        std::set<int64_t>{512});
  // tile.k dividing I: I = 2 max(n, k) as before.
  CHECK(smallIntermediates({spec(abi::Stage::W13, 768, "64"),
                            spec(abi::Stage::W2, 768, "128")}) ==
        std::set<int64_t>{512});
}
