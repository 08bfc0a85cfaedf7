//===- kernel_occupancy.h - occupancy of a manifest kernel ------*- C++ -*-===//
//
// Glue between the manifest (KernelInfo) and the chip-level occupancy model
// (target_info.h), for `moec inspect`, `moec verify` and the loader.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_KERNEL_OCCUPANCY_H
#define MOEC_KERNEL_OCCUPANCY_H

#include "moec/manifest.h"
#include "moec/target_info.h"

namespace moec::rt {

/// The resource use the occupancy model needs, from a kernel's metadata and
/// its launch workgroup size.
inline KernelResourceUse kernelResourceUse(const KernelInfo &kernel) {
  KernelResourceUse use;
  use.archVgprs = kernel.resources.vgpr;
  use.agprs = kernel.resources.agpr;
  use.sgprs = kernel.resources.sgpr;
  use.ldsBytes = kernel.resources.ldsBytes;
  use.workgroupSize = kernel.launch.workgroupSize[0] * kernel.launch.workgroupSize[1] *
                      kernel.launch.workgroupSize[2];
  return use;
}

/// estimateOccupancy for one kernel of a bundle on `target`.
inline OccupancyEstimate estimateKernelOccupancy(const TargetInfo &target,
                                                 const KernelInfo &kernel) {
  return estimateOccupancy(target, kernelResourceUse(kernel));
}

} // namespace moec::rt

#endif // MOEC_KERNEL_OCCUPANCY_H
