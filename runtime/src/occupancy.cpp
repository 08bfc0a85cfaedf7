//===- occupancy.cpp - chip facts and occupancy model -----------*- C++ -*-===//
#include "moec/target_info.h"

#include <algorithm>

namespace moec::rt {
namespace {

constexpr TargetInfo kGfx950 = {
    /*arch=*/"gfx950",
    /*computeUnits=*/256,
    /*simdsPerCu=*/4,
    /*maxWavesPerSimd=*/8,
    /*wavefrontSize=*/64,
    /*totalVgprs=*/512,
    /*vgprAllocGranule=*/8,
    /*agprAlignment=*/4,
    /*sgprsPerSimd=*/800,
    /*addressableSgprs=*/102,
    /*extraSgprs=*/6,
    /*ldsBytesPerCu=*/160 * 1024,
    /*ldsAllocGranule=*/1280,
    /*maxWorkgroupsPerCu=*/16,
    /*maxSingleWaveWorkgroupsPerCu=*/32,
    /*maxWorkgroupSize=*/1024,
};

uint32_t alignUp(uint32_t value, uint32_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

uint32_t divideCeil(uint64_t value, uint64_t divisor) {
  return static_cast<uint32_t>((value + divisor - 1) / divisor);
}

/// LLVM's getOccupancyWithNumSGPRs for VOLCANIC_ISLANDS and later.
uint32_t wavesForSgprs(uint32_t sgprs) {
  if (sgprs <= 80)
    return 10;
  if (sgprs <= 88)
    return 9;
  if (sgprs <= 100)
    return 8;
  return 7;
}

} // namespace

const TargetInfo &gfx950TargetInfo() noexcept { return kGfx950; }

const TargetInfo *lookupTargetInfo(std::string_view arch) noexcept {
  std::string_view base = arch.substr(0, arch.find(':'));
  if (base == kGfx950.arch)
    return &kGfx950;
  return nullptr;
}

const char *occupancyLimiterName(OccupancyLimiter limiter) noexcept {
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

OccupancyEstimate estimateOccupancy(const TargetInfo &target,
                                    const KernelResourceUse &use) noexcept {
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
  estimate.wavesPerWorkgroup = divideCeil(use.workgroupSize, target.wavefrontSize);

  // Registers: the unified file holds arch VGPRs (aligned) followed by AGPRs.
  uint32_t registers = use.agprs > 0
                           ? alignUp(use.archVgprs, target.agprAlignment) + use.agprs
                           : use.archVgprs;
  registers = alignUp(std::max<uint32_t>(registers, 1), target.vgprAllocGranule);
  if (registers > target.totalVgprs)
    return invalid("VGPR + AGPR count exceeds the register file");
  estimate.vgprWavesPerSimd = std::min(target.totalVgprs / registers, maxWaves);

  if (use.sgprs > target.addressableSgprs + target.extraSgprs)
    return invalid("SGPR count exceeds the addressable SGPRs");
  estimate.sgprWavesPerSimd = std::min(wavesForSgprs(use.sgprs), maxWaves);

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
  consider(estimate.ldsWavesPerSimd, ldsLimitedWorkgroups < slotLimitedWorkgroups
                                         ? OccupancyLimiter::Lds
                                         : OccupancyLimiter::WorkgroupSlots);

  // Workgroups resident per CU: registers give wave slots per CU, a workgroup
  // needs all its waves resident at once.
  const uint32_t registerWaveSlotsPerCu =
      std::min(estimate.vgprWavesPerSimd, estimate.sgprWavesPerSimd) *
      target.simdsPerCu;
  estimate.workgroupsPerCu =
      std::min(workgroupsByLds, registerWaveSlotsPerCu / estimate.wavesPerWorkgroup);
  if (estimate.workgroupsPerCu == 0)
    return invalid("workgroup needs more wave slots than the registers allow");

  estimate.resourceCeilingPercent =
      100.0 * estimate.wavesPerSimd * target.simdsPerCu / target.maxWavesPerCu();
  return estimate;
}

double launchCeilingPercent(const TargetInfo &target,
                            const OccupancyEstimate &estimate,
                            uint64_t workgroupsLaunched) noexcept {
  if (estimate.limiter == OccupancyLimiter::Invalid)
    return 0;
  const uint64_t residentWorkgroups =
      uint64_t(estimate.workgroupsPerCu) * target.computeUnits;
  const uint64_t workgroups = std::min(workgroupsLaunched, residentWorkgroups);
  const uint64_t waves = workgroups * estimate.wavesPerWorkgroup;
  const uint64_t slots = uint64_t(target.maxWavesPerCu()) * target.computeUnits;
  const double percent = 100.0 * double(waves) / double(slots);
  return std::min(percent, estimate.resourceCeilingPercent);
}

} // namespace moec::rt
