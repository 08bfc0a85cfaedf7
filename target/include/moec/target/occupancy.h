//===- occupancy.h - resident waves of a kernel on a chip -------*- C++ -*-===//
//
// The occupancy model of LLVM's GCNSubtarget::computeOccupancy for
// gfx90a/gfx942/gfx950 (docs/targets.md, "Occupancy"), over a TargetInfo.
// Plain C++17, header-only.
//
// Registers: on these chips the architected VGPRs and the AGPRs share one
// file per lane, and the code-object metadata's `.vgpr_count` is already
// the unified count LLVM allocates (its TotalNumVgprs: the architected
// VGPRs, aligned to 4 when AGPRs are used, plus the AGPRs; `.agpr_count`
// says how many of them are AGPRs). The model takes that count as it is.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TARGET_OCCUPANCY_H
#define MOEC_TARGET_OCCUPANCY_H

#include "moec/target/target_info.h"

#include <algorithm>
#include <cstdint>

namespace moec::target {

/// Resource use of one kernel, as recorded in the code-object metadata.
struct KernelResourceUse {
  uint32_t vgprs = 0;         ///< .vgpr_count: unified VGPRs, AGPRs included
  uint32_t agprs = 0;         ///< .agpr_count: how many of `vgprs` are AGPRs
  uint32_t sgprs = 0;         ///< .sgpr_count; LLVM's count already includes
                              ///< the extra (VCC, flat-scratch) SGPRs
  uint32_t ldsBytes = 0;      ///< .group_segment_fixed_size
  uint32_t workgroupSize = 0; ///< threads per workgroup (x*y*z)
};

/// What bounds the number of resident waves.
enum class OccupancyLimiter {
  None,           ///< the hardware wave-slot maximum
  Vgpr,           ///< unified VGPR/AGPR file
  Sgpr,           ///< SGPR file
  Lds,            ///< LDS per CU
  WorkgroupSlots, ///< workgroups per CU (barrier resources) for this group size
  Invalid, ///< cannot launch at all (OccupancyEstimate::problem says why)
};

/// Human-readable name of a limiter ("vgpr", "sgpr", "lds", ...).
inline const char *occupancyLimiterName(OccupancyLimiter limiter) noexcept {
  switch (limiter) {
  case OccupancyLimiter::None:
    return "none";
  case OccupancyLimiter::Vgpr:
    return "vgpr";
  case OccupancyLimiter::Sgpr:
    return "sgpr";
  case OccupancyLimiter::Lds:
    return "lds";
  case OccupancyLimiter::WorkgroupSlots:
    return "workgroup-slots";
  case OccupancyLimiter::Invalid:
    return "invalid";
  }
  return "invalid";
}

/// Result of the occupancy model for one kernel.
struct OccupancyEstimate {
  /// The minimum of the three limits below; 0 when Invalid.
  uint32_t wavesPerSimd = 0;
  OccupancyLimiter limiter = OccupancyLimiter::Invalid;
  /// The limit from registers alone.
  uint32_t vgprWavesPerSimd = 0;
  /// The limit from SGPRs alone.
  uint32_t sgprWavesPerSimd = 0;
  /// The limit from LDS and workgroup slots.
  uint32_t ldsWavesPerSimd = 0;
  /// ceil(workgroupSize / wavefrontSize).
  uint32_t wavesPerWorkgroup = 0;
  /// Resident workgroups per CU under all limits.
  uint32_t workgroupsPerCu = 0;
  /// wavesPerSimd * SIMDs as a percentage of the wave slots per CU.
  double resourceCeilingPercent = 0;
  /// Why the estimate is Invalid (static text), else nullptr.
  const char *problem = nullptr;
};

namespace detail {

constexpr uint32_t alignUp(uint32_t value, uint32_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

} // namespace detail

/// The unified register count of `archVgprs` architected VGPRs and `agprs`
/// AGPRs, as LLVM computes it (getTotalNumVGPRs for gfx90a and later):
/// alignTo(archVgprs, agprAlignment) + agprs when AGPRs are used, else
/// max(archVgprs, agprs). The metadata's `.vgpr_count` is this number.
constexpr uint32_t unifiedVgprCount(const TargetInfo &target,
                                    uint32_t archVgprs, uint32_t agprs) {
  return agprs > 0 ? detail::alignUp(archVgprs, target.agprAlignment) + agprs
                   : std::max(archVgprs, agprs);
}

/// The architected part of a unified count: `vgprs` less the AGPRs. With
/// AGPRs it is the architected count aligned to agprAlignment, since the
/// metadata keeps only the unified total.
constexpr uint32_t architectedVgprCount(uint32_t vgprs, uint32_t agprs) {
  return agprs <= vgprs ? vgprs - agprs : 0;
}

namespace detail {

constexpr uint32_t divideCeil(uint64_t value, uint64_t divisor) {
  return static_cast<uint32_t>((value + divisor - 1) / divisor);
}

/// LLVM's getOccupancyWithNumSGPRs for VOLCANIC_ISLANDS and later.
constexpr uint32_t wavesForSgprs(uint32_t sgprs) {
  if (sgprs <= 80)
    return 10;
  if (sgprs <= 88)
    return 9;
  if (sgprs <= 100)
    return 8;
  return 7;
}

} // namespace detail

/// The occupancy model (docs/targets.md, "Occupancy"):
///  - registers: N = the unified count (`.vgpr_count`, AGPRs included);
///    waves = min(totalVgprs / alignTo(N, granule), maxWaves);
///  - SGPRs: LLVM's table (<= 80: 10, <= 88: 9, <= 100: 8, else 7), capped;
///  - LDS and workgroup size: workgroups per CU limited by LDS (rounded to the
///    granule) and by barrier slots;
///    waves = clamp(ceil(wgs * wavesPerWg / SIMDs), 1, max).
inline OccupancyEstimate
estimateOccupancy(const TargetInfo &target,
                  const KernelResourceUse &use) noexcept {
  using detail::alignUp;
  using detail::divideCeil;
  OccupancyEstimate estimate;
  const uint32_t maxWaves = target.maxWavesPerSimd;

  auto invalid = [&](const char *why) {
    estimate.wavesPerSimd = 0;
    estimate.workgroupsPerCu = 0;
    estimate.resourceCeilingPercent = 0;
    estimate.limiter = OccupancyLimiter::Invalid;
    estimate.problem = why;
    return estimate;
  };

  if (use.workgroupSize == 0)
    return invalid("workgroup size is 0");
  if (use.workgroupSize > target.maxWorkgroupSize)
    return invalid("workgroup size exceeds the target maximum");
  estimate.wavesPerWorkgroup =
      divideCeil(use.workgroupSize, target.wavefrontSize);

  // Registers: `vgprs` already counts the AGPRs (LLVM's TotalNumVgprs).
  if (use.agprs > use.vgprs)
    return invalid("AGPR count exceeds the unified VGPR count");
  const uint32_t registers =
      alignUp(std::max<uint32_t>(use.vgprs, 1), target.vgprAllocGranule);
  if (registers > target.totalVgprs)
    return invalid("VGPR count (AGPRs included) exceeds the register file");
  estimate.vgprWavesPerSimd = std::min(target.totalVgprs / registers, maxWaves);

  if (use.sgprs > target.addressableSgprs + target.extraSgprs)
    return invalid("SGPR count exceeds the addressable SGPRs");
  estimate.sgprWavesPerSimd =
      std::min(detail::wavesForSgprs(use.sgprs), maxWaves);

  // LDS and barrier slots bound the workgroups per CU.
  if (use.ldsBytes > target.ldsBytesPerCu)
    return invalid("LDS use exceeds the LDS per CU");
  const uint32_t slotLimitedWorkgroups =
      estimate.wavesPerWorkgroup == 1
          ? target.maxSingleWaveWorkgroupsPerCu
          : std::min(target.maxWavesPerCu() / estimate.wavesPerWorkgroup,
                     target.maxWorkgroupsPerCu);
  uint32_t ldsLimitedWorkgroups = slotLimitedWorkgroups;
  if (use.ldsBytes > 0)
    ldsLimitedWorkgroups =
        target.ldsBytesPerCu / alignUp(use.ldsBytes, target.ldsAllocGranule);
  const uint32_t workgroupsByLds =
      std::min(slotLimitedWorkgroups, ldsLimitedWorkgroups);
  if (workgroupsByLds == 0)
    return invalid("workgroup does not fit on a CU");
  estimate.ldsWavesPerSimd = std::clamp<uint32_t>(
      divideCeil(uint64_t(workgroupsByLds) * estimate.wavesPerWorkgroup,
                 target.simdsPerCu),
      1, maxWaves);

  // Combine; on a tie the first limiter in this order is reported.
  estimate.wavesPerSimd = maxWaves;
  estimate.limiter = OccupancyLimiter::None;
  auto consider = [&](uint32_t waves, OccupancyLimiter limiter) {
    if (waves < estimate.wavesPerSimd) {
      estimate.wavesPerSimd = waves;
      estimate.limiter = limiter;
    }
  };
  consider(estimate.vgprWavesPerSimd, OccupancyLimiter::Vgpr);
  consider(estimate.sgprWavesPerSimd, OccupancyLimiter::Sgpr);
  consider(estimate.ldsWavesPerSimd,
           ldsLimitedWorkgroups < slotLimitedWorkgroups
               ? OccupancyLimiter::Lds
               : OccupancyLimiter::WorkgroupSlots);

  // Workgroups resident per CU: registers give wave slots per CU, a workgroup
  // needs all its waves resident at once.
  const uint32_t registerWaveSlotsPerCu =
      std::min(estimate.vgprWavesPerSimd, estimate.sgprWavesPerSimd) *
      target.simdsPerCu;
  estimate.workgroupsPerCu = std::min(
      workgroupsByLds, registerWaveSlotsPerCu / estimate.wavesPerWorkgroup);
  if (estimate.workgroupsPerCu == 0)
    return invalid("workgroup needs more wave slots than the registers allow");

  estimate.resourceCeilingPercent = 100.0 * estimate.wavesPerSimd *
                                    target.simdsPerCu / target.maxWavesPerCu();
  return estimate;
}

/// The "launch ceiling": resident waves actually used when `workgroupsLaunched`
/// workgroups are launched, as a percentage of all wave slots of the chip.
inline double launchCeilingPercent(const TargetInfo &target,
                                   const OccupancyEstimate &estimate,
                                   uint64_t workgroupsLaunched) noexcept {
  if (estimate.limiter == OccupancyLimiter::Invalid)
    return 0;
  const uint64_t residentWorkgroups =
      uint64_t(estimate.workgroupsPerCu) * target.computeUnits;
  const uint64_t workgroups = std::min(workgroupsLaunched, residentWorkgroups);
  const uint64_t waves = workgroups * estimate.wavesPerWorkgroup;
  const uint64_t slots = target.maxResidentWaves();
  const double percent = 100.0 * double(waves) / double(slots);
  return std::min(percent, estimate.resourceCeilingPercent);
}

} // namespace moec::target

#endif // MOEC_TARGET_OCCUPANCY_H
