//===- kernel_occupancy.h - occupancy of a manifest kernel ------*- C++ -*-===//
//
// Glue between the manifest (KernelInfo) and the chip-level occupancy model
// (moec/target/occupancy.h), for `moec inspect`, `moec verify`, the loader
// and the emulator's residency cap.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_KERNEL_OCCUPANCY_H
#define MOEC_KERNEL_OCCUPANCY_H

#include "moec/manifest.h"
#include "moec/target/occupancy.h"

namespace moec::rt {

/// The resource use the occupancy model needs, from a kernel's metadata and
/// its launch workgroup size.
inline target::KernelResourceUse kernelResourceUse(const KernelInfo &kernel) {
  target::KernelResourceUse use;
  use.vgprs = kernel.resources.vgpr;
  use.agprs = kernel.resources.agpr;
  use.sgprs = kernel.resources.sgpr;
  use.ldsBytes = kernel.resources.ldsBytes;
  use.workgroupSize = kernel.launch.workgroupSize[0] *
                      kernel.launch.workgroupSize[1] *
                      kernel.launch.workgroupSize[2];
  return use;
}

/// estimateOccupancy for one kernel of a bundle on `chip`.
inline target::OccupancyEstimate
estimateKernelOccupancy(const target::TargetInfo &chip,
                        const KernelInfo &kernel) {
  return target::estimateOccupancy(chip, kernelResourceUse(kernel));
}

} // namespace moec::rt

#endif // MOEC_KERNEL_OCCUPANCY_H
