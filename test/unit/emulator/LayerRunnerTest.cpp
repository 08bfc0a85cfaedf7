//===- LayerRunnerTest.cpp - whole configs and what --save writes ---------===//
//
// Shipped configurations run as one layer through the layer runner (what
// `moec run` does) at a small shape: an unfused network, the FHMoE network
// with its shared FP8 expert, and a fused MegaMoE network. With a save
// directory every file the runner documents (docs/cli.md) must exist with
// its dtype and shape, and the saved weights (checkpoint layout, global
// expert ids) and inputs must give the saved oracle output again through
// the reference oracle.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/LayerRunner.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/reference/Families.h"
#include "moec/reference/Npy.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <unistd.h>

using namespace moec;
using namespace moec::emu;

namespace {

/// The kernels of `config` in `table` (under tuning_tables/), in order;
/// an empty `config` is the table's first (tuned tables rename theirs).
std::vector<LayerKernel> configKernels(const std::string &table,
                                       const std::string &config) {
  TuningTable parsed;
  std::string error;
  const bool read = readTuningTable(
      std::string(MOEC_TUNING_TABLES_DIR) + "/" + table, parsed, error);
  INFO(error);
  REQUIRE(read);
  REQUIRE(!parsed.configs.empty());
  const TableConfig *found =
      config.empty() ? &parsed.configs.front() : parsed.findConfig(config);
  REQUIRE(found);
  std::vector<LayerKernel> kernels;
  for (const std::string &name : found->kernels) {
    const TableKernel *kernel = parsed.findKernel(name);
    REQUIRE(kernel);
    kernels.push_back({name, stageSpecOf(parsed, *kernel)});
  }
  return kernels;
}

/// The small problem and knobs the runner builds for the W13 kernel of
/// `kernels`.
StageShape smallProblem(const std::vector<LayerKernel> &kernels) {
  std::vector<StageSpec> specs;
  for (const LayerKernel &kernel : kernels)
    specs.push_back(kernel.spec);
  smallConfigSpecs(specs);
  for (const StageSpec &spec : specs)
    if (spec.stage == moec::abi::Stage::W13) {
      mlir::MLIRContext context;
      prepareContext(context);
      BuiltKernel kernel;
      std::string error;
      const bool built =
          mlir::succeeded(buildKernelIR(context, spec, kernel, error));
      INFO(error);
      REQUIRE(built);
      StageShape shape;
      REQUIRE(parseStageShape(kernel, shape).ok());
      return shape;
    }
  FAIL("no W13 kernel");
  return StageShape();
}

/// A fresh directory under the system's temporary directory.
std::string freshDirectory(const std::string &name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("moec-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

/// Runs the layer, saving into `dir`, and requires it to pass.
void runAndSave(const std::vector<LayerKernel> &kernels, int64_t tokens,
                const std::string &dir) {
  LayerOptions options;
  options.seed = 5;
  options.tokens = tokens;
  options.small = true;
  options.ep = smallProblem(kernels).ep;
  options.saveDir = dir;
  std::ostringstream out, err;
  const LayerVerdict verdict = runLayer(kernels, options, out, err);
  INFO(out.str() << err.str());
  REQUIRE(verdict == LayerVerdict::Pass);
}

/// Reads DIR/NAME.npy and requires `dtype` and `shape`.
ref::NpyArray expectArray(const std::string &dir, const std::string &name,
                          ref::NpyDtype dtype,
                          const std::vector<int64_t> &shape) {
  const std::string path = dir + "/" + name + ".npy";
  ref::NpyArray array;
  ref::Status status = ref::readNpy(path, array);
  INFO(status.message());
  REQUIRE(status.ok());
  status = ref::expectNpy(path, array, dtype, shape);
  INFO(status.message());
  CHECK(status.ok());
  return array;
}

/// The layer's files: weights in checkpoint layout over every expert, and
/// per rank its inputs and final output. Returns each rank's tokens.
std::vector<ref::TokenBatch>
expectLayerFiles(const std::string &dir, const StageShape &s, int64_t tokens) {
  using ref::NpyDtype;
  const int64_t H = s.hidden, I = s.intermediate, E = s.routedExperts(),
                K = s.topK;
  expectArray(dir, "w13_weight", NpyDtype::UInt8, {E, 2 * I, H / 2});
  expectArray(dir, "w13_scale", NpyDtype::UInt8, {E, 2 * I, H / 32});
  expectArray(dir, "w2_weight", NpyDtype::UInt8, {E, H, I / 2});
  expectArray(dir, "w2_scale", NpyDtype::UInt8, {E, H, I / 32});
  std::vector<ref::TokenBatch> batches;
  for (int64_t r = 0; r < s.ep; ++r) {
    const std::string rank = "rank" + std::to_string(r) + "_";
    ref::TokenBatch batch;
    batch.tokens = tokens;
    batch.hiddenBf16 =
        expectArray(dir, rank + "tokens_bf16", NpyDtype::UInt16, {tokens, H})
            .toVector<uint16_t>();
    expectArray(dir, rank + "a_codes", NpyDtype::UInt8, {tokens, H});
    expectArray(dir, rank + "a_scales", NpyDtype::UInt8, {tokens, H / 32});
    batch.topkIds =
        expectArray(dir, rank + "topk_ids", NpyDtype::Int32, {tokens, K})
            .toVector<int32_t>();
    batch.topkWeights =
        expectArray(dir, rank + "topk_weights", NpyDtype::Float32, {tokens, K})
            .toVector<float>();
    expectArray(dir, rank + "out_bf16", NpyDtype::UInt16, {tokens, H});
    expectArray(dir, rank + "oracle_out", NpyDtype::Float64, {tokens, H});
    batches.push_back(std::move(batch));
  }
  return batches;
}

/// Saved weights as the oracle reads them.
struct SavedWeights {
  explicit SavedWeights(const std::string &dir, const StageShape &s)
      : w13Elements(read(dir, "w13_weight")), w13Scales(read(dir, "w13_scale")),
        w2Elements(read(dir, "w2_weight")), w2Scales(read(dir, "w2_scale")),
        w13(ref::WeightFormat::Mxfp4, w13Elements.data(), w13Scales.data(),
            s.routedExperts(), 2 * s.intermediate, s.hidden),
        w2(ref::WeightFormat::Mxfp4, w2Elements.data(), w2Scales.data(),
           s.routedExperts(), s.hidden, s.intermediate) {}
  static std::vector<uint8_t> read(const std::string &dir,
                                   const std::string &name) {
    ref::NpyArray array;
    REQUIRE(ref::readNpy(dir + "/" + name + ".npy", array).ok());
    return array.toVector<uint8_t>();
  }
  std::vector<uint8_t> w13Elements, w13Scales, w2Elements, w2Scales;
  ref::DenseWeights w13, w2;
};

/// Relative L2 of the saved oracle output of `rank` against `want`.
double savedOracleError(const std::string &dir, int64_t rank,
                        const std::vector<double> &want) {
  ref::NpyArray saved;
  REQUIRE(ref::readNpy(dir + "/rank" + std::to_string(rank) + "_oracle_out.npy",
                       saved)
              .ok());
  const std::vector<double> got = saved.toVector<double>();
  REQUIRE(got.size() == want.size());
  double errSq = 0.0, refSq = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    errSq += (got[i] - want[i]) * (got[i] - want[i]);
    refSq += want[i] * want[i];
  }
  return relativeL2(errSq, refSq);
}

/// A config of a shipped table run at its small problem with `tokens` per
/// rank and saved into a fresh directory whose layer files were checked.
struct SavedLayer {
  std::vector<LayerKernel> kernels;
  StageShape shape;
  std::string dir;
  std::vector<ref::TokenBatch> batches;
};

SavedLayer runSaveAndCheck(const std::string &table, const std::string &config,
                           const std::string &dirName, int64_t tokens) {
  SavedLayer layer;
  layer.kernels = configKernels(table, config);
  layer.shape = smallProblem(layer.kernels);
  layer.dir = freshDirectory(dirName);
  runAndSave(layer.kernels, tokens, layer.dir);
  layer.batches = expectLayerFiles(layer.dir, layer.shape, tokens);
  return layer;
}

} // namespace

TEST_CASE("an unfused config saves its weights, inputs and output per rank",
          "[layer][save]") {
  const SavedLayer layer =
      runSaveAndCheck("flash_ep4.table", "unfused_m32_n256x256_w2", "unfused-save", 6);
  const StageShape &s = layer.shape;
  const std::string &dir = layer.dir;
  const std::vector<ref::TokenBatch> &batches = layer.batches;
  // Stage files: the quantised tokens, the sort's list, W13's
  // intermediate, W2's rows, the combine's input rows.
  using ref::NpyDtype;
  const int64_t routes = 6 * s.topK;
  REQUIRE(layer.kernels.front().spec.stage == moec::abi::Stage::Quant);
  const std::vector<uint8_t> quantCodes =
      expectArray(dir, "quant_codes", NpyDtype::UInt8, {6, s.hidden})
          .toVector<uint8_t>();
  const std::vector<uint8_t> quantScales =
      expectArray(dir, "quant_scales", NpyDtype::UInt8, {6, s.hidden / 32})
          .toVector<uint8_t>();
  for (int64_t r = 0; r < s.ep; ++r) {
    const std::string rank = "rank" + std::to_string(r) + "_";
    expectArray(dir, rank + "sort_sorted_route_ids", NpyDtype::Int32, {-1});
    expectArray(dir, rank + "w13_out_codes", NpyDtype::UInt8,
                {routes, s.intermediate});
    expectArray(dir, rank + "w2_out_bf16", NpyDtype::UInt16,
                {routes, s.hidden});
  }
  expectArray(dir, "combine_rows_bf16", NpyDtype::UInt16, {routes, s.hidden});

  // Every rank serves the same tokens; the saved checkpoint (global expert
  // ids) and inputs give the saved oracle output through the layer oracle,
  // up to the BF16 rounding of the W2 rows the kernels' layer keeps.
  SavedWeights weights(dir, s);
  ref::TpMoeConfig config;
  config.shape = {s.hidden, s.intermediate, s.experts, s.topK};
  config.gateUpInterleave = s.interleave;
  config.swigluLimit = s.swigluLimit;
  REQUIRE(config.swigluLimit > 0.0);
  ref::StageResults results;
  REQUIRE(
      ref::runTpMoe(config, weights.w13, weights.w2, batches[0], results).ok());
  // The quant kernel's tokens, which W13 read, are the oracle's input
  // quantisation of the saved BF16 tokens.
  CHECK(quantCodes == results.inputCodes);
  CHECK(quantScales == results.inputScales);
  const std::vector<double> want(results.output.begin(), results.output.end());
  for (int64_t r = 0; r < s.ep; ++r) {
    CHECK(batches[size_t(r)].topkIds == batches[0].topkIds);
    CHECK(savedOracleError(dir, r, want) < 1.0 / 128.0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the FHMoE config saves its shared FP8 expert", "[layer][save]") {
  const std::vector<LayerKernel> kernels =
      configKernels("dsv4_pro_tp8_fhmoe.table", /*config=*/"");
  const StageShape s = smallProblem(kernels);
  REQUIRE(s.sharedFp8);
  const std::string dir = freshDirectory("fhmoe-save");
  runAndSave(kernels, 16, dir);
  expectLayerFiles(dir, s, 16);
  using ref::NpyDtype;
  const int64_t H = s.hidden, I = s.intermediate;
  expectArray(dir, "shared_w13_weight", NpyDtype::UInt8, {2 * I, H});
  expectArray(dir, "shared_w13_scale", NpyDtype::UInt8, {2 * I, H / 32});
  expectArray(dir, "shared_w2_weight", NpyDtype::UInt8, {H, I});
  expectArray(dir, "shared_w2_scale", NpyDtype::UInt8, {H, I / 32});
  std::filesystem::remove_all(dir);
}

TEST_CASE("a fused config saves its weights, inputs and output per rank",
          "[layer][save][peer]") {
  const SavedLayer layer =
      runSaveAndCheck("flash_ep4.table", "fused_fs1024_m16_n256x256_w2", "fused-save", 8);
  const StageShape &s = layer.shape;
  const std::string &dir = layer.dir;
  const std::vector<ref::TokenBatch> &batches = layer.batches;
  using ref::NpyDtype;
  expectArray(dir, "rank0_recv_meta", NpyDtype::Int32, {-1, -1});
  expectArray(dir, "rank0_intermediate_codes", NpyDtype::UInt8,
              {-1, s.intermediate});

  // The oracle of the whole EP layer on the saved checkpoint and every
  // rank's saved tokens gives each rank's saved oracle output.
  SavedWeights weights(dir, s);
  ref::MegaMoeConfig config;
  config.shape = {s.hidden, s.intermediate, s.experts, s.topK};
  config.ep = s.ep;
  config.mTile = s.tileM;
  config.slotCapacity = s.ep * 8 * s.topK;
  config.swigluLimit = s.swigluLimit;
  std::vector<ref::MegaMoeRankResult> results;
  REQUIRE(
      ref::runMegaMoe(config, weights.w13, weights.w2, batches, results).ok());
  for (int64_t r = 0; r < s.ep; ++r) {
    const std::vector<float> &output = results[size_t(r)].stages.output;
    CHECK(savedOracleError(dir, r,
                           std::vector<double>(output.begin(), output.end())) ==
          0.0);
  }
  std::filesystem::remove_all(dir);
}
