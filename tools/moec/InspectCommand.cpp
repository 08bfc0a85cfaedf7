//===- InspectCommand.cpp - moec inspect BUNDLE [--json] ------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/bundle.h"
#include "moec/kernel_occupancy.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace {

struct InspectArgs {
  std::string bundle;
  bool json = false;
};

/// The occupancy of `kernel` on the bundle's chip; Invalid when moec has no
/// facts for that chip.
moec::target::OccupancyEstimate occupancyOf(const moec::target::TargetInfo *chip,
                                            const moec::rt::KernelInfo &kernel) {
  if (!chip) {
    moec::target::OccupancyEstimate unknown;
    unknown.problem = "no facts for this chip";
    return unknown;
  }
  return moec::rt::estimateKernelOccupancy(*chip, kernel);
}

int runInspect(const InspectArgs &args) {
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  const moec::rt::Manifest &manifest = bundle->manifest();
  const moec::target::TargetInfo *chip =
      moec::target::lookupTargetInfo(manifest.target.arch);
  if (args.json) {
    // Each kernel's resources exactly as the manifest records them, plus
    // what inspect derives from them.
    const nlohmann::json stored = nlohmann::json::parse(
        moec::rt::serializeManifest(manifest))["kernels"];
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < manifest.kernels.size(); ++i) {
      const moec::rt::KernelInfo &k = manifest.kernels[i];
      moec::target::OccupancyEstimate occ = occupancyOf(chip, k);
      nlohmann::json entry = stored[i]["resources"];
      entry.update({{"name", k.name},
                    {"symbol", k.symbol},
                    {"stage", k.stage},
                    {"arch_vgpr", moec::target::architectedVgprCount(
                                      k.resources.vgpr, k.resources.agpr)},
                    {"workgroup_size", k.launch.workgroupSize[0]},
                    {"waves_per_simd", occ.wavesPerSimd},
                    {"occupancy_limiter",
                     moec::target::occupancyLimiterName(occ.limiter)},
                    {"resource_ceiling_percent", occ.resourceCeilingPercent}});
      out.push_back(entry);
    }
    std::cout << out.dump(2) << "\n";
    return moec::cli::kSuccess;
  }
  uint32_t irCount = 0;
  for (uint32_t i = 0; i < bundle->codeObjectCount(); ++i)
    irCount += bundle->codeObjectEncoding(i) ==
               moec::rt::bundle_format::kEncodingMlirBytecode;
  std::printf("%s: %zu kernels, %u code objects, %u kernel IR, target %s, "
              "%llu bytes\n",
              args.bundle.c_str(), manifest.kernels.size(),
              bundle->codeObjectCount() - irCount, irCount,
              manifest.target.arch.c_str(),
              static_cast<unsigned long long>(bundle->fileSize()));
  int nameWidth = 6;
  for (const moec::rt::KernelInfo &k : manifest.kernels)
    nameWidth = std::max(nameWidth, static_cast<int>(k.name.size()));
  std::printf("%-*s %7s %4s %4s %4s %7s %7s %6s %4s %10s %5s\n", nameWidth,
              "kernel",
              "stage", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "spills",
              "wg", "waves/SIMD", "occ%");
  for (const moec::rt::KernelInfo &k : manifest.kernels) {
    moec::target::OccupancyEstimate occ = occupancyOf(chip, k);
    const moec::rt::KernelResources &r = k.resources;
    char spills[16], waves[24];
    std::snprintf(spills, sizeof(spills), "%u/%u", r.vgprSpill, r.sgprSpill);
    std::snprintf(waves, sizeof(waves), "%u (%s)", occ.wavesPerSimd,
                  moec::target::occupancyLimiterName(occ.limiter));
    // `vgpr` is the unified count (.vgpr_count, AGPRs included): the VGPR
    // column is its architected part, so VGPR + AGPR is what is allocated.
    std::printf("%-*s %7s %4u %4u %4u %7u %7u %6s %4u %10s %5.1f\n",
                nameWidth, k.name.c_str(), k.stage.c_str(),
                moec::target::architectedVgprCount(r.vgpr, r.agpr), r.agpr, r.sgpr,
                r.ldsBytes, r.privateSegmentBytes, spills,
                k.launch.workgroupSize[0], waves, occ.resourceCeilingPercent);
  }
  return moec::cli::kSuccess;
}

} // namespace

void addInspectCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App *cmd = app.add_subcommand(
      "inspect", "Registers, LDS, scratch, spills and occupancy of every kernel");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, &exitStatus] { exitStatus = runInspect(*args); });
}
