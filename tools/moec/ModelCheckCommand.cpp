//===- ModelCheckCommand.cpp - moec model-check ---------------------------===//
//
// docs/cost-model.md, "Against published measurements": the cost model's
// predictions for every published figure and timed AITER row, compared
// with the measurements; --fit fits the model's constants on the training
// part and reports both parts with them. The logic is in
// moec/Compiler/ModelCheck.h.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"
#include "moec/Harness/EmulatedTileCounter.h"

#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/ModelCheck.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

struct ModelCheckArgs {
  std::string figures = "tuning_tables/published/figures.csv";
  std::vector<std::string> tables = {"tuning_tables/flash_ep2.table",
                                     "tuning_tables/flash_ep4.table",
                                     "tuning_tables/flash_tp4.table"};
  std::vector<std::string> aiter = {
      "tuning_tables/aiter/dsv4_fp8fp4_tuned_fmoe.csv"};
  std::string model = moec::kCostModelName;
  std::string csv, json;
  bool fit = false;
  bool analyticCounts = false;
  unsigned jobs = 0;
  std::string cacheDir = moec::CompileCache::defaultDirectory();
  bool noCache = false;
  /// The chip or part to compile and predict for (--target); empty: the
  /// default chip.
  std::string target;
};

bool writeText(const std::string &path, const std::string &text) {
  std::string error;
  if (moec::cli::writeFileAtomically(path, text.data(), text.size(), error))
    return true;
  std::cerr << "moec: " << error << "\n";
  return false;
}

void printFitted(const moec::CostModelParameters &p) {
  std::cout << "fitted on the training part: launch_overhead_us "
            << p.launchOverheadUs << ", other_kernel_us " << p.otherKernelUs
            << ", hbm_efficiency " << p.hbmEfficiency
            << ", cu_bytes_per_second " << p.cuBytesPerSecond
            << ", tile_round_us " << p.tileRoundUs
            << ", other_issue_per_simd_cycle " << p.otherIssuePerSimdCycle
            << ", lds_throughput_scale " << p.ldsThroughputScale
            << ", peer_bytes_per_second " << p.peerBytesPerSecond
            << ", exchange_fixed_us " << p.exchangeFixedUs
            << ", random_routing " << (p.randomRouting ? "true" : "false")
            << "\n";
}

int runModelCheck(const ModelCheckArgs &args) {
  using namespace moec;
  CostModelParameters parameters;
  if (!costModelParameters(args.model, parameters)) {
    std::cerr << "moec: --model: unknown model '" << args.model
              << "' (moec-cost-2, moec-cost-3)\n";
    return cli::kBadInput;
  }
  const target::TargetInfo *chip = cli::targetOrReport(args.target);
  if (!chip)
    return cli::kBadInput;
  ModelCheckOptions options;
  options.compile.target = &CompileTarget::of(*chip);
  options.figuresPath = args.figures;
  options.tablePaths = args.tables;
  options.aiterPaths = args.aiter;
  options.compile.jobs = args.jobs;
  // A kernel that spills still has a time; the comparison takes it.
  options.compile.allowSpills = true;
  if (!args.noCache) {
    options.compile.cacheDirectory = args.cacheDir;
    options.compile.cacheMaxBytes = CompileCache::defaultMaxBytes();
  }
  harness::EmulatedTileCounter counter;
  if (!args.analyticCounts)
    options.countTile = [&counter](const StageSpec &spec, const GemmStageShape &,
                                   TileCounts &counts, std::string &error) {
      return counter.count(spec, counts, error);
    };
  ModelCheckData data;
  std::string error;
  const CompileStatus status = loadModelCheck(options, data, error);
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? cli::kBadInput
                                             : cli::kCheckFailed;
  }
  std::string modelName = args.model;
  if (args.fit) {
    // The starting model's report first, then the fitted one's.
    predictEntries(data, parameters);
    std::cout << modelCheckText(data, summarize(data), modelName) << "\n";
    parameters = fitCostModel(data, parameters);
    modelName += " fitted";
    printFitted(parameters);
  }
  predictEntries(data, parameters);
  const ModelCheckSummary summary = summarize(data);
  std::cout << modelCheckText(data, summary, modelName);
  if (!args.csv.empty() && !writeText(args.csv, modelCheckCsv(data)))
    return cli::kBadInput;
  if (!args.json.empty() &&
      !writeText(args.json, modelCheckJson(summary, modelName)))
    return cli::kBadInput;
  return cli::kSuccess;
}

} // namespace

void addModelCheckCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<ModelCheckArgs>();
  CLI::App *cmd = app.add_subcommand(
      "model-check",
      "compare the cost model's predictions with published MI355X times "
      "(docs/cost-model.md)");
  cmd->add_option("--figures", args->figures,
                  "published figures CSV (empty: none)")
      ->capture_default_str();
  cmd->add_option("--table", args->tables,
                  "tuning tables whose selections the figures read")
      ->capture_default_str();
  cmd->add_option("--aiter", args->aiter,
                  "AITER tuned CSVs with us1/us2 stage times")
      ->capture_default_str();
  cmd->add_option("--model", args->model, "moec-cost-2 or moec-cost-3")
      ->capture_default_str();
  cmd->add_flag("--fit", args->fit,
                "fit the model's constants on the training part first and "
                "report both parts with the fitted values");
  cmd->add_option("--csv", args->csv, "write one line per figure to this CSV");
  cmd->add_option("--json", args->json, "write the summary to this JSON file");
  cmd->add_flag("--analytic-counts", args->analyticCounts,
                "the analytic per-tile counts instead of counting one tile "
                "of every GEMM kernel on the emulator");
  cmd->add_option("-j,--jobs", args->jobs,
                  "kernels compiled and counted in parallel (0: every core)")
      ->capture_default_str();
  cmd->add_option("--cache-dir", args->cacheDir, "compile cache")
      ->capture_default_str();
  cmd->add_flag("--no-cache", args->noCache, "neither read nor write the cache");
  moec::cli::addTargetOption(cmd, args->target,
                             "predict for: the kernels and the AITER rows "
                             "compile for it and its facts bound the model");
  cmd->callback([args, &exitStatus] { exitStatus = runModelCheck(*args); });
}
