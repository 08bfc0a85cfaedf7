//===- main.cpp - the moec command-line tool ------------------------------===//

#include "Commands.h"
#include "moec/reference/ReferenceCommand.h"

#include <CLI/CLI.hpp>

#include "llvm/Support/ErrorHandling.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <unistd.h>

namespace {

/// Out of memory anywhere (LLVM's allocators report it through this hook,
/// and do not throw): one line and exit status 2, never an abort.
void reportOutOfMemory(void *, const char *reason, bool) {
  const char message[] = "moec: out of memory";
  (void)!::write(2, message, sizeof message - 1);
  if (reason && *reason) {
    (void)!::write(2, " (", 2);
    (void)!::write(2, reason, std::strlen(reason));
    (void)!::write(2, ")", 1);
  }
  (void)!::write(2, "\n", 1);
  std::_Exit(moec::cli::kBadInput);
}

/// An exception that escapes anything (a worker thread included) ends the
/// process with a message and exit status 2 instead of an abort.
[[noreturn]] void reportTermination() {
  const char *what = "unknown error";
  try {
    if (std::exception_ptr current = std::current_exception())
      std::rethrow_exception(current);
  } catch (const std::bad_alloc &) {
    what = "out of memory";
  } catch (const std::exception &e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "moec: %s\n", what);
  std::fflush(stderr);
  std::_Exit(moec::cli::kBadInput);
}

} // namespace

int main(int argc, char **argv) {
  std::set_terminate(reportTermination);
  llvm::install_bad_alloc_error_handler(reportOutOfMemory);
  CLI::App app{"moec: ahead-of-time compiler for Mixture-of-Experts GPU kernels "
               "(gfx950)"};
  app.require_subcommand(1);
  int exitStatus = moec::cli::kSuccess;
  addCompileCommand(app, exitStatus);
  addInspectCommand(app, exitStatus);
  addSelectCommand(app, exitStatus);
  addExtractCommand(app, exitStatus);
  addVerifyCommand(app, exitStatus);
  addReportCommand(app, exitStatus);
  addReferenceCommand(app, exitStatus);
  addRunCommand(app, exitStatus);
  addSelftestCommand(app, exitStatus);
  addTuneCommand(app, exitStatus);
  addModelCheckCommand(app, exitStatus);
  addBenchCommand(app, exitStatus);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp &help) {
    return app.exit(help);
  } catch (const CLI::ParseError &error) {
    std::cerr << "moec: " << error.what() << " (see moec --help)\n";
    return moec::cli::kBadInput;
  } catch (const std::bad_alloc &) {
    // An input that needs more memory than the machine has (the commands
    // bound what they allocate from input; this is the last line).
    std::cerr << "moec: out of memory\n";
    return moec::cli::kBadInput;
  } catch (const std::exception &error) {
    std::cerr << "moec: " << error.what() << "\n";
    return moec::cli::kBadInput;
  }
  return exitStatus;
}
