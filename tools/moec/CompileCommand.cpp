//===- CompileCommand.cpp - moec compile TABLE -o BUNDLE ------------------===//

#include "Commands.h"

#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/bundle.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

struct CompileArgs {
  std::string table;
  std::string output;
  bool allowSpills = false;
  bool quiet = false;
};

int runCompile(const CompileArgs &args) {
  using namespace moec;
  auto start = std::chrono::steady_clock::now();
  std::ifstream file(args.table, std::ios::binary);
  if (!file) {
    std::cerr << "moec: " << args.table << ": cannot open the tuning table\n";
    return cli::kBadInput;
  }
  std::ostringstream text;
  text << file.rdbuf();

  TuningTable table;
  std::string error;
  if (!parseTuningTable(args.table, text.str(), table, error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  CompiledTable compiled;
  CompileOptions options;
  options.allowSpills = args.allowSpills;
  CompileStatus status = compileTable(table, options, compiled, error);
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? cli::kBadInput
                                             : cli::kCheckFailed;
  }
  std::string manifest = buildManifestJson(table, compiled, text.str());
  if (!rt::writeBundle(args.output, manifest, collectCodeObjects(compiled),
                       error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kCheckFailed;
  }
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (!args.quiet)
    std::cout << "moec: compiled " << table.kernels.size() << " table kernels ("
              << compiled.kernels.size() << " unique) from " << args.table
              << " into " << args.output << " in " << seconds << " s\n";
  return cli::kSuccess;
}

} // namespace

void addCompileCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a tuning table into a bundle of gfx950 code objects");
  cmd->add_option("table", args->table, "tuning table (docs/table-format.md)")
      ->required();
  cmd->add_option("-o,--output", args->output, "bundle to write (.moeb)")
      ->required();
  cmd->add_flag("--allow-spills", args->allowSpills,
                "accept kernels that spill registers or use scratch");
  cmd->add_flag("-q,--quiet", args->quiet, "print nothing on success");
  cmd->callback([args, &exitStatus] { exitStatus = runCompile(*args); });
}
