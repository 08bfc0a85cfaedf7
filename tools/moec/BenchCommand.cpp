//===- BenchCommand.cpp - moec bench BUNDLE --device N[,N...] -------------===//
//
// docs/cli.md: the layer time of every selection key of a bundle on a
// device, and each stage's time, measured as the seeds measure
// (harness/lib/LayerBench.cpp), with the published figure of the same key
// (or an AITER CSV's us1, us2, us) beside them; text, CSV and JSON;
// SIGINT stops after the current key and writes what was measured;
// --resume skips the keys of a previous output.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "moec/Harness/LayerBench.h"

#include <CLI/CLI.hpp>

#include <csignal>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

namespace {

struct BenchArgs {
  std::string bundle;
  std::string devices = "0";
  std::string network;
  uint32_t ep = 0, workspace = 0, m = 0;
  std::string csv, json, resume, compare;
  std::string published = "tuning_tables/published/figures.csv";
  bool publishedGiven = false;
  std::vector<std::string> aiterCsvs;
  bool noStages = false;
  unsigned samples = 30, warmups = 5;
  uint64_t flushMiB = 512;
};

volatile std::sig_atomic_t interruptRequested = 0;
void onInterrupt(int) { interruptRequested = 1; }

bool parseDevices(const std::string &text, std::vector<int> &devices) {
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char *end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || value < 0 || value > 1024)
      return false;
    devices.push_back(int(value));
  }
  return !devices.empty();
}

int runBench(const BenchArgs &args) {
  using namespace moec;
  harness::BenchOptions options;
  options.devices.clear(); // the list given replaces the default {0}
  if (!parseDevices(args.devices, options.devices)) {
    std::cerr << "moec: --device " << args.devices
              << ": expected GPU ordinals N[,N...]\n";
    return cli::kBadInput;
  }
  options.network = args.network;
  options.ep = args.ep;
  options.workspace = args.workspace;
  options.m = args.m;
  // The default figures file is the repository's: run elsewhere, the
  // times come without published figures rather than not at all.
  options.publishedFigures = args.published;
  if (!args.publishedGiven && !std::filesystem::exists(args.published)) {
    std::cerr << "moec bench: no published figures (" << args.published
              << " not found; --published FILE)\n";
    options.publishedFigures.clear();
  }
  options.aiterCsvs = args.aiterCsvs;
  options.stages = !args.noStages;
  options.samplesPerPass = args.samples;
  options.warmups = args.warmups;
  options.flushBytes = args.flushMiB << 20;
  std::vector<harness::BenchRow> previous;
  std::string error;
  if (!args.resume.empty()) {
    if (!harness::readBenchRows(args.resume, previous, error)) {
      std::cerr << "moec: --resume: " << error << "\n";
      return cli::kBadInput;
    }
    for (const harness::BenchRow &row : previous)
      options.done.insert(row.key);
  }
  options.progress = [](const std::string &line) {
    std::cerr << "moec bench: " << line << "\n";
  };
  interruptRequested = 0;
  options.stop = [] { return interruptRequested != 0; };
  auto previousHandler = std::signal(SIGINT, onInterrupt);
  if (!args.compare.empty()) {
    harness::CompareResult compared;
    if (!harness::runBenchCompare(args.bundle, args.compare, options, compared,
                                  error)) {
      std::cerr << "moec: bench --compare: " << error << "\n";
      return cli::kBadInput;
    }
    std::cout << harness::formatCompareText(compared);
    return compared.controlPassed ? cli::kSuccess : cli::kCheckFailed;
  }
  harness::BenchResult result;
  const bool ran = harness::runBench(args.bundle, options, result, error);
  std::signal(SIGINT, previousHandler);
  if (!ran) {
    std::cerr << "moec: bench: " << error << "\n";
    return cli::kBadInput;
  }
  result.rows.insert(result.rows.begin(), previous.begin(), previous.end());
  std::cout << harness::formatBenchText(result);
  if ((!args.csv.empty() && !harness::writeBenchCsv(result, args.csv, error)) ||
      (!args.json.empty() && !harness::writeBenchJson(result, args.json, error))) {
    std::cerr << "moec: bench: " << error << "\n";
    return cli::kBadInput;
  }
  return cli::kSuccess;
}

} // namespace

void addBenchCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App *cmd = app.add_subcommand(
      "bench", "Measure the layer time of every selection key of a bundle "
               "on GPUs as the seeds measure, beside the published figures "
               "(docs/performance.md)");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_option("--device", args->devices,
                  "GPU ordinals N[,N...]: a fused table's rank r on the r-th "
                  "(default: N and the devices after it); unfused tables on "
                  "the first")
      ->capture_default_str();
  cmd->add_option("--network", args->network, "only this network's keys");
  cmd->add_option("--ep", args->ep, "only keys of this EP size");
  cmd->add_option("--workspace", args->workspace, "only keys of this workspace");
  cmd->add_option("--m", args->m, "only this M");
  cmd->add_option("--csv", args->csv, "also write the rows to this CSV");
  cmd->add_option("--json", args->json, "also write the rows to this JSON");
  cmd->add_option("--resume", args->resume,
                  "skip the keys of a previous --csv or --json output and "
                  "keep its rows");
  cmd->add_option("--compare", args->compare,
                  "B.moeb: paired, alternating measurements of the bundle (A) "
                  "and B on the same keys with the TP4 seed's gate, and A "
                  "against A as the control (exit 1 when the control shows "
                  "a gain)");
  cmd->add_option("--published", args->published,
                  "published figures to show beside the measured times")
      ->capture_default_str();
  cmd->add_option("--aiter-csv", args->aiterCsvs,
                  "an AITER CSV the bundle was compiled from, for its us1, "
                  "us2 and us beside the times (default: found by name and "
                  "hash in tuning_tables/aiter or beside the bundle)");
  cmd->add_flag("--no-stages", args->noStages,
                "time the layer only, not each stage of unfused tables");
  cmd->add_option("--samples", args->samples, "samples per pass")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  cmd->add_option("--warmups", args->warmups, "forwards before each capture")
      ->capture_default_str();
  cmd->add_option("--flush-mib", args->flushMiB,
                  "cache flush before every sample, MiB (0: none)")
      ->capture_default_str();
  cmd->callback([args, cmd, &exitStatus]() {
    args->publishedGiven = cmd->count("--published") > 0;
    exitStatus = runBench(*args);
  });
}
