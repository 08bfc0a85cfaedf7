//===- CompileCommand.cpp - moec compile TABLE -o BUNDLE ------------------===//

#include "AiterCommands.h"
#include "Commands.h"

#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TargetCheck.h"
#include "moec/Emulator/StageKernel.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct CompileArgs {
  std::string table;
  std::string output;
  bool allowSpills = false;
  bool quiet = false;
  bool small = false;
  unsigned jobs = 0;
  std::string cacheDir = moec::CompileCache::defaultDirectory();
  bool noCache = false;
  /// Further AITER CSVs, and the AITER options (docs/aiter-tables.md).
  std::vector<std::string> moreCsvs;
  moec::AiterCompileOptions aiter;
  /// The chip to compile for (--target).
  std::string target = moec::target::defaultTarget().arch;
};

/// --target naming another chip than the default: every kernel the chip
/// cannot run is refused, one line per missing feature or exceeded limit,
/// and nothing is written. The table compiler generates code for the
/// default chip only, so a table that passes is refused as well.
int refuseOtherTarget(const CompileArgs &args,
                      const moec::target::TargetInfo &chip) {
  using namespace moec;
  std::vector<std::string> problems;
  std::string error;
  if (checkTableTarget(args.table, chip, problems, error) != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  for (const std::string &problem : problems)
    std::cerr << "moec: " << problem << "\n";
  if (problems.empty())
    std::cerr << "moec: " << args.table << ": every kernel fits " << chip.arch
              << ", but code generation targets "
              << target::defaultTarget().arch << " only\n";
  return cli::kBadInput;
}

int runCompile(const CompileArgs &args) {
  using namespace moec;
  const target::TargetInfo *chip = target::lookupTargetInfo(args.target);
  if (!chip) {
    std::cerr << "moec: --target " << args.target << ": not a chip moec knows ("
              << target::knownTargetNames() << ")\n";
    return cli::kBadInput;
  }
  if (chip != &target::defaultTarget())
    return refuseOtherTarget(args, *chip);
  auto start = std::chrono::steady_clock::now();
  CompileOptions options;
  options.allowSpills = args.allowSpills;
  if (args.small)
    options.rewriteTable = emu::smallTable;
  options.jobs = args.jobs;
  if (!args.noCache) {
    options.cacheDirectory = args.cacheDir;
    options.cacheMaxBytes = CompileCache::defaultMaxBytes();
  }
  // A progress line on a terminal; nothing when output is a file or pipe.
  const bool showProgress = !args.quiet && ::isatty(STDERR_FILENO);
  if (showProgress)
    options.progress = [](size_t done, size_t total, const std::string &symbol) {
      std::cerr << "\r\033[K[" << done << "/" << total << "] "
                << symbol.substr(0, 100) << std::flush;
      if (done == total)
        std::cerr << "\r\033[K" << std::flush;
    };
  if (!args.moreCsvs.empty() || isAiterCsvFile(args.table)) {
    std::vector<std::string> csvs = {args.table};
    csvs.insert(csvs.end(), args.moreCsvs.begin(), args.moreCsvs.end());
    return cli::runAiterCompile(csvs, args.output, options, args.aiter,
                                args.quiet);
  }
  CompileSummary summary;
  std::string error;
  CompileStatus status =
      compileTableToBundle(args.table, args.output, options, summary, error);
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? cli::kBadInput
                                             : cli::kCheckFailed;
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (!args.quiet)
    std::cout << "moec: compiled " << summary.tableKernels
              << " table kernels (" << summary.uniqueKernels
              << " unique) from " << args.table << " into " << args.output
              << " in " << seconds << " s";
  if (!args.quiet && summary.kernelsFromCache)
    std::cout << " (" << summary.kernelsFromCache << " from the cache)";
  if (!args.quiet)
    std::cout << "\n";
  if (summary.corruptCacheEntries)
    std::cerr << "moec: " << summary.corruptCacheEntries
              << " corrupted compile-cache entries were rebuilt\n";
  return cli::kSuccess;
}

} // namespace

void addCompileCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a tuning table into a bundle of gfx950 code objects");
  cmd->add_option("table", args->table, "tuning table (docs/table-format.md)")
      ->required();
  cmd->add_option("csvs", args->moreCsvs,
                  "further AITER tuned CSVs, merged in order "
                  "(docs/aiter-tables.md)");
  cmd->add_flag("--skip-unsupported", args->aiter.skipUnsupported,
                "AITER CSVs: skip rows moec cannot compile, recording each "
                "with its reason in the manifest");
  cmd->add_flag("--approximate-schedule", args->aiter.approximateSchedule,
                "AITER CSVs: compile names whose _w{n} residency cap or "
                "_xcd{n} group order moec does not reproduce (noted per row)");
  cmd->add_option("--swiglu-limit", args->aiter.swigluLimit,
                  "AITER CSVs: the W13 clamp of ActivationType.Silu rows "
                  "(0: plain SiLU)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "bundle to write (.moeb)")
      ->required();
  cmd->add_flag("--allow-spills", args->allowSpills,
                "accept kernels that spill registers or use scratch");
  cmd->add_flag("-q,--quiet", args->quiet, "print nothing on success");
  cmd->add_option("-j,--jobs", args->jobs,
                  "kernels compiled in parallel (0: every core); the bundle "
                  "is the same for any value")
      ->capture_default_str();
  cmd->add_option("--cache-dir", args->cacheDir,
                  "compile cache ($MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec "
                  "or ~/.cache/moec; limit $MOEC_CACHE_MAX_BYTES, default 2 GiB)")
      ->capture_default_str();
  cmd->add_flag("--no-cache", args->noCache, "neither read nor write the cache");
  cmd->add_flag("--small", args->small,
                "shrink every problem to a small shape with the same knobs "
                "(H = I = 2 x the largest tile, 4 experts per rank, top-k <= "
                "4, 16 tokens per rank for fused kernels): bundles for the "
                "emulated device and `moec selftest --small`");
  std::vector<std::string> chips;
  for (const moec::target::TargetInfo *chip : moec::target::kKnownTargets)
    chips.push_back(chip->arch);
  cmd->add_option("--target", args->target,
                  "chip to compile for (docs/targets.md); another chip than " +
                      std::string(moec::target::defaultTarget().arch) +
                      " refuses every kernel it cannot run")
      ->check(CLI::IsMember(chips))
      ->capture_default_str();
  cmd->callback([args, &exitStatus] { exitStatus = runCompile(*args); });
}
