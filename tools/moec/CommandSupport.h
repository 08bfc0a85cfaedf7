//===- CommandSupport.h - helpers shared by moec subcommands ----*- C++ -*-===//

#ifndef MOEC_TOOLS_MOEC_COMMANDSUPPORT_H
#define MOEC_TOOLS_MOEC_COMMANDSUPPORT_H

#include "moec/manifest.h"

#include <set>
#include <string>

namespace moec::cli {

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

} // namespace moec::cli

#endif // MOEC_TOOLS_MOEC_COMMANDSUPPORT_H
