//===- CommandSupport.h - helpers shared by moec subcommands ----*- C++ -*-===//

#ifndef MOEC_TOOLS_MOEC_COMMANDSUPPORT_H
#define MOEC_TOOLS_MOEC_COMMANDSUPPORT_H

#include "Commands.h"

#include "moec/bundle.h"
#include "moec/manifest.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace moec::cli {

/// Writes `size` bytes to `path` through a temporary file beside it and a
/// rename, so a reader never sees a half-written file. On failure nothing
/// is left behind and `error` names the file.
inline bool writeFileAtomically(const std::filesystem::path &path,
                                const void *data, size_t size,
                                std::string &error) {
  std::filesystem::path temporary =
      path.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
    out.flush();
    if (!out) {
      error = temporary.string() + ": cannot write";
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    error = path.string() + ": " + ec.message();
    std::filesystem::remove(temporary, ec);
    return false;
  }
  return true;
}

/// The network a command works on: `requested` when given, else the only
/// network the bundle's selection tables serve. False (with `error`) when
/// the bundle serves several and none was named.
inline bool resolveNetwork(const rt::Manifest &manifest,
                           const std::string &bundlePath,
                           const std::string &requested, std::string &network,
                           std::string &error) {
  if (!requested.empty()) {
    network = requested;
    return true;
  }
  std::set<std::string> networks;
  for (const rt::SelectionTable &table : manifest.selection)
    networks.insert(table.network);
  if (networks.size() != 1) {
    error = bundlePath + ": the bundle serves several networks; pass --network";
    return false;
  }
  network = *networks.begin();
  return true;
}

/// Opens the bundle a command reads; on failure prints the reader's
/// one-line error and returns nullptr (the command then exits kBadInput).
inline std::unique_ptr<rt::Bundle> openBundleOrReport(const std::string &path) {
  std::string error;
  std::unique_ptr<rt::Bundle> bundle = rt::Bundle::open(path, error);
  if (!bundle)
    std::cerr << "moec: " << error << "\n";
  return bundle;
}

/// The options that name a selection key: the bundle, --network, --ep and
/// --workspace (select and run take the same key).
inline void addSelectionKeyOptions(CLI::App *command, std::string &bundle,
                                   std::string &network, uint32_t &ep,
                                   uint32_t &workspace) {
  command->add_option("bundle", bundle, "bundle (.moeb)")->required();
  command->add_option("--network", network,
                      "network name (optional when the bundle serves one)");
  command->add_option("--ep", ep, "expert-parallel size")->required();
  command->add_option("--workspace", workspace, "workspace capacity (rows)")
      ->required();
}

/// --target: a chip or part moec knows (docs/targets.md), by the name users
/// pass ("gfx950", "mi350p"); `name` stays empty for the default chip.
inline CLI::Option *addTargetOption(CLI::App *command, std::string &name,
                                    const std::string &what) {
  std::vector<std::string> names;
  for (const target::TargetInfo *chip : target::kKnownTargets)
    names.push_back(chip->name);
  return command
      ->add_option("--target", name,
                   "chip or part to " + what + " (docs/targets.md; default " +
                       target::lookupTargetInfoOrDefault("")->name + ")")
      ->check(CLI::IsMember(names));
}

/// The chip or part --target names (empty: the default chip), or nullptr
/// after a line on stderr naming the ones moec knows.
inline const target::TargetInfo *targetOrReport(const std::string &name) {
  const target::TargetInfo *chip = target::lookupTargetInfoOrDefault(name);
  if (!chip)
    std::cerr << "moec: --target " << name << ": not a chip moec knows ("
              << target::knownTargetNames() << ")\n";
  return chip;
}

} // namespace moec::cli

#endif // MOEC_TOOLS_MOEC_COMMANDSUPPORT_H
