//===- ReportCommand.cpp - moec report BUNDLE -o report.html ---------------===//
//
// One self-contained HTML page about a bundle for the people who deploy it
// (docs/report.md), drawn by the report library (moec/Report/HtmlReport.h)
// with the measurements --bench, --model-check and --published name beside
// the model, and written through a temporary file and a rename.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Compiler/CsvText.h"
#include "moec/Harness/LayerBench.h"
#include "moec/Report/BundleAnalysis.h"
#include "moec/Report/HtmlReport.h"
#include "moec/Report/Measurements.h"
#include "moec/bundle.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace {

using namespace moec;
using namespace moec::cli;

struct ReportArgs {
  std::string bundle;
  std::string output;
  std::string bench, modelCheck;
  bool allFigures = false;
  std::string published = "tuning_tables/published/figures.csv";
  bool publishedGiven = false;
};

/// Reads the files behind --bench, --model-check and --published into
/// `measurements` (pointing into the other arguments).
bool readMeasurements(const ReportArgs &args, report::BenchMeasurements &bench,
                      ModelCheckData &modelCheck,
                      std::vector<PublishedFigure> &published,
                      report::ReportMeasurements &measurements,
                      std::string &error) {
  std::string text;
  if (!args.bench.empty()) {
    std::vector<harness::BenchRow> rows;
    if (!csv::readText(args.bench, text, error) ||
        !report::parseBenchHeader(args.bench, text, bench, error) ||
        !harness::readBenchRows(args.bench, rows, error))
      return false;
    for (const harness::BenchRow &row : rows)
      bench.keys.push_back({row.key.network, row.key.ep, row.key.workspace,
                            row.key.m, row.layerUs, row.publishedUs,
                            row.figure});
    measurements.bench = &bench;
  }
  if (!args.modelCheck.empty()) {
    if (!csv::readText(args.modelCheck, text, error) ||
        !report::parseModelCheckCsv(args.modelCheck, text, modelCheck, error))
      return false;
    measurements.modelCheck = &modelCheck;
    measurements.allFigures = args.allFigures;
  }
  // The default figures file is the repository's: run elsewhere, the page
  // goes without the EP8 anchor rather than not at all.
  if (args.publishedGiven || std::filesystem::exists(args.published)) {
    if (!csv::readText(args.published, text, error) ||
        !parsePublishedFigures(args.published, text, published, error))
      return false;
    measurements.published = &published;
  }
  return true;
}

int runReport(const ReportArgs &args) {
  std::unique_ptr<rt::Bundle> bundle = openBundleOrReport(args.bundle);
  if (!bundle)
    return kBadInput;
  std::string error;
  report::BenchMeasurements bench;
  ModelCheckData modelCheck;
  std::vector<PublishedFigure> published;
  report::ReportMeasurements measurements;
  if (!readMeasurements(args, bench, modelCheck, published, measurements,
                        error)) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  const target::TargetInfo *chip =
      report::bundleChip(bundle->manifest(), args.bundle, error);
  if (!chip) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  std::string html;
  if (!report::writeHtmlReport(
          *bundle, *chip, std::filesystem::path(args.bundle).filename().string(),
          html, error, measurements)) {
    std::cerr << "moec: " << args.bundle << ": " << error << "\n";
    return kBadInput;
  }
  if (!writeFileAtomically(args.output, html.data(), html.size(), error)) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  return kSuccess;
}

} // namespace

void addReportCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App *cmd = app.add_subcommand(
      "report", "Write a self-contained HTML page about a bundle's tables, "
                "configurations and kernels (docs/cli.md)");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_option("-o,--output", args->output, "HTML file to write")
      ->required();
  cmd->add_option("--bench", args->bench,
                  "moec bench --json output: the section \"Measured on this "
                  "machine\"");
  cmd->add_option("--model-check", args->modelCheck,
                  "moec model-check --csv output: the section \"Model "
                  "against published measurements\"");
  cmd->add_flag("--all-figures", args->allFigures,
                "with --model-check: every figure, not only those of the "
                "bundle's networks");
  cmd->add_option("--published", args->published,
                  "published figures beside the EP8 tables' predictions")
      ->capture_default_str();
  cmd->callback([args, cmd, &exitStatus] {
    args->publishedGiven = cmd->count("--published") > 0;
    exitStatus = runReport(*args);
  });
}
