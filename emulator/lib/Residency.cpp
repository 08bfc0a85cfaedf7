//===- Residency.cpp - resident workgroups from the occupancy model -------===//
///
/// \file
/// The emulator's residency cap for a kernel, from the occupancy model of
/// moec/target: a kernel that waits on other workgroups deadlocks on hardware when
/// the workgroups it waits on cannot be resident at the same time, and the
/// emulator reproduces that only with the hardware's cap.
///
//===----------------------------------------------------------------------===//

#include "moec/Emulator/Emulator.h"

#include "moec/kernel_occupancy.h"
#include "moec/manifest.h"
#include "moec/target/target_info.h"

#include <limits>

namespace moec::emu {

mlir::FailureOr<unsigned>
residentWorkgroupCap(const rt::KernelInfo &kernel,
                     const target::TargetInfo &chip, std::string &error) {
  const unsigned computeUnits = chip.computeUnits;
  const target::OccupancyEstimate estimate =
      rt::estimateKernelOccupancy(chip, kernel);
  if (estimate.limiter == target::OccupancyLimiter::Invalid) {
    error = std::string("emulator: ") +
            (kernel.name.empty() ? std::string() : kernel.name + ": ") +
            "cannot launch on " + chip.name + ": " +
            (estimate.problem ? estimate.problem : "invalid resources");
    return mlir::failure();
  }
  if (computeUnits == 0) {
    error = "emulator: residentWorkgroupCap needs at least one compute unit";
    return mlir::failure();
  }
  const uint64_t cap = uint64_t(estimate.workgroupsPerCu) * computeUnits;
  return static_cast<unsigned>(
      std::min<uint64_t>(cap, std::numeric_limits<unsigned>::max()));
}

mlir::FailureOr<unsigned>
residentWorkgroupCap(const rt::KernelResources &resources,
                     unsigned workgroupSize, const target::TargetInfo &chip,
                     std::string &error) {
  rt::KernelInfo kernel;
  kernel.resources = resources;
  kernel.launch.workgroupSize = {{workgroupSize, 1, 1}};
  return residentWorkgroupCap(kernel, chip, error);
}

} // namespace moec::emu
