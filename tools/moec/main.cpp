//===- main.cpp - the moec command-line tool ------------------------------===//

#include "Commands.h"

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char **argv) {
  CLI::App app{"moec: ahead-of-time compiler for Mixture-of-Experts GPU kernels "
               "(gfx950)"};
  app.require_subcommand(1);
  int exitStatus = moec::cli::kSuccess;
  addCompileCommand(app, exitStatus);
  addInspectCommand(app, exitStatus);
  addSelectCommand(app, exitStatus);
  addExtractCommand(app, exitStatus);
  addVerifyCommand(app, exitStatus);
  addReferenceCommand(app, exitStatus);
  addRunCommand(app, exitStatus);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp &help) {
    return app.exit(help);
  } catch (const CLI::ParseError &error) {
    std::cerr << "moec: " << error.what() << " (see moec --help)\n";
    return moec::cli::kBadInput;
  }
  return exitStatus;
}
