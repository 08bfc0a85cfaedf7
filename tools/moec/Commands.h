//===- Commands.h - the subcommands of moec ---------------------*- C++ -*-===//
///
/// \file
/// Each subcommand lives in its own file and registers itself on the CLI11
/// app; its callback stores the process exit status (docs/cli.md):
/// 0 success, 1 a check failed, 2 bad usage or bad input (selftest: 3 no
/// device). `moec reference` is registered from its library
/// (moec/reference/ReferenceCommand.h).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_TOOLS_MOEC_COMMANDS_H
#define MOEC_TOOLS_MOEC_COMMANDS_H

namespace CLI {
class App;
} // namespace CLI

namespace moec::cli {

enum ExitStatus : int { kSuccess = 0, kCheckFailed = 1, kBadInput = 2 };

} // namespace moec::cli

void addCompileCommand(CLI::App &app, int &exitStatus);
void addInspectCommand(CLI::App &app, int &exitStatus);
void addSelectCommand(CLI::App &app, int &exitStatus);
void addExtractCommand(CLI::App &app, int &exitStatus);
void addVerifyCommand(CLI::App &app, int &exitStatus);
void addReportCommand(CLI::App &app, int &exitStatus);
void addRunCommand(CLI::App &app, int &exitStatus);
void addSelftestCommand(CLI::App &app, int &exitStatus);
void addTuneCommand(CLI::App &app, int &exitStatus);
void addModelCheckCommand(CLI::App &app, int &exitStatus);
void addBenchCommand(CLI::App &app, int &exitStatus);

#endif // MOEC_TOOLS_MOEC_COMMANDS_H
