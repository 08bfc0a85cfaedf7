//===- CompileCommand.cpp - moec compile TABLE -o BUNDLE ------------------===//

#include "AiterCommands.h"
#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TargetCheck.h"
#include "moec/Harness/StageKernel.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

struct CompileArgs {
  std::string table;
  std::string output;
  bool allowSpills = false;
  bool noIsaGate = false;
  bool quiet = false;
  bool small = false;
  unsigned jobs = 0;
  std::string cacheDir = moec::CompileCache::defaultDirectory();
  bool noCache = false;
  /// Further AITER CSVs, and the AITER options (docs/aiter-tables.md).
  std::vector<std::string> moreCsvs;
  moec::AiterCompileOptions aiter;
  /// The chip or part to compile for (--target); empty: the default chip.
  std::string target;
  /// Print per-kernel compile time statistics; write every kernel's times
  /// as JSON.
  bool timings = false;
  std::string timingsJson;
};

/// Order statistics of one set of per-kernel seconds (nearest rank).
struct TimeStats {
  size_t n = 0;
  double median = 0, p90 = 0, max = 0, total = 0;
};

TimeStats timeStats(std::vector<double> seconds) {
  TimeStats stats;
  stats.n = seconds.size();
  if (seconds.empty())
    return stats;
  std::sort(seconds.begin(), seconds.end());
  auto rank = [&](double p) {
    size_t r = static_cast<size_t>(std::ceil(p * double(seconds.size())));
    return seconds[std::max<size_t>(r, 1) - 1];
  };
  stats.median = rank(0.5);
  stats.p90 = rank(0.9);
  stats.max = seconds.back();
  for (double s : seconds)
    stats.total += s;
  return stats;
}

/// The rows of the timing report: every kernel, each phase, each stage.
std::vector<std::pair<std::string, TimeStats>>
timingRows(const std::vector<moec::KernelCompileTime> &times) {
  using moec::KernelCompileTime;
  auto column = [&](double KernelCompileTime::*field, bool compiledOnly) {
    std::vector<double> seconds;
    for (const KernelCompileTime &t : times)
      if (!compiledOnly || !t.fromCache)
        seconds.push_back(t.*field);
    return timeStats(std::move(seconds));
  };
  std::vector<std::pair<std::string, TimeStats>> rows = {
      {"kernel", column(&KernelCompileTime::totalSeconds, false)},
      {"  kernel IR", column(&KernelCompileTime::irSeconds, false)},
      {"  cache", column(&KernelCompileTime::cacheSeconds, false)},
      // Only the kernels that were compiled: a cached one has none.
      {"  code generation", column(&KernelCompileTime::codegenSeconds, true)},
      {"  resources", column(&KernelCompileTime::resourceSeconds, false)}};
  std::map<std::string, std::vector<double>> byStage;
  for (const KernelCompileTime &t : times)
    byStage[moec::abi::stageName(t.stage)].push_back(t.totalSeconds);
  for (auto &[stage, seconds] : byStage)
    rows.push_back({"stage " + stage, timeStats(std::move(seconds))});
  return rows;
}

void printTimings(const moec::CompileSummary &summary) {
  std::cout << "compile timings: " << summary.kernelTimes.size()
            << " kernels (" << summary.kernelsFromCache
            << " from the cache), " << summary.jobs
            << (summary.jobs == 1 ? " job" : " jobs")
            << "; front end (stage ops, verification, kernel IR) ";
  char line[160];
  std::snprintf(line, sizeof line, "%.3f s\n", summary.frontEndSeconds);
  std::cout << line;
  std::snprintf(line, sizeof line, "%-22s %5s %9s %9s %9s %9s\n",
                "seconds per kernel", "n", "median", "p90", "max", "total");
  std::cout << line;
  for (const auto &[name, stats] : timingRows(summary.kernelTimes)) {
    if (stats.n == 0) {
      std::snprintf(line, sizeof line, "%-22s %5zu %9s %9s %9s %9s\n",
                    name.c_str(), stats.n, "-", "-", "-", "-");
    } else {
      std::snprintf(line, sizeof line, "%-22s %5zu %9.4f %9.4f %9.4f %9.3f\n",
                    name.c_str(), stats.n, stats.median, stats.p90, stats.max,
                    stats.total);
    }
    std::cout << line;
  }
}

bool writeTimingsJson(const std::string &path, const CompileArgs &args,
                      const moec::CompileSummary &summary, double wallSeconds,
                      std::string &error) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const moec::KernelCompileTime &t : summary.kernelTimes)
    kernels.push_back({{"symbol", t.symbol},
                       {"stage", moec::abi::stageName(t.stage)},
                       {"from_cache", t.fromCache},
                       {"ir_s", t.irSeconds},
                       {"cache_s", t.cacheSeconds},
                       {"codegen_s", t.codegenSeconds},
                       {"resources_s", t.resourceSeconds},
                       {"total_s", t.totalSeconds}});
  nlohmann::json stats = nlohmann::json::object();
  for (const auto &[name, s] : timingRows(summary.kernelTimes)) {
    std::string key = name.substr(name.find_first_not_of(' '));
    stats[key] = {{"n", s.n},
                  {"median_s", s.median},
                  {"p90_s", s.p90},
                  {"max_s", s.max},
                  {"total_s", s.total}};
  }
  nlohmann::json out = {{"table", args.table},
                        {"bundle", args.output},
                        {"jobs", summary.jobs},
                        {"table_kernels", summary.tableKernels},
                        {"unique_kernels", summary.uniqueKernels},
                        {"kernels_from_cache", summary.kernelsFromCache},
                        {"wall_s", wallSeconds},
                        {"front_end_s", summary.frontEndSeconds},
                        {"stats", stats},
                        {"kernels", kernels}};
  const std::string text = out.dump(2) + "\n";
  return moec::cli::writeFileAtomically(path, text.data(), text.size(), error);
}

/// After a failed compile: when kernels of the table do not fit `chip`,
/// every one of those problems, one line each (the compile stops at the
/// first); otherwise nothing. Returns whether it printed any.
bool reportTargetProblems(const CompileArgs &args,
                          const moec::target::TargetInfo &chip) {
  std::vector<std::string> problems;
  std::string error;
  if (moec::checkTableTarget(args.table, chip, problems, error) !=
          moec::CompileStatus::Ok ||
      problems.empty())
    return false;
  for (const std::string &problem : problems)
    std::cerr << "moec: " << problem << "\n";
  return true;
}

int runCompile(const CompileArgs &args) {
  using namespace moec;
  const target::TargetInfo *chip = cli::targetOrReport(args.target);
  if (!chip)
    return cli::kBadInput;
  auto start = std::chrono::steady_clock::now();
  // At the small shape spills are reported, not refused
  // (smallShapeCompileOptions says why).
  CompileOptions options =
      args.small ? emu::smallShapeCompileOptions() : CompileOptions();
  options.allowSpills |= args.allowSpills;
  options.verifyIsa = options.verifyIsa && !args.noIsaGate;
  options.jobs = args.jobs;
  options.target = &CompileTarget::of(*chip);
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
    if (args.timings || !args.timingsJson.empty()) {
      std::cerr << "moec: --timings and --timings-json apply to moec tuning "
                   "tables, not to AITER CSVs\n";
      return cli::kBadInput;
    }
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
    if (reportTargetProblems(args, *chip))
      return cli::kBadInput;
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
  if (args.small && !args.allowSpills && !summary.spillingKernels.empty()) {
    std::cerr << "moec: --small: " << summary.spillingKernels.size()
              << " kernel(s) spill at the small shape (allowed: the emulated "
                 "device runs the kernel IR; the resource gate applies at "
                 "the real shape):";
    for (const auto &[name, r] : summary.spillingKernels)
      std::cerr << " " << name << " (" << r.vgprSpill << " VGPRs, "
                << r.sgprSpill << " SGPRs, " << r.privateSegmentBytes
                << " bytes of scratch)";
    std::cerr << "\n";
  }
  if (summary.corruptCacheEntries)
    std::cerr << "moec: " << summary.corruptCacheEntries
              << " corrupted compile-cache entries were rebuilt\n";
  if (args.timings)
    printTimings(summary);
  if (!args.timingsJson.empty() &&
      !writeTimingsJson(args.timingsJson, args, summary, seconds, error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kCheckFailed;
  }
  return cli::kSuccess;
}

} // namespace

void addCompileCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a tuning table into a bundle of code objects for "
                 "one chip or part (--target)");
  cmd->add_option("table", args->table, "tuning table (docs/table-format.md)")
      ->required();
  cmd->add_option("csvs", args->moreCsvs,
                  "further AITER tuned CSVs, merged in order "
                  "(docs/aiter-tables.md)");
  cmd->add_flag("--skip-unsupported", args->aiter.skipUnsupported,
                "AITER CSVs: skip rows moec cannot compile, recording each "
                "with its reason in the manifest");
  // Kept so that build scripts written for earlier versions still run:
  // every _w{n} and _xcd{n} part now compiles exactly.
  cmd->add_flag("--approximate-schedule", args->aiter.approximateSchedule,
                "no effect (AITER's _w{n} and _xcd{n} parts compile exactly)")
      ->group("");
  cmd->add_option("--swiglu-limit", args->aiter.swigluLimit,
                  "AITER CSVs: the W13 clamp of ActivationType.Silu rows "
                  "(0: plain SiLU)")
      ->capture_default_str();
  cmd->add_option("--situ-beta", args->aiter.situBeta,
                  "AITER CSVs: SiTUv2's beta of ActivationType.Situv2 rows "
                  "(AITER's tuner: 4)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--situ-linear-beta", args->aiter.situLinearBeta,
                  "AITER CSVs: SiTUv2's linear beta of ActivationType.Situv2 "
                  "rows (AITER's tuner: 25)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--aiter-bias", args->aiter.bias,
                "AITER CSVs: W13 and W2 kernels take AITER's per-expert FP32 "
                "biases (bias1, bias2) as the argument bias");
  cmd->add_option("-o,--output", args->output, "bundle to write (.moeb)")
      ->required();
  cmd->add_flag("--allow-spills", args->allowSpills,
                "accept kernels that spill registers or use scratch");
  cmd->add_flag("--no-isa-gate", args->noIsaGate,
                "accept kernels that fail the gfx950 ISA checks (hazards, "
                "waits, kernel ABI, resources; docs/isa-verification.md): "
                "for inspecting a failing kernel, never for serving");
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
  cmd->add_flag("--timings", args->timings,
                "print where the compile time went: median, p90, max and "
                "total seconds per kernel, per phase and per stage (also "
                "with -q)");
  cmd->add_option("--timings-json", args->timingsJson,
                  "write every kernel's compile times and their statistics "
                  "as JSON to this file");
  cmd->add_flag("--small", args->small,
                "shrink every problem to a small shape with the same knobs "
                "(H = I = 2 x the largest tile, 4 experts per rank, top-k <= "
                "4, 16 tokens per rank for fused kernels): bundles for the "
                "emulated device and `moec selftest --small`; spills at the "
                "small shape are reported, not refused (the emulated device "
                "runs the kernel IR)");
  moec::cli::addTargetOption(
      cmd, args->target,
      "compile for; every kernel it cannot run is refused, one line each");
  cmd->callback([args, &exitStatus] { exitStatus = runCompile(*args); });
}
