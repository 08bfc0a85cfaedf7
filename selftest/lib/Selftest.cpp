//===- Selftest.cpp - moec selftest: a bundle against the oracle ----------===//
///
/// \file
/// Checks the options, opens the bundle (or compiles its own table at a
/// small shape), finds the HIP library, runs every table
/// (SelftestRunner) and writes the saved cases' manifest.
///
//===----------------------------------------------------------------------===//

#include "SelftestRunner.h"

#include "moec/Compiler/TableCompiler.h"
#include "moec/Harness/StageKernel.h"
#include "moec/hip_loader.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <unistd.h>

namespace moec::selftest {

bool parseDeviceOrdinal(const std::string &text, int &ordinal) {
  if (text.empty() || text.size() > 5 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  ordinal = std::atoi(text.c_str());
  return ordinal < 65536;
}

bool parseDeviceList(const std::string &text, std::vector<int> &ordinals) {
  ordinals.clear();
  std::set<int> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos)
      comma = text.size();
    int ordinal = 0;
    if (!parseDeviceOrdinal(text.substr(begin, comma - begin), ordinal) ||
        !seen.insert(ordinal).second)
      return false;
    ordinals.push_back(ordinal);
    begin = comma + 1;
  }
  return true;
}

namespace {

/// The emulated HIP library: $MOEC_EMULATED_HIP_LIBRARY, or next to this
/// executable (build tree: ../lib, install tree: ../lib too).
std::string emulatedLibraryPath() {
  if (const char *path = std::getenv("MOEC_EMULATED_HIP_LIBRARY"); path && *path)
    return path;
  char self[4096];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (length > 0) {
    self[length] = 0;
    dir = self;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  return dir + "/../lib/libmoec_emulated_hip.so";
}

/// The bundle's own table at a small shape with the same knobs, compiled
/// here and opened from a temporary file.
SelftestStatus compileSmallBundle(const SelftestOptions &options,
                                  const SelftestOutput &output,
                                  const rt::Bundle &original,
                                  std::unique_ptr<rt::Bundle> &bundle) {
  TuningTable table = tableOfManifest(original.manifest(), options.bundle);
  const CompileOptions compileOptions = emu::smallShapeCompileOptions();
  compileOptions.rewriteTable(table);
  CompiledTable compiled;
  std::string error;
  if (compileTable(table, compileOptions, compiled, error) != CompileStatus::Ok) {
    output.error(options.bundle + ": at the small shape: " + error);
    return SelftestStatus::BadInput;
  }
  BundleContents contents = buildBundleContents(table, compiled);
  const char *tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") +
                     "/moec-selftest-" + std::to_string(::getpid()) + ".moeb";
  if (!rt::writeBundle(path, rt::serializeManifest(contents.manifest),
                       contents.objects, error)) {
    output.error(error);
    return SelftestStatus::Failed;
  }
  bundle = rt::Bundle::open(path, error);
  ::unlink(path.c_str());
  if (!bundle) {
    output.error(error);
    return SelftestStatus::Failed;
  }
  output.line("moec selftest: " + options.bundle + " at a small shape (" +
              std::to_string(compiled.kernels.size()) +
              " kernels rebuilt from its manifest with the same knobs, not "
              "its own code objects; --real runs those)");
  return SelftestStatus::Passed;
}

/// --network names a network the bundle has a table of.
bool checkNetwork(const SelftestOptions &options, const SelftestOutput &output,
                  const rt::Bundle &bundle) {
  if (options.network.empty())
    return true;
  std::set<std::string> networks;
  for (const rt::SelectionTable &table : bundle.manifest().selection)
    networks.insert(table.network);
  if (networks.count(options.network))
    return true;
  std::string list;
  for (const std::string &network : networks)
    list += (list.empty() ? "" : ", ") + network;
  output.error("--network " + options.network + ": " + options.bundle +
               " has no table of that network (" + list + ")");
  return false;
}

/// The HIP library to run on: the emulated one (with one emulated device
/// per EP rank), or the first of the runtime's candidates that loads.
std::string hipLibraryPath(bool emulated, const rt::Bundle &bundle) {
  if (emulated) {
    uint32_t ep = 1;
    for (const rt::SelectionTable &table : bundle.manifest().selection)
      ep = std::max(ep, table.ep);
    // One emulated device per EP rank (the variable is read at the
    // library's first use).
    const char *devices = std::getenv("MOEC_EMULATED_DEVICES");
    if (!devices || !*devices)
      setenv("MOEC_EMULATED_DEVICES", std::to_string(ep).c_str(), 1);
    return emulatedLibraryPath();
  }
  std::vector<std::string> candidates = rt::defaultHipLibraryCandidates();
  std::string library = candidates.empty() ? "libamdhip64.so" : candidates.front();
  std::string error;
  for (const std::string &candidate : candidates)
    if (rt::HipLibrary::load({candidate}, error)) {
      library = candidate;
      break;
    }
  return library;
}

/// Writes the saved cases' manifest and moves the directory into place.
SelftestStatus commitSavedCases(const SelftestOptions &options,
                                const SelftestOutput &output,
                                const std::vector<int> &devices,
                                const SelftestRunner &runner, CaseSaver &saver) {
  nlohmann::json header = {
      {"format", "moec-selftest-save 1"},
      {"bundle", options.bundle},
      {"shape", runsAsCompiled(options) ? "real" : "small"},
      {"device", options.device},
      {"devices", devices},
      {"seed", options.seed},
      {"max_m", options.maxM},
      {"tolerance",
       "rel_l2 <= bound against the quantisation-faithful oracle; tokens "
       "without a valid route exactly zero; no output left unwritten"},
      {"passed", runner.passed()},
      {"failed", runner.failed()},
      {"skipped", runner.skipped()}};
  std::string error;
  if (!saver.commit(std::move(header), error)) {
    output.error(error);
    return SelftestStatus::Failed;
  }
  output.line("saved " + saver.directory());
  return SelftestStatus::Passed;
}

} // namespace

SelftestStatus runSelftest(const SelftestOptions &options,
                           const SelftestOutput &output) {
  if (options.small && options.real) {
    output.error("--small and --real exclude each other");
    return SelftestStatus::BadInput;
  }
  const bool emulated = options.device == "emulated";
  int firstOrdinal = 0;
  if (!emulated && !parseDeviceOrdinal(options.device, firstOrdinal)) {
    output.error("--device " + options.device +
                 ": a device ordinal or 'emulated'");
    return SelftestStatus::BadInput;
  }
  // --devices 2,3,0,1: rank r on the r-th device listed.
  std::vector<int> devices;
  if (!options.devices.empty()) {
    if (!parseDeviceList(options.devices, devices)) {
      output.error("--devices " + options.devices +
                   ": a list of distinct device ordinals, e.g. 0,1,2,3");
      return SelftestStatus::BadInput;
    }
    firstOrdinal = devices.front();
  }
  std::unique_ptr<CaseSaver> saver;
  if (!options.saveDir.empty()) {
    std::string error;
    if (!(saver = CaseSaver::create(options.saveDir, error))) {
      output.error(error);
      return SelftestStatus::BadInput;
    }
  }
  std::string error;
  std::unique_ptr<rt::Bundle> original = rt::Bundle::open(options.bundle, error);
  if (!original) {
    output.error(error);
    return SelftestStatus::BadInput;
  }
  std::unique_ptr<rt::Bundle> bundle;
  if (!runsAsCompiled(options)) {
    if (SelftestStatus status =
            compileSmallBundle(options, output, *original, bundle);
        status != SelftestStatus::Passed)
      return status;
  } else {
    bundle = std::move(original);
    output.line("moec selftest: " + options.bundle +
                " as compiled (its own code objects at its own shapes)");
  }
  if (!checkNetwork(options, output, *bundle))
    return SelftestStatus::BadInput;
  SelftestRunner runner(options, output, *bundle,
                        hipLibraryPath(emulated, *bundle), devices,
                        firstOrdinal, saver.get());
  const SelftestStatus status = runner.run();
  if (!saver || status == SelftestStatus::NoDevice ||
      status == SelftestStatus::BadInput)
    return status;
  if (commitSavedCases(options, output, devices, runner, *saver) !=
      SelftestStatus::Passed)
    return SelftestStatus::Failed;
  return status;
}

} // namespace moec::selftest
