//===- target_info.h - facts of the chips moec compiles for -----*- C++ -*-===//
//
// Every number moec knows about a GPU lives in one TargetInfo per chip: the
// dialect's verifiers, the code generator, the backend, the resource gates,
// the occupancy model, the emulator's residency cap and the runtime's load
// checks read it, and nothing else compares architecture strings. Sources
// of each value: docs/targets.md. Plain C++17, header-only, no dependency.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TARGET_TARGET_INFO_H
#define MOEC_TARGET_TARGET_INFO_H

#include "moec/target/hazard_rules.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace moec::target {

/// Bits of the cache-policy immediate (CPol) of buffer and global memory
/// instructions, as the buffer intrinsics' aux operand takes them.
struct CachePolicyBits {
  uint32_t sc0; ///< scope bit 0 (GLC)
  uint32_t nt;  ///< non-temporal (SLC)
  uint32_t sc1; ///< scope bit 1 (SCC)
};

/// Hardware facts of one GPU target.
struct TargetInfo {
  /// The name users pass (`moec compile --target`, `moe.target`,
  /// MOEC_EMULATED_TARGET): the arch for the first part of a chip
  /// ("gfx950"), the product in lower case for a further part of the same
  /// ISA ("mi350p").
  const char *name;
  /// LLVM processor name, e.g. "gfx950": the ISA, which every part of a
  /// chip shares and its code objects carry.
  const char *arch;
  /// The product it is sold as, e.g. "MI355X".
  const char *product;
  /// CUs on the whole chip.
  uint32_t computeUnits;
  /// Compute dies (XCDs); workgroups are dispatched to them round-robin.
  uint32_t xcds;
  /// SIMDs (EUs) per CU.
  uint32_t simdsPerCu;
  /// Wave slots per SIMD.
  uint32_t maxWavesPerSimd;
  /// Lanes per wave.
  uint32_t wavefrontSize;
  /// Unified VGPR + AGPR file per lane.
  uint32_t totalVgprs;
  /// Allocation granule of the unified file.
  uint32_t vgprAllocGranule;
  /// Architected VGPRs are aligned to this before the AGPRs.
  uint32_t agprAlignment;
  /// FP32 accumulator registers per lane a GEMM tile may hold: the unified
  /// file less 64 registers for operands, addresses and the epilogue.
  uint32_t accumulatorRegs;
  /// Physical SGPRs per SIMD.
  uint32_t sgprsPerSimd;
  /// SGPRs a kernel may name.
  uint32_t addressableSgprs;
  /// Reserved SGPRs (VCC, flat scratch, XNACK) on top of the addressable.
  uint32_t extraSgprs;
  /// LDS per CU, which is also the most one workgroup may use.
  uint32_t ldsBytesPerCu;
  /// LDS allocation granule in bytes.
  uint32_t ldsAllocGranule;
  /// Workgroups per CU of more than one wave (barrier resources).
  uint32_t maxWorkgroupsPerCu;
  /// Workgroups per CU when a workgroup is one wave.
  uint32_t maxSingleWaveWorkgroupsPerCu;
  /// Threads per workgroup.
  uint32_t maxWorkgroupSize;
  /// Cache-policy bits of memory instructions.
  CachePolicyBits cachePolicy;
  /// V_MFMA_SCALE_F32_16X16X128_F8F6F4 and V_MFMA_SCALE_F32_32X32X64_F8F6F4:
  /// FP8/FP6/FP4 operands with E8M0 block scales (MXFP4, MXFP8).
  bool hasScaledMfma;
  /// OCP FP8 (E4M3FN, E5M2) conversions; without them the chip's FP8 is
  /// the FNUZ variant (E4M3FNUZ, maximum 240).
  bool hasOcpFp8;
  /// Widest LDS DMA per lane (BUFFER_LOAD_DWORD* with LDS) in bytes.
  uint32_t ldsDmaBytesPerLane;
  /// The chip's EF_AMDGPU_MACH value in a code object's ELF e_flags (bits
  /// 0-7; llvm/BinaryFormat/ELF.h): the reader refuses a code object built
  /// for another chip.
  uint32_t elfMach;
  /// Peak HBM bandwidth in bytes per second (the cost model's memory bound).
  double hbmBytesPerSecond;
  /// Peak engine clock in Hz.
  double peakClockHz;
  /// LDS bytes one CU serves per clock.
  uint32_t ldsBytesPerCuCycle;
  /// Issue cycles of one scaled MFMA with an FP8 operand, 16x16x128 and
  /// 32x32x64 (0 on a chip without scaled MFMA).
  uint32_t scaledMfma16x16x128Fp8Cycles;
  uint32_t scaledMfma32x32x64Fp8Cycles;
  /// The software-visible hazards of the ISA (hazard_rules.h), which the
  /// ISA verifier checks every code object against; null where moec has no
  /// table for the ISA (its code objects are then verified without them).
  const HazardTable *hazards;

  /// Wave slots per CU (simdsPerCu * maxWavesPerSimd).
  constexpr uint32_t maxWavesPerCu() const {
    return simdsPerCu * maxWavesPerSimd;
  }
  /// Wave slots of the whole chip: no launch can have more waves resident.
  constexpr uint64_t maxResidentWaves() const {
    return uint64_t(computeUnits) * maxWavesPerCu();
  }
};

/// gfx950: Instinct MI355X / MI350X (CDNA4).
inline constexpr TargetInfo kGfx950 = {
    /*name=*/"gfx950",
    /*arch=*/"gfx950",
    /*product=*/"MI355X",
    /*computeUnits=*/256,
    /*xcds=*/8,
    /*simdsPerCu=*/4,
    /*maxWavesPerSimd=*/8,
    /*wavefrontSize=*/64,
    /*totalVgprs=*/512,
    /*vgprAllocGranule=*/8,
    /*agprAlignment=*/4,
    /*accumulatorRegs=*/448,
    /*sgprsPerSimd=*/800,
    /*addressableSgprs=*/102,
    /*extraSgprs=*/6,
    /*ldsBytesPerCu=*/160 * 1024,
    /*ldsAllocGranule=*/1280,
    /*maxWorkgroupsPerCu=*/16,
    /*maxSingleWaveWorkgroupsPerCu=*/32,
    /*maxWorkgroupSize=*/1024,
    /*cachePolicy=*/{/*sc0=*/1, /*nt=*/2, /*sc1=*/16},
    /*hasScaledMfma=*/true,
    /*hasOcpFp8=*/true,
    /*ldsDmaBytesPerLane=*/16,
    /*elfMach=*/0x04f, // EF_AMDGPU_MACH_AMDGCN_GFX950
    /*hbmBytesPerSecond=*/8.0e12,
    /*peakClockHz=*/2.4e9,
    /*ldsBytesPerCuCycle=*/128,
    /*scaledMfma16x16x128Fp8Cycles=*/32,
    /*scaledMfma32x32x64Fp8Cycles=*/64,
    /*hazards=*/&kGfx950Hazards,
};

/// mi350p: Instinct MI350P, the PCIe part of the gfx950 ISA (CDNA4): four
/// of MI355X's eight XCDs, so 128 CUs, half the HBM bandwidth (4 TB/s) and
/// a 2.2 GHz peak clock; every per-CU fact is gfx950's. AITER keys its tuned
/// rows on this CU count (cu_num 128).
inline constexpr TargetInfo kMi350p = [] {
  TargetInfo part = kGfx950;
  part.name = "mi350p";
  part.product = "MI350P";
  part.computeUnits = 128;
  part.xcds = 4;
  part.hbmBytesPerSecond = 4.0e12;
  part.peakClockHz = 2.2e9;
  return part;
}();

/// gfx942: Instinct MI300X / MI325X (CDNA3). Same register files, wave
/// slots and cache-policy bits as gfx950; more CUs, less LDS, no scaled
/// MFMA, FNUZ FP8 and 4-byte LDS DMA.
inline constexpr TargetInfo kGfx942 = {
    /*name=*/"gfx942",
    /*arch=*/"gfx942",
    /*product=*/"MI300X",
    /*computeUnits=*/304,
    /*xcds=*/8,
    /*simdsPerCu=*/4,
    /*maxWavesPerSimd=*/8,
    /*wavefrontSize=*/64,
    /*totalVgprs=*/512,
    /*vgprAllocGranule=*/8,
    /*agprAlignment=*/4,
    /*accumulatorRegs=*/448,
    /*sgprsPerSimd=*/800,
    /*addressableSgprs=*/102,
    /*extraSgprs=*/6,
    /*ldsBytesPerCu=*/64 * 1024,
    /*ldsAllocGranule=*/512,
    /*maxWorkgroupsPerCu=*/16,
    /*maxSingleWaveWorkgroupsPerCu=*/32,
    /*maxWorkgroupSize=*/1024,
    /*cachePolicy=*/{/*sc0=*/1, /*nt=*/2, /*sc1=*/16},
    /*hasScaledMfma=*/false,
    /*hasOcpFp8=*/false,
    /*ldsDmaBytesPerLane=*/4,
    /*elfMach=*/0x04c, // EF_AMDGPU_MACH_AMDGCN_GFX942
    /*hbmBytesPerSecond=*/5.3e12,
    /*peakClockHz=*/2.1e9,
    /*ldsBytesPerCuCycle=*/128,
    /*scaledMfma16x16x128Fp8Cycles=*/0,
    /*scaledMfma32x32x64Fp8Cycles=*/0,
    /*hazards=*/nullptr,
};

/// ELF facts shared by every AMDGPU code object (llvm/BinaryFormat/ELF.h):
/// e_machine EM_AMDGPU, and the mask of e_flags that holds the chip.
inline constexpr uint16_t kElfMachineAmdgpu = 224;
inline constexpr uint32_t kElfMachMask = 0x0ff;

/// The most bytes one buffer resource (V#) addresses on gfx9 chips: its
/// NUM_RECORDS field is 32 bits. Every tensor a kernel reads through one
/// must fit.
inline constexpr uint64_t kMaxBufferBytes = 0xffffffffu;

/// Every chip (and part) moec has facts for, the default first; the first
/// part of each arch is the one a bare arch name means.
inline constexpr const TargetInfo *kKnownTargets[] = {&kGfx950, &kGfx942,
                                                       &kMi350p};

/// The chip moec compiles for when nothing names one: gfx950.
constexpr const TargetInfo &defaultTarget() noexcept { return kGfx950; }

/// The TargetInfo named `name`: a part's name ("mi350p") or an arch, also
/// as a target id with features ("gfx950:sramecc+:xnack-"), which means the
/// arch's first part. nullptr when moec has no facts for it.
inline const TargetInfo *lookupTargetInfo(std::string_view name) noexcept {
  const std::string_view base = name.substr(0, name.find(':'));
  for (const TargetInfo *target : kKnownTargets)
    if (base == target->name)
      return target;
  return nullptr;
}

/// lookupTargetInfo, where an empty name means the default chip: the rule
/// for a command-line option or environment variable that names no chip.
inline const TargetInfo *lookupTargetInfoOrDefault(
    std::string_view name) noexcept {
  return name.empty() ? &defaultTarget() : lookupTargetInfo(name);
}

/// The part of `arch` (features allowed, as in lookupTargetInfo) with
/// `computeUnits` CUs; 0 CUs means the arch's first part (a bundle written
/// before manifests recorded the part). nullptr when moec knows no such
/// part.
inline const TargetInfo *lookupPart(std::string_view arch,
                                    uint32_t computeUnits) noexcept {
  const std::string_view base = arch.substr(0, arch.find(':'));
  for (const TargetInfo *target : kKnownTargets)
    if (base == target->arch &&
        (computeUnits == 0 || computeUnits == target->computeUnits))
      return target;
  return nullptr;
}

/// The arch of the parts moec knows with `computeUnits` CUs ("" when none
/// or when parts of different archs share the count).
inline std::string_view archOfComputeUnits(uint32_t computeUnits) noexcept {
  std::string_view arch;
  for (const TargetInfo *target : kKnownTargets)
    if (target->computeUnits == computeUnits) {
      if (!arch.empty() && arch != target->arch)
        return {};
      arch = target->arch;
    }
  return arch;
}

/// The CU counts of `arch`'s parts, comma-separated ("256, 128"), for
/// messages.
inline std::string partComputeUnits(std::string_view arch) {
  std::string counts;
  for (const TargetInfo *target : kKnownTargets)
    if (arch.substr(0, arch.find(':')) == target->arch)
      counts += (counts.empty() ? "" : ", ") +
                std::to_string(target->computeUnits);
  return counts;
}

/// The known chip names, comma-separated ("gfx950, gfx942, mi350p"), for
/// messages.
inline std::string knownTargetNames() {
  std::string names;
  for (const TargetInfo *target : kKnownTargets)
    names += (names.empty() ? "" : ", ") + std::string(target->name);
  return names;
}

/// The part in words, for messages: "gfx950 (MI355X, 256 CUs)".
inline std::string describePart(const TargetInfo &target) {
  return std::string(target.name) + " (" + target.product + ", " +
         std::to_string(target.computeUnits) + " CUs)";
}

} // namespace moec::target

#endif // MOEC_TARGET_TARGET_INFO_H
