//===- TargetInfo.h - chip facts moec compiles for --------------*- C++ -*-===//
///
/// \file
/// The one place chip facts live. Passes, verifiers and the emulator ask this
/// object instead of comparing architecture strings. Figures and their
/// sources: docs/target-gfx950.md.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_TARGET_TARGETINFO_H
#define MOEC_TARGET_TARGETINFO_H

#include <cstdint>

namespace moec {

/// Facts about one GPU target. Plain data so the runtime can share it.
struct TargetInfo {
  const char *arch;
  const char *triple;
  const char *features;
  uint32_t computeUnits;
  uint32_t simdsPerCu;
  uint32_t waveSize;
  uint32_t maxWavesPerSimd;
  uint32_t maxWorkgroupSize;
  /// Unified VGPR file per lane (architected VGPRs plus AGPRs).
  uint32_t vgprsPerLane;
  uint32_t vgprGranule;
  /// Workgroup-visible LDS; also the per-CU total on gfx950.
  uint32_t ldsBytes;
  uint32_t ldsGranule;
  /// Whether the chip has the scaled (MX) MFMA instructions.
  bool hasScaledMfma;

  /// AMD Instinct MI355X / MI350X (CDNA4).
  static const TargetInfo &gfx950() {
    static const TargetInfo info{"gfx950", "amdgcn-amd-amdhsa", "+sramecc,-xnack",
                                 256, 4, 64, 8, 1024, 512, 8, 163840, 1280,
                                 /*hasScaledMfma=*/true};
    return info;
  }
};

} // namespace moec

#endif // MOEC_TARGET_TARGETINFO_H
