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
#include "moec/Harness/DeviceTimer.h"
#include "moec/Harness/EmulatedTileCounter.h"

#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/CompileTarget.h"
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
  double tieMargin = 0.03;
  unsigned refinementRounds = 2;
  size_t timedPerKey = 3;
  std::string measurements;
  std::string predictions;
  /// The chip or part to tune for (--target); empty: the default chip.
  std::string target;
  std::string model = moec::kCostModelName;
};

int runTune(const TuneArgs &args) {
  using namespace moec;
  const auto start = std::chrono::steady_clock::now();
  TuningTable spec;
  std::string error;
  if (!readTuningTable(args.spec, spec, error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  const target::TargetInfo *chip = cli::targetOrReport(args.target);
  if (!chip)
    return cli::kBadInput;
  TuneOptions options;
  options.target = &CompileTarget::of(*chip);
  options.costModel = args.model;
  options.jobs = args.jobs;
  options.space.tieMargin = args.tieMargin;
  options.space.refinementRounds = args.refinementRounds;
  options.timedPerKey = args.timedPerKey;
  if (args.device >= 0)
    options.timeCandidates = harness::makeDeviceTimer(args.device);
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
  harness::EmulatedTileCounter counter;
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
  if (args.device >= 0 && !result.timingUnavailable.empty())
    std::cerr << "moec: --device " << args.device << ": "
              << result.timingUnavailable << "; ranking with the cost model "
              << args.model << ", so every row is model-ranked\n";
  for (const std::string &note : result.timingNotes)
    std::cerr << "moec: --device " << args.device << ": " << note << "\n";
  if (!cli::writeFileAtomically(args.output, result.table.data(),
                                result.table.size(), error) ||
      (!args.csv.empty() &&
       !cli::writeFileAtomically(args.csv, result.csv.data(), result.csv.size(),
                                 error)) ||
      (!args.measurements.empty() &&
       !cli::writeFileAtomically(args.measurements, result.measurementsCsv.data(),
                                 result.measurementsCsv.size(), error)) ||
      (!args.predictions.empty() &&
       !cli::writeFileAtomically(args.predictions, result.predictionsCsv.data(),
                                 result.predictionsCsv.size(), error))) {
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
              << " candidates (" << c.refinements << " refinements"
              << (c.selectionWide
                      ? ", " + std::to_string(c.selectionWide) + " selection-wide"
                      : std::string())
              << "), "
              << c.rejected << " rejected";
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
            << ", " << result.measuredRows << " rows measured ("
            << result.timedConfigs << " configurations timed), in " << seconds
            << " s\n";
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
  cmd->add_option("--predictions", args->predictions,
                  "write every surviving candidate's predicted time at every "
                  "key to this CSV (selection,m,candidate,predicted_us,chosen)");
  cmd->add_option("--device", args->device,
                  "time the model's best candidates at every key on GPU N "
                  "(EP ranks of fused tables on N, N+1, ...) and write "
                  "measured rows (docs/tuning.md, \"Timing on a device\")");
  cmd->add_option("--timed-per-key", args->timedPerKey,
                  "with --device: candidates timed at every key, the "
                  "model's best first")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(64)));
  cmd->add_option("--measurements", args->measurements,
                  "with --device: write every (key, timed candidate) with "
                  "its predicted and measured time to this CSV");
  cmd->add_option("--tie-margin", args->tieMargin,
                  "fraction by which a refinement must beat its parent, and "
                  "within which a key keeps the previous key's configuration")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--refinement-rounds", args->refinementRounds,
                  "rounds of one-knob refinements of the chosen "
                  "configurations (0: the grid only)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4u));
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
  cmd->add_option("--model", args->model,
                  "the cost model that ranks the candidates: moec-cost-2 or "
                  "moec-cost-3 (docs/cost-model.md)")
      ->capture_default_str();
  moec::cli::addTargetOption(cmd, args->target,
                             "tune for: the candidates compile for it and "
                             "its CUs bound the resident grids");
  cmd->callback([args, &exitStatus] { exitStatus = runTune(*args); });
}
