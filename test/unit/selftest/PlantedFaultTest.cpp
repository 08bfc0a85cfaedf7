// Planted faults on real emulated kernel runs: a one-configuration table is
// compiled at the small shape and run through runSelftest() on the
// emulated device, with each fault planted in what the device computes
// (its output buffer after the kernels, the weights it was given, the
// activation its W13 kernel was compiled with, the intermediate between
// W13 and W2). The self-test's verdict
// must fail every such case, for the fault's own reason; the fault-free
// run passes. Also: a --save directory holds the table's weights, and a
// case recomputed from the saved files alone gives the saved oracle output.

#include "moec/Selftest/Selftest.h"
#include "moec/Selftest/Oracle.h"

#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/Harness/StageKernel.h"
#include "moec/bundle.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Routing.h"

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

using namespace moec;
using namespace moec::selftest;
namespace fs = std::filesystem;

namespace {

/// Flash's draft problem with one configuration (W13 gate/up interleave
/// 16) and a GPT-OSS twin: the same kernels with GPT-OSS's SwiGLU.
std::string tableText(bool gptOss) {
  const std::string activation =
      gptOss ? " gpt_oss_swiglu=true swiglu_limit=7" : "";
  return "moec-table 1\n"
         "problem draft family=tp hidden=5120 intermediate=640 experts=128 "
         "top_k=3\n"
         "kernel quant stage=quant problem=draft waves=4\n"
         "kernel sort stage=sort problem=draft m_tile=16 waves=4\n"
         "kernel w13 stage=w13 problem=draft m=16 n=128 k=256 waves=2 "
         "orientation=b_major gate_up_interleave=16" +
         activation +
         "\n"
         "kernel w2 stage=w2 problem=draft m=16 n=256 k=128 waves=2 "
         "orientation=b_major\n"
         "kernel combine stage=combine problem=draft waves=4\n"
         "config decode kernels=quant,sort,w13,w2,combine\n"
         "select network=draft family=tp ep=1 workspace=64 transport=none "
         "above_max=largest\n"
         "row m=16 config=decode\n";
}

/// A scratch directory removed at the end.
struct Scratch {
  fs::path path;
  Scratch() {
    path = fs::temp_directory_path() /
           ("moec-planted-fault-test-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

/// The table compiled at the small shape into a bundle file.
std::string compileBundle(const Scratch &scratch, bool gptOss) {
  const std::string name = gptOss ? "gpt-oss" : "silu";
  TuningTable table;
  std::string error;
  REQUIRE(parseTuningTable(name + ".table", tableText(gptOss), table, error));
  const CompileOptions options = emu::smallShapeCompileOptions();
  options.rewriteTable(table);
  CompiledTable compiled;
  INFO(error);
  REQUIRE(compileTable(table, options, compiled, error) == CompileStatus::Ok);
  BundleContents contents = buildBundleContents(table, compiled);
  const std::string path = (scratch.path / (name + ".moeb")).string();
  REQUIRE(rt::writeBundle(path, rt::serializeManifest(contents.manifest),
                          contents.objects, error));
  return path;
}

/// One case line of the self-test, parsed.
struct CaseLine {
  bool pass = false;
  std::string text;
  double relL2 = 0;
  long long nonFinite = 0, overBound = 0, zeroRowsWrong = 0, unwritten = 0;
};

long long field(const std::string &line, const std::string &name) {
  std::smatch match;
  REQUIRE(std::regex_search(line, match, std::regex(" " + name + "=(-?[0-9]+)")));
  return std::stoll(match[1]);
}

struct Run {
  SelftestStatus status = SelftestStatus::BadInput;
  std::vector<CaseLine> cases;
  std::vector<std::string> errors;
};

/// runSelftest on the bundle's own (small) code objects on the emulated
/// device, cases up to M 16 (M 1 and 16: the table's one row).
Run runOn(const std::string &bundle, const PlantedFaults &faults,
          const std::string &activation = "", const std::string &save = "",
          bool saveWeights = false) {
  SelftestOptions options;
  options.bundle = bundle;
  options.device = "emulated";
  options.real = true;
  options.maxM = 16;
  options.activation = activation;
  options.faults = faults;
  options.saveDir = save;
  options.saveWeights = saveWeights;
  Run run;
  SelftestOutput output;
  output.line = [&](const std::string &line) {
    if (line.rfind("PASS ", 0) && line.rfind("FAIL ", 0))
      return;
    CaseLine c;
    c.pass = line.rfind("PASS ", 0) == 0;
    c.text = line;
    std::smatch match;
    REQUIRE(std::regex_search(line, match, std::regex(" rel_l2=([^ ]+)")));
    c.relL2 = std::stod(match[1]);
    c.nonFinite = field(line, "non_finite");
    c.overBound = field(line, "over_bound");
    c.zeroRowsWrong = field(line, "zero_rows_wrong");
    c.unwritten = field(line, "unwritten");
    run.cases.push_back(c);
  };
  output.error = [&](const std::string &error) { run.errors.push_back(error); };
  run.status = runSelftest(options, output);
  return run;
}

/// Every case failed, each for a wrong value within the finite output
/// (over its own bound and over the relative L2 bound), nothing else.
void requireWrongValues(const Run &run) {
  INFO((run.errors.empty() ? "" : run.errors.front()));
  REQUIRE(run.status == SelftestStatus::Failed);
  REQUIRE(run.cases.size() == 2);
  for (const CaseLine &c : run.cases) {
    INFO(c.text);
    CHECK_FALSE(c.pass);
    CHECK(c.overBound > 0);
    CHECK(c.relL2 > kLayerRelL2Bound);
    CHECK(c.nonFinite == 0);
    CHECK(c.unwritten == 0);
    CHECK(c.zeroRowsWrong == 0);
  }
}

/// The first token of `batch` with a valid route.
int64_t firstRoutedToken(const ref::TokenBatch &batch, int64_t topK,
                         int64_t experts) {
  for (size_t i = 0; i < batch.topkIds.size(); ++i)
    if (ref::isValidExpert(batch.topkIds[i], experts))
      return int64_t(i) / topK;
  return -1;
}

} // namespace

TEST_CASE("planted faults in what the emulated device computes fail the "
          "self-test for their own reason",
          "[selftest][fault][emulated]") {
  Scratch scratch;
  const std::string silu = compileBundle(scratch, false);

  // The fault-free control: every case passes.
  const Run clean = runOn(silu, {});
  INFO((clean.errors.empty() ? "" : clean.errors.front()));
  REQUIRE(clean.status == SelftestStatus::Passed);
  REQUIRE(clean.cases.size() == 2);
  for (const CaseLine &c : clean.cases) {
    INFO(c.text);
    CHECK(c.pass);
    CHECK(c.overBound == 0);
  }

  SECTION("a NaN (0x7FC0) in one valid output row, written after the kernels") {
    PlantedFaults faults;
    int planted = 0;
    faults.afterForwards = [&](std::vector<harness::Rank> &ranks,
                               const std::vector<ref::TokenBatch> &batches,
                               uint32_t, const harness::TableFacts &facts,
                               std::string &error) {
      const int64_t token = firstRoutedToken(
          batches[0], facts.problem.topK, facts.problem.experts);
      if (token < 0) {
        error = "no routed token to plant the NaN in";
        return false;
      }
      const uint16_t nan = 0x7FC0;
      harness::DeviceMemory memory(*ranks[0].device);
      // The copy runs the pending launches first: the NaN lands after
      // the kernels wrote the row.
      ++planted;
      return memory.upload(static_cast<uint16_t *>(ranks[0].out) +
                               token * facts.problem.hidden + 5,
                           &nan, sizeof(nan), error);
    };
    const Run run = runOn(silu, faults);
    REQUIRE(run.status == SelftestStatus::Failed);
    REQUIRE(planted == 2);
    REQUIRE(run.cases.size() == 2);
    for (const CaseLine &c : run.cases) {
      INFO(c.text);
      CHECK_FALSE(c.pass);
      CHECK(c.nonFinite == 1);
      CHECK(c.unwritten == 0);
    }
  }

  SECTION("W13's gate and up halves swapped in the uploaded weights") {
    PlantedFaults faults;
    faults.uploadedWeights = [](const harness::TableFacts &facts,
                                harness::HostLayerWeights &host) {
      // Rows come in blocks of G gate rows then G up rows (G = I when not
      // interleaved): swap the halves of every block, elements and scales.
      const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
      const int64_t G = facts.interleave > 0 ? facts.interleave : I;
      auto swapHalves = [&](std::vector<uint8_t> &rows, int64_t rowBytes) {
        for (int64_t block = 0; block < host.experts * 2 * I; block += 2 * G)
          std::swap_ranges(rows.begin() + block * rowBytes,
                           rows.begin() + (block + G) * rowBytes,
                           rows.begin() + (block + G) * rowBytes);
      };
      swapHalves(host.w13, H / 2);
      swapHalves(host.w13Scales, H / 32);
    };
    requireWrongValues(runOn(silu, faults));
  }

  SECTION("one expert's W2 scales one exponent off in the uploaded weights") {
    PlantedFaults faults;
    faults.uploadedWeights = [](const harness::TableFacts &facts,
                                harness::HostLayerWeights &host) {
      // Expert 0: the smallest M case routes its one token there (its
      // routes are seeded; the control above ran the same tokens).
      const size_t perExpert = host.w2Scales.size() / size_t(host.experts);
      (void)facts;
      for (size_t i = 0; i < perExpert; ++i)
        ++host.w2Scales[i];
    };
    const Run run = runOn(silu, faults);
    REQUIRE(run.status == SelftestStatus::Failed);
    // Every failed case fails on wrong values; at least the M 16 case,
    // whose 48 routes reach every expert, fails.
    bool m16Failed = false;
    for (const CaseLine &c : run.cases) {
      INFO(c.text);
      if (c.pass)
        continue;
      CHECK(c.overBound > 0);
      CHECK(c.nonFinite == 0);
      m16Failed |= c.text.find(" m=16 ") != std::string::npos;
    }
    CHECK(m16Failed);
  }

  SECTION("the intermediate's FP8 scales off by one exponent between W13 "
          "and W2") {
    // The HIP library that plants it: the emulated device, with the first
    // 64 scales of W2's A (the intermediate W13 wrote) incremented before
    // W2 runs (intermediate_fault_hip.cpp).
    const char *previous = std::getenv("MOEC_EMULATED_HIP_LIBRARY");
    const std::string restore = previous ? previous : "";
    ::setenv("MOEC_EMULATED_HIP_LIBRARY", MOEC_INTERMEDIATE_FAULT_HIP, 1);
    ::setenv("MOEC_INTERMEDIATE_FAULT_BYTES", "64", 1);
    const Run run = runOn(silu, {});
    ::unsetenv("MOEC_INTERMEDIATE_FAULT_BYTES");
    ::setenv("MOEC_EMULATED_HIP_LIBRARY", restore.c_str(), 1);
    requireWrongValues(run);
  }

  SECTION("SiLU compiled where the table says GPT-OSS SwiGLU") {
    // The kernels compute SiLU; the oracle is told the table's activation.
    requireWrongValues(runOn(silu, {}, "gpt-oss-swiglu"));
    // And the other way round: GPT-OSS kernels checked as SiLU.
    const std::string gptOss = compileBundle(scratch, true);
    const Run gptOssRun = runOn(gptOss, {}, "silu");
    REQUIRE(gptOssRun.status == SelftestStatus::Failed);
    for (const CaseLine &c : gptOssRun.cases) {
      INFO(c.text);
      CHECK_FALSE(c.pass);
      CHECK(c.overBound > 0);
    }
  }
}

namespace {

ref::NpyArray readArray(const fs::path &path) {
  ref::NpyArray array;
  const ref::Status status = ref::readNpy(path.string(), array);
  INFO(status.message());
  REQUIRE(status.ok());
  return array;
}

} // namespace

TEST_CASE("--save with --save-weights: a case recomputes from its files alone",
          "[selftest][save][emulated]") {
  Scratch scratch;
  const std::string bundle = compileBundle(scratch, false);
  const fs::path dir = scratch.path / "saved";
  const Run run = runOn(bundle, {}, "", dir.string(), /*saveWeights=*/true);
  REQUIRE(run.status == SelftestStatus::Passed);

  std::ifstream in(dir / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  REQUIRE(manifest["shape"] == "real");
  REQUIRE(manifest["weights"].size() == 1);
  const nlohmann::json &weights = manifest["weights"][0];
  const fs::path weightsDir = dir / weights["weights"].get<std::string>();
  const nlohmann::json &entry = manifest["cases"].back();
  REQUIRE(entry["weights"] == weights["weights"]);
  const fs::path caseDir = dir / entry["case"].get<std::string>();

  // The checkpoint-layout tensors and the case's inputs, nothing else.
  const ref::NpyArray w13 = readArray(weightsDir / "w13_weight.npy"),
                      w13Scale = readArray(weightsDir / "w13_scale.npy"),
                      w2 = readArray(weightsDir / "w2_weight.npy"),
                      w2Scale = readArray(weightsDir / "w2_scale.npy");
  REQUIRE(w13.shape.size() == 3);
  const int64_t E = w13.shape[0], twoI = w13.shape[1], H = w13.shape[2] * 2;
  const int64_t I = twoI / 2;
  REQUIRE(w2.shape == std::vector<int64_t>{E, H, I / 2});
  const ref::NpyArray hidden = readArray(caseDir / "hidden.npy"),
                      ids = readArray(caseDir / "topk_ids.npy"),
                      routeWeights = readArray(caseDir / "topk_weights.npy"),
                      oracle = readArray(caseDir / "oracle.npy");
  const int64_t M = hidden.shape[0], K = ids.shape[1];
  REQUIRE(M == entry["m"].get<int64_t>());

  ref::TokenBatch batch;
  batch.tokens = M;
  batch.hiddenBf16 = hidden.toVector<uint16_t>();
  batch.topkIds = ids.toVector<int32_t>();
  batch.topkWeights = routeWeights.toVector<float>();
  const ref::DenseWeights w13Source(ref::WeightFormat::Mxfp4, w13.bytes.data(),
                                    w13Scale.bytes.data(), E, twoI, H);
  const ref::DenseWeights w2Source(ref::WeightFormat::Mxfp4, w2.bytes.data(),
                                   w2Scale.bytes.data(), E, H, I);
  ref::TpMoeConfig config;
  config.shape = {H, I, E, K};
  config.mTile = 16;
  config.mode = ref::OracleMode::QuantFaithful;
  config.gateUpInterleave = weights["gate_up_interleave"].get<int64_t>();
  ref::StageResults results;
  REQUIRE(ref::runTpMoe(config, w13Source, w2Source, batch, results).ok());
  // The oracle over the saved files is the saved oracle, bit for bit.
  CHECK(results.output == oracle.toVector<float>());
}
