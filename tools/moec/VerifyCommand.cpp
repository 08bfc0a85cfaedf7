//===- VerifyCommand.cpp - moec verify BUNDLE -----------------------------===//
//
// Re-checks every kernel of a bundle against the chip it targets, the way a
// loader would before trusting it: no VGPR/SGPR spills, no scratch, LDS and
// workgroup size within the chip, and a kernel that can be resident at all.
// Prints one line per problem; exit 1 when there is any.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/bundle.h"
#include "moec/kernel_occupancy.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace {

struct VerifyArgs {
  std::string bundle;
  bool allowSpills = false;
};

int runVerify(const VerifyArgs &args) {
  using namespace moec::rt;
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  const Manifest &manifest = bundle->manifest();
  const moec::target::TargetInfo *chip =
      moec::target::lookupTargetInfo(manifest.target.arch);
  if (!chip) {
    std::cerr << "moec: " << args.bundle << ": target.arch '"
              << manifest.target.arch << "' is not a chip moec knows\n";
    return moec::cli::kBadInput;
  }
  int problems = 0;
  auto report = [&](const KernelInfo &kernel, const std::string &what) {
    std::cout << kernel.name << ": " << what << "\n";
    ++problems;
  };
  for (const KernelInfo &kernel : manifest.kernels) {
    const KernelResources &r = kernel.resources;
    if (!args.allowSpills && (r.vgprSpill > 0 || r.sgprSpill > 0))
      report(kernel, "spills " + std::to_string(r.vgprSpill) + " VGPRs and " +
                         std::to_string(r.sgprSpill) + " SGPRs");
    if (!args.allowSpills && r.privateSegmentBytes > 0)
      report(kernel, "uses " + std::to_string(r.privateSegmentBytes) +
                         " bytes of scratch");
    if (r.ldsBytes > chip->ldsBytesPerCu)
      report(kernel, "uses " + std::to_string(r.ldsBytes) + " bytes of LDS; " +
                         chip->arch + " has " +
                         std::to_string(chip->ldsBytesPerCu));
    if (r.wavefrontSize != chip->wavefrontSize)
      report(kernel, "was built for wave" + std::to_string(r.wavefrontSize) +
                         "; " + chip->arch + " runs wave" +
                         std::to_string(chip->wavefrontSize));
    uint32_t lanes = kernel.launch.workgroupSize[0] *
                     kernel.launch.workgroupSize[1] *
                     kernel.launch.workgroupSize[2];
    if (lanes > r.maxFlatWorkgroupSize || lanes > chip->maxWorkgroupSize)
      report(kernel, "launches " + std::to_string(lanes) +
                         " lanes per workgroup; the code object allows " +
                         std::to_string(r.maxFlatWorkgroupSize));
    moec::target::OccupancyEstimate occupancy = estimateKernelOccupancy(*chip, kernel);
    if (occupancy.limiter == moec::target::OccupancyLimiter::Invalid)
      report(kernel, std::string("cannot be resident: ") +
                         (occupancy.problem ? occupancy.problem : "unknown"));
  }
  std::cout << args.bundle << ": " << manifest.kernels.size() << " kernels, "
            << problems << " problem" << (problems == 1 ? "" : "s") << "\n";
  return problems == 0 ? moec::cli::kSuccess : moec::cli::kCheckFailed;
}

} // namespace

void addVerifyCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App *cmd = app.add_subcommand(
      "verify", "Check every kernel's resources against the target chip");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_flag("--allow-spills", args->allowSpills,
                "do not count spills and scratch as problems");
  cmd->callback([args, &exitStatus] { exitStatus = runVerify(*args); });
}
