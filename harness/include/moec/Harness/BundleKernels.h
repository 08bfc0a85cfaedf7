//===- BundleKernels.h - a bundle's kernels as the emulator runs them -*- C++ -*-===//
///
/// \file
/// The emulator executes exactly the kernel IR a bundle stores next to each
/// code object (docs/bundle-format.md, "Kernel IR"): never IR rebuilt by the
/// current compiler. The kernel's configuration (problem, tile, transport)
/// comes from the attributes its manifest entry records.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_BUNDLEKERNELS_H
#define MOEC_HARNESS_BUNDLEKERNELS_H

#include "moec/Harness/StageKernel.h"

#include <cstdint>
#include <string>

namespace moec::rt {
class Bundle;
} // namespace moec::rt

namespace moec::emu {

/// Kernel `kernelIndex` of `bundle`: `kernel.description` from the
/// manifest's attributes, `kernel.module` / `kernel.func` parsed from the
/// stored IR. Fails, naming the kernel, when the bundle holds no IR for it,
/// when the IR's bytes do not match the manifest's hash, or when the IR's
/// kernel is not the one the attributes describe.
mlir::LogicalResult loadBundleKernel(mlir::MLIRContext &context,
                                     const rt::Bundle &bundle,
                                     uint32_t kernelIndex, BuiltKernel &kernel,
                                     std::string &error);

} // namespace moec::emu

#endif // MOEC_HARNESS_BUNDLEKERNELS_H
