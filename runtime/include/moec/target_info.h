//===- target_info.h - chip facts and the occupancy model -------*- C++ -*-===//
//
// One struct holds every chip fact the runtime and the inspector need
// (docs/FACTS.md "gfx950 / MI355X" and "Occupancy"); nothing else in the
// runtime compares architecture strings. The occupancy model follows LLVM's
// GCNSubtarget::computeOccupancy for gfx90a/gfx942/gfx950.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TARGET_INFO_H
#define MOEC_TARGET_INFO_H

#include <cstdint>
#include <string_view>

namespace moec::rt {

/// Hardware facts of one GPU target, used by the occupancy model and by
/// resource checks at load time.
struct TargetInfo {
  const char *arch;                 ///< e.g. "gfx950"
  uint32_t computeUnits;            ///< CUs on the whole chip
  uint32_t simdsPerCu;              ///< SIMDs (EUs) per CU
  uint32_t maxWavesPerSimd;         ///< wave slots per SIMD
  uint32_t wavefrontSize;           ///< lanes per wave
  uint32_t totalVgprs;              ///< unified VGPR+AGPR file per lane
  uint32_t vgprAllocGranule;        ///< allocation granule of the unified file
  uint32_t agprAlignment;           ///< arch VGPRs are aligned to this before AGPRs
  uint32_t sgprsPerSimd;            ///< physical SGPRs per SIMD
  uint32_t addressableSgprs;        ///< SGPRs a kernel may name
  uint32_t extraSgprs;              ///< VCC + flat scratch + XNACK reserved SGPRs
  uint32_t ldsBytesPerCu;           ///< LDS per CU (= per-workgroup maximum)
  uint32_t ldsAllocGranule;         ///< LDS allocation granule in bytes
  uint32_t maxWorkgroupsPerCu;      ///< barrier-limited workgroups per CU (multi-wave groups)
  uint32_t maxSingleWaveWorkgroupsPerCu; ///< workgroups per CU when a group is one wave
  uint32_t maxWorkgroupSize;        ///< threads per workgroup

  /// Wave slots per CU (simdsPerCu * maxWavesPerSimd).
  uint32_t maxWavesPerCu() const { return simdsPerCu * maxWavesPerSimd; }
};

/// Facts for gfx950 (MI355X / MI350X, CDNA4).
const TargetInfo &gfx950TargetInfo() noexcept;

/// The TargetInfo for `arch` ("gfx950", also "gfx950:sramecc+:xnack-"), or
/// nullptr when the runtime has no facts for that chip.
const TargetInfo *lookupTargetInfo(std::string_view arch) noexcept;

/// Resource use of one kernel, as recorded in the code-object metadata.
struct KernelResourceUse {
  uint32_t archVgprs = 0;     ///< .vgpr_count (architectural VGPRs)
  uint32_t agprs = 0;         ///< .agpr_count
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
  Invalid,        ///< the kernel cannot launch at all (see OccupancyEstimate::problem)
};

/// Human-readable name of a limiter ("vgpr", "sgpr", "lds", ...).
const char *occupancyLimiterName(OccupancyLimiter limiter) noexcept;

/// Result of the occupancy model for one kernel.
struct OccupancyEstimate {
  uint32_t wavesPerSimd = 0;      ///< min of the three limits below, 0 if Invalid
  OccupancyLimiter limiter = OccupancyLimiter::Invalid;
  uint32_t vgprWavesPerSimd = 0;  ///< limit from registers alone
  uint32_t sgprWavesPerSimd = 0;  ///< limit from SGPRs alone
  uint32_t ldsWavesPerSimd = 0;   ///< limit from LDS and workgroup slots
  uint32_t wavesPerWorkgroup = 0; ///< ceil(workgroupSize / wavefrontSize)
  uint32_t workgroupsPerCu = 0;   ///< resident workgroups per CU under all limits
  double resourceCeilingPercent = 0; ///< wavesPerSimd * SIMDs / wave slots per CU
  const char *problem = nullptr;  ///< why Invalid (static text), else nullptr
};

/// The occupancy model (docs/FACTS.md "Occupancy"):
///  - registers: N = alignTo(vgpr, agprAlignment) + agpr when AGPRs are used,
///    else vgpr; waves = min(totalVgprs / alignTo(N, granule), maxWaves);
///  - SGPRs: LLVM's table (<= 80: 10, <= 88: 9, <= 100: 8, else 7), capped;
///  - LDS and workgroup size: workgroups per CU limited by LDS (rounded to the
///    granule) and by barrier slots; waves = clamp(ceil(wgs * wavesPerWg / SIMDs), 1, max).
OccupancyEstimate estimateOccupancy(const TargetInfo &target,
                                    const KernelResourceUse &use) noexcept;

/// The "launch ceiling": resident waves actually used when `workgroupsLaunched`
/// workgroups are launched, as a percentage of all wave slots of the chip.
double launchCeilingPercent(const TargetInfo &target,
                            const OccupancyEstimate &estimate,
                            uint64_t workgroupsLaunched) noexcept;

} // namespace moec::rt

#endif // MOEC_TARGET_INFO_H
