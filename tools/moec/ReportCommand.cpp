//===- ReportCommand.cpp - moec report BUNDLE -o report.html ---------------===//
//
// One self-contained HTML page about a bundle for the people who deploy it
// (docs/cli.md, "moec report"), drawn by the report library
// (moec/Report/HtmlReport.h) and written through a temporary file and a
// rename.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Report/BundleAnalysis.h"
#include "moec/Report/HtmlReport.h"
#include "moec/bundle.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <memory>

namespace {

using namespace moec;
using namespace moec::cli;

struct ReportArgs {
  std::string bundle;
  std::string output;
};

int runReport(const ReportArgs &args) {
  std::unique_ptr<rt::Bundle> bundle = openBundleOrReport(args.bundle);
  if (!bundle)
    return kBadInput;
  std::string error;
  const target::TargetInfo *chip =
      report::bundleChip(bundle->manifest(), args.bundle, error);
  if (!chip) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  std::string html;
  if (!report::writeHtmlReport(
          *bundle, *chip, std::filesystem::path(args.bundle).filename().string(),
          html, error)) {
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
  cmd->callback([args, &exitStatus] { exitStatus = runReport(*args); });
}
