//===- ShippedTablesTest.cpp - every shipped kernel runs on the emulator --===//
//
// Walks tuning_tables/*.table, rebuilds every kernel with the same knobs at
// a small problem (smallStageSpec), and requires that the emulator supports
// every op of its IR. Quant, W2 and W13 kernels are also executed and
// compared with the oracle, and fused MegaMoE configs run whole over
// emulated EP ranks, with their quant kernel (the CI subset of "every
// shipped configuration passes").
//
//===----------------------------------------------------------------------===//

#include "moec/Compiler/StageBuilder.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/Harness/PeerHarness.h"
#include "moec/Harness/StageHarness.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

using namespace moec;
using namespace moec::emu;

namespace {

std::vector<std::string> shippedTables() {
  std::vector<std::string> paths;
  for (const auto &entry :
       std::filesystem::directory_iterator(MOEC_TUNING_TABLES_DIR))
    if (entry.path().extension() == ".table")
      paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

} // namespace

TEST_CASE("every op of every shipped kernel is supported by the emulator",
          "[tables]") {
  mlir::MLIRContext context;
  prepareContext(context);
  const std::vector<std::string> tables = shippedTables();
  REQUIRE(!tables.empty());
  int kernels = 0;
  for (const std::string &path : tables) {
    TuningTable table;
    std::string error;
    INFO(path);
    REQUIRE(readTuningTable(path, table, error));
    for (const TableKernel &kernel : table.kernels) {
      INFO("kernel " << kernel.name << " (" << abi::stageName(kernel.stage)
                     << ")");
      BuiltKernel built;
      bool builtOk = mlir::succeeded(
          buildKernelIR(context, smallStageSpec(stageSpecOf(table, kernel)), built, error));
      INFO(error);
      REQUIRE(builtOk);
      std::set<std::string> opNames;
      built.func->walk([&](mlir::Operation *op) {
        opNames.insert(op->getName().getStringRef().str());
      });
      std::string names;
      for (const std::string &name : opNames)
        names += name + " ";
      INFO("ops: " << names);
      std::string unsupported;
      CHECK(mlir::succeeded(checkSupported(
          mlir::cast<mlir::gpu::GPUFuncOp>(built.func), unsupported)));
      INFO(unsupported);
      CHECK(unsupported.empty());
      ++kernels;
    }
  }
  CHECK(kernels > 0);
}

namespace {

/// Runs every unfused kernel of `stage` in the shipped tables through its
/// harness at a small shape (`tokens` tokens, 10% invalid routing slots, an
/// empty tile) and requires it to pass.
void checkShippedStage(abi::Stage stage, uint64_t seed,
                       int64_t tokens) {
  DataOptions options;
  options.seed = seed;
  options.tokens = tokens;
  options.invalidFraction = 0.1;
  options.emptyTiles = 1;
  mlir::MLIRContext context;
  prepareContext(context);
  int ran = 0, skipped = 0;
  for (const std::string &path : shippedTables()) {
    TuningTable table;
    std::string error;
    REQUIRE(readTuningTable(path, table, error));
    for (const TableKernel &kernel : table.kernels) {
      if (kernel.stage != stage)
        continue;
      const StageSpec spec = stageSpecOf(table, kernel);
      // Fused peer stages run as whole configs: the [peer] case below.
      if (specIsFused(spec))
        continue;
      INFO(path << ": kernel " << kernel.name);
      BuiltKernel built;
      REQUIRE(mlir::succeeded(
          buildKernelIR(context, smallStageSpec(spec), built, error)));
      std::unique_ptr<StageHarness> harness =
          StageHarness::create(built, error);
      if (!harness) {
        WARN(path << ": kernel " << kernel.name << " not run: " << error);
        ++skipped;
        continue;
      }
      LayerData data;
      StageOutcome outcome;
      bool ok = mlir::succeeded(
          harness->check(data, 0, options, LaunchConfig(), outcome, error));
      INFO(error);
      REQUIRE(ok);
      INFO(outcome.summary);
      CHECK(outcome.pass);
      ++ran;
    }
  }
  CHECK(ran > 0);
  CHECK(ran >= skipped);
}

} // namespace

TEST_CASE("every shipped quant kernel matches the oracle bit for bit at a "
          "small shape",
          "[tables][quant]") {
  checkShippedStage(abi::Stage::Quant, /*seed=*/104, /*tokens=*/33);
}

TEST_CASE("every shipped W2 kernel matches the oracle at a small shape",
          "[tables][w2]") {
  checkShippedStage(abi::Stage::W2, /*seed=*/101, /*tokens=*/48);
}

TEST_CASE("every shipped W13 kernel matches the oracle at a small shape",
          "[tables][w13]") {
  checkShippedStage(abi::Stage::W13, /*seed=*/102, /*tokens=*/24);
}

TEST_CASE("every shipped fused MegaMoE config matches the oracle at a small "
          "shape",
          "[tables][peer]") {
  mlir::MLIRContext context;
  prepareContext(context);
  int ran = 0;
  for (const std::string &path : shippedTables()) {
    TuningTable table;
    std::string error;
    REQUIRE(readTuningTable(path, table, error));
    for (const TableConfig &config : table.configs) {
      std::vector<StageSpec> specs;
      bool fused = false;
      for (const std::string &name : config.kernels) {
        const TableKernel *kernel = table.findKernel(name);
        REQUIRE(kernel);
        specs.push_back(stageSpecOf(table, *kernel));
        fused |= specIsFused(specs.back());
      }
      if (!fused)
        continue;
      INFO(path << ": config " << config.name);
      smallConfigSpecs(specs);
      std::vector<BuiltKernel> kernels(specs.size());
      // Stage 1, stage 2, the combine, a dispatch-only kernel, quant.
      const BuiltKernel *stage[5] = {nullptr, nullptr, nullptr, nullptr,
                                     nullptr};
      for (size_t i = 0; i < specs.size(); ++i) {
        INFO("stage " << abi::stageName(specs[i].stage));
        bool built =
            mlir::succeeded(buildKernelIR(context, specs[i], kernels[i], error));
        INFO(error);
        REQUIRE(built);
        const bool dispatchOnly = specText(specs[i], "dispatch") == "only";
        stage[dispatchOnly                ? 3
              : specs[i].stage == abi::Stage::Quant ? 4
              : specs[i].stage == abi::Stage::W13   ? 0
              : specs[i].stage == abi::Stage::W2    ? 1
                                          : 2] = &kernels[i];
      }
      // Every shipped config quantises its own input.
      REQUIRE(stage[4]);
      REQUIRE(stage[0]);
      REQUIRE(stage[1]);
      REQUIRE(stage[2]);
      const int64_t ep = specInteger(specs[0], "ep", 1);
      PeerLayerOptions options;
      options.seed = 103;
      options.tokensPerRank.assign(size_t(ep), 12);
      options.tokensPerRank.back() = 0; // an empty rank
      options.invalidFraction = 0.1;
      PeerLayerOutcome outcome;
      bool ok = mlir::succeeded(
          runPeerLayer(*stage[0], *stage[1], *stage[2], options, outcome, error,
                       stage[3], stage[4]));
      INFO(error);
      REQUIRE(ok);
      INFO(outcome.summary);
      CHECK(outcome.codesCompared > 0);
      CHECK(outcome.inputMismatches == 0);
      CHECK(outcome.inputUnwritten == 0);
      CHECK(outcome.pass);
      ++ran;
    }
  }
  CHECK(ran > 0);
}
