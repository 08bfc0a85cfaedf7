//===- TuneCommand.cpp - moec tune SPEC -o TABLE --csv CANDIDATES ---------===//
//
// docs/tuning.md: candidates compiled in parallel (through the compile
// cache), the resource gate, the cost model's ranking (its per-tile inputs
// counted on the emulator unless --analytic-counts), the table with one
// model-ranked row per key and a CSV of every candidate.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"
#include "EmulatedTileCounter.h"

#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/Tuner.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <string>
#include <unistd.h>

namespace {

struct TuneArgs {
  std::string spec;
  std::string output;
  std::string csv;
  int device = -1;
  unsigned jobs = 0;
  bool quiet = false;
  std::string cacheDir = moec::CompileCache::defaultDirectory();
  bool noCache = false;
  bool analyticCounts = false;
};

int runTune(const TuneArgs &args) {
  using namespace moec;
  const auto start = std::chrono::steady_clock::now();
  if (args.device >= 0)
    std::cerr << "moec: --device " << args.device
              << ": timings are not available (moec tune does not time "
                 "candidates on a device yet); ranking with the cost model "
              << kCostModelName << ", so every row is model-ranked\n";
  TuningTable spec;
  std::string error;
  if (!readTuningTable(args.spec, spec, error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  TuneOptions options;
  options.jobs = args.jobs;
  if (!args.noCache) {
    options.cacheDirectory = args.cacheDir;
    options.cacheMaxBytes = CompileCache::defaultMaxBytes();
  }
  if (!args.quiet && ::isatty(STDERR_FILENO))
    options.progress = [](size_t done, size_t total, const std::string &symbol) {
      std::cerr << "\r\033[Kcompiling candidates [" << done << "/" << total
                << "] " << symbol.substr(0, 90) << std::flush;
      if (done == total)
        std::cerr << "\r\033[K" << std::flush;
    };
  cli::EmulatedTileCounter counter;
  if (!args.analyticCounts)
    options.countTile = [&counter](const StageSpec &spec, const GemmStageShape &,
                                   TileCounts &counts, std::string &error) {
      return counter.count(spec, counts, error);
    };
  if (!args.quiet && ::isatty(STDERR_FILENO))
    options.countProgress = [](size_t done, size_t total) {
      std::cerr << "\r\033[Kcounting tiles on the emulator [" << done << "/"
                << total << "]" << std::flush;
      if (done == total)
        std::cerr << "\r\033[K" << std::flush;
    };
  TuneResult result;
  const CompileStatus status = tuneSpec(spec, args.spec, options, result, error);
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? cli::kBadInput
                                             : cli::kCheckFailed;
  }
  if (!cli::writeFileAtomically(args.output, result.table.data(),
                                result.table.size(), error) ||
      (!args.csv.empty() &&
       !cli::writeFileAtomically(args.csv, result.csv.data(), result.csv.size(),
                                 error))) {
    std::cerr << "moec: " << error << "\n";
    return cli::kCheckFailed;
  }
  if (args.quiet)
    return cli::kSuccess;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (const TuneClassSummary &c : result.classes) {
    std::cout << c.key << ": " << c.keys << " keys, " << c.candidates
              << " candidates, " << c.rejected << " rejected";
    for (const auto &[reason, count] : c.rejections)
      std::cout << " (" << reason << " " << count << ")";
    std::cout << ", " << c.distinctConfigs << " configurations chosen\n";
  }
  std::cout << "moec: tuned " << args.spec << " into " << args.output << ": "
            << result.rows << " rows, " << result.distinctConfigs
            << " distinct configurations, " << result.compiledKernels
            << " candidate kernels compiled, "
            << (args.analyticCounts
                    ? std::string("analytic tile counts")
                    : std::to_string(result.countedKernels) +
                          " GEMM tiles counted on the emulator (" +
                          std::to_string(result.countFallbacks) +
                          " analytic fallbacks)")
            << ", in " << seconds << " s\n";
  return cli::kSuccess;
}

} // namespace

void addTuneCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App *cmd = app.add_subcommand(
      "tune", "Rank candidate tilings of a tuning spec with the cost model "
              "and write the table (docs/tuning.md)");
  cmd->add_option("spec", args->spec,
                  "tuning spec: a table whose selections name template "
                  "configurations (docs/tuning.md)")
      ->required();
  cmd->add_option("-o,--output", args->output, "tuning table to write")
      ->required();
  cmd->add_option("--csv", args->csv,
                  "write every candidate (resources, rejection reason, "
                  "predicted time) to this CSV");
  cmd->add_option("--device", args->device,
                  "time candidates on GPU N (not available yet: the cost "
                  "model ranks them and says so)");
  cmd->add_option("-j,--jobs", args->jobs,
                  "kernels compiled in parallel (0: every core)")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "print nothing on success");
  cmd->add_option("--cache-dir", args->cacheDir, "compile cache")
      ->capture_default_str();
  cmd->add_flag("--no-cache", args->noCache, "neither read nor write the cache");
  cmd->add_flag("--analytic-counts", args->analyticCounts,
                "rank with the analytic per-tile counts instead of counting "
                "one tile of every GEMM kernel on the emulator "
                "(docs/cost-model.md)");
  cmd->callback([args, &exitStatus] { exitStatus = runTune(*args); });
}
