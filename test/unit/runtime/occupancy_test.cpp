#include "moec/target/occupancy.h"

#include <catch2/catch.hpp>

using namespace moec::target;

namespace {

OccupancyEstimate estimate(uint32_t vgpr, uint32_t agpr, uint32_t sgpr, uint32_t lds,
                           uint32_t workgroupSize) {
  KernelResourceUse use;
  use.vgprs = vgpr;
  use.agprs = agpr;
  use.sgprs = sgpr;
  use.ldsBytes = lds;
  use.workgroupSize = workgroupSize;
  return estimateOccupancy(kGfx950, use);
}

} // namespace

TEST_CASE("gfx950 facts", "[occupancy]") {
  const TargetInfo &t = kGfx950;
  CHECK(std::string(t.arch) == "gfx950");
  CHECK(t.computeUnits == 256);
  CHECK(t.maxWavesPerCu() == 32);
  CHECK(t.ldsBytesPerCu == 163840);
  CHECK(&defaultTarget() == &t);
  CHECK(lookupTargetInfo("gfx950") == &t);
  CHECK(lookupTargetInfo("gfx950:sramecc+:xnack-") == &t);
  CHECK(lookupTargetInfo("gfx942") == &kGfx942);
  CHECK(lookupTargetInfo("gfx90a") == nullptr);
  CHECK(knownTargetNames() == "gfx950, gfx942, mi350p");
}

TEST_CASE("MI350P: gfx950 on four XCDs, 128 CUs", "[occupancy][part]") {
  const TargetInfo &t = kMi350p;
  CHECK(std::string(t.name) == "mi350p");
  CHECK(std::string(t.arch) == "gfx950");
  CHECK(t.computeUnits == 128);
  CHECK(t.xcds == 4);
  CHECK(t.hbmBytesPerSecond == 4.0e12);
  CHECK(lookupTargetInfo("mi350p") == &t);
  // Its arch alone means the first part, MI355X.
  CHECK(lookupTargetInfo("gfx950") == &kGfx950);
  CHECK(lookupPart("gfx950", 128) == &t);
  CHECK(lookupPart("gfx950:sramecc+:xnack-", 256) == &kGfx950);
  CHECK(lookupPart("gfx950", 0) == &kGfx950);
  CHECK(lookupPart("gfx942", 128) == nullptr);
  CHECK(lookupTargetInfoOrDefault("") == &defaultTarget());
  CHECK(lookupTargetInfoOrDefault("mi350p") == &t);
  CHECK(lookupTargetInfoOrDefault("gfx90a") == nullptr);
  CHECK(archOfComputeUnits(128) == "gfx950");
  CHECK(archOfComputeUnits(304) == "gfx942");
  CHECK(archOfComputeUnits(80).empty());
  CHECK(partComputeUnits("gfx950") == "256, 128");
  CHECK(describePart(t) == "mi350p (MI350P, 128 CUs)");
  // Per CU it is gfx950: the same kernel fits as often on each CU, and
  // the chip keeps half as many waves resident.
  KernelResourceUse use;
  use.vgprs = 128;
  use.sgprs = 64;
  use.workgroupSize = 256;
  CHECK(estimateOccupancy(t, use).workgroupsPerCu ==
        estimateOccupancy(kGfx950, use).workgroupsPerCu);
  CHECK(t.maxResidentWaves() * 2 == kGfx950.maxResidentWaves());
}

TEST_CASE("gfx942 facts", "[occupancy]") {
  const TargetInfo &t = kGfx942;
  CHECK(t.computeUnits == 304);
  CHECK(t.ldsBytesPerCu == 65536);
  CHECK(t.ldsAllocGranule == 512);
  CHECK_FALSE(t.hasScaledMfma);
  CHECK_FALSE(t.hasOcpFp8);
  CHECK(t.ldsDmaBytesPerLane == 4);
  // 64 KiB of LDS: a 40000-byte workgroup rounds to 40448 and fits once.
  KernelResourceUse use;
  use.vgprs = 32;
  use.sgprs = 32;
  use.ldsBytes = 40000;
  use.workgroupSize = 256;
  OccupancyEstimate e = estimateOccupancy(t, use);
  CHECK(e.workgroupsPerCu == 1);
  CHECK(e.limiter == OccupancyLimiter::Lds);
}

TEST_CASE("VGPR limit follows the table of docs/targets.md", "[occupancy]") {
  // N <= 64: 8, <= 72: 7, <= 80: 6, <= 96: 5, <= 128: 4, <= 168: 3, <= 256: 2, <= 512: 1.
  struct Case {
    uint32_t vgpr, waves;
  } cases[] = {{1, 8},   {64, 8},   {65, 7},   {72, 7},   {73, 6},  {80, 6},
               {81, 5},  {96, 5},   {97, 4},   {128, 4},  {129, 3}, {168, 3},
               {169, 2}, {256, 2},  {257, 1},  {512, 1}};
  for (const Case &c : cases) {
    INFO("vgpr " << c.vgpr);
    CHECK(estimate(c.vgpr, 0, 32, 0, 64).vgprWavesPerSimd == c.waves);
  }
}

TEST_CASE("the unified count aligns arch VGPRs to 4 before the AGPRs",
          "[occupancy]") {
  // LLVM's getTotalNumVGPRs for gfx90a and later, and its own test
  // (llvm/test/CodeGen/AMDGPU/agpr-register-count.ll, GFX90A): 9 VGPRs + 32
  // AGPRs are TotalNumVgprs 44; 40 + 16 are 56; 1 + 0 is 1.
  CHECK(unifiedVgprCount(kGfx950, 9, 32) == 44);
  CHECK(unifiedVgprCount(kGfx950, 40, 16) == 56);
  CHECK(unifiedVgprCount(kGfx950, 1, 0) == 1);
  CHECK(unifiedVgprCount(kGfx950, 90, 64) == 156);
  CHECK(architectedVgprCount(156, 64) == 92);
  CHECK(architectedVgprCount(61, 0) == 61);
}

TEST_CASE("the register limit takes .vgpr_count as the unified count",
          "[occupancy]") {
  // .vgpr_count 156 (92 + 64 AGPRs) -> granule 160 -> 512 / 160 = 3 waves;
  // the AGPRs are not added a second time.
  OccupancyEstimate e = estimate(156, 64, 40, 0, 256);
  CHECK(e.vgprWavesPerSimd == 3);
  CHECK(e.wavesPerSimd == 3);
  CHECK(e.limiter == OccupancyLimiter::Vgpr);
  CHECK(e.resourceCeilingPercent == Approx(37.5));
  // 256 + 256 fills the unified file: one wave.
  CHECK(estimate(512, 256, 40, 0, 64).wavesPerSimd == 1);
  // 64 + 8 AGPRs = 72 -> 7 waves.
  CHECK(estimate(72, 8, 40, 0, 64).vgprWavesPerSimd == 7);
  // The W2 tile 128x512x256 over 4 waves: LLVM 22 reports .vgpr_count 424
  // with .agpr_count 168 (test/unit/compiler/AgprOccupancyTest.cpp checks
  // this against LLVM). Adding the AGPRs again (592) made it unlaunchable;
  // 424 -> 1 wave, and its 96 KiB of LDS also allow one 4-wave group.
  OccupancyEstimate w2 = estimate(424, 168, 46, 98304, 256);
  CHECK(w2.limiter != OccupancyLimiter::Invalid);
  CHECK(w2.wavesPerSimd == 1);
  CHECK(w2.workgroupsPerCu == 1);
}

TEST_CASE("SGPR limit follows LLVM's table", "[occupancy]") {
  CHECK(estimate(32, 0, 80, 0, 64).sgprWavesPerSimd == 8); // 10, capped at 8
  CHECK(estimate(32, 0, 100, 0, 64).sgprWavesPerSimd == 8);
  OccupancyEstimate e = estimate(64, 0, 104, 0, 64);
  CHECK(e.sgprWavesPerSimd == 7);
  CHECK(e.wavesPerSimd == 7);
  CHECK(e.limiter == OccupancyLimiter::Sgpr);
  CHECK(e.workgroupsPerCu == 28); // 7 waves x 4 SIMDs of one-wave groups
}

TEST_CASE("a 256-thread kernel with 128 VGPRs", "[occupancy]") {
  OccupancyEstimate e = estimate(128, 0, 40, 0, 256);
  CHECK(e.wavesPerWorkgroup == 4);
  CHECK(e.vgprWavesPerSimd == 4);
  CHECK(e.ldsWavesPerSimd == 8); // 8 workgroups x 4 waves / 4 SIMDs
  CHECK(e.wavesPerSimd == 4);
  CHECK(e.limiter == OccupancyLimiter::Vgpr);
  CHECK(e.workgroupsPerCu == 4); // 16 wave slots / 4 waves
  CHECK(e.resourceCeilingPercent == Approx(50.0));
  // Launch ceiling: 100 workgroups x 4 waves over 256 CUs x 32 slots.
  CHECK(launchCeilingPercent(kGfx950, e, 100) == Approx(100.0 * 400 / 8192));
  // Enough workgroups: capped by the resource ceiling.
  CHECK(launchCeilingPercent(kGfx950, e, 100000) == Approx(50.0));
}

TEST_CASE("LDS limit rounds to the 1280-byte granule", "[occupancy]") {
  // 65536 -> 66560; 163840 / 66560 = 2 workgroups x 4 waves / 4 SIMDs = 2.
  OccupancyEstimate e = estimate(32, 0, 32, 65536, 256);
  CHECK(e.ldsWavesPerSimd == 2);
  CHECK(e.wavesPerSimd == 2);
  CHECK(e.limiter == OccupancyLimiter::Lds);
  CHECK(e.workgroupsPerCu == 2);
  CHECK(e.resourceCeilingPercent == Approx(25.0));
  // 81920 fits exactly twice; 81921 rounds to 83200 and fits once.
  CHECK(estimate(32, 0, 32, 81920, 256).workgroupsPerCu == 2);
  CHECK(estimate(32, 0, 32, 81921, 256).workgroupsPerCu == 1);
  // All of LDS, two-wave groups: ceil(1 x 2 / 4) = 1 wave per SIMD.
  OccupancyEstimate full = estimate(32, 0, 32, 163840, 128);
  CHECK(full.wavesPerSimd == 1);
  CHECK(full.limiter == OccupancyLimiter::Lds);
  // A tiny LDS user with one-wave groups is not limited (128 fit; 32 slots).
  OccupancyEstimate tiny = estimate(32, 0, 32, 1, 64);
  CHECK(tiny.wavesPerSimd == 8);
  CHECK(tiny.limiter == OccupancyLimiter::None);
  CHECK(tiny.workgroupsPerCu == 32);
}

TEST_CASE("workgroup slots limit 7-wave groups", "[occupancy]") {
  // 448 threads = 7 waves; min(32 / 7, 16) = 4 groups -> ceil(28 / 4) = 7 waves.
  OccupancyEstimate e = estimate(32, 0, 32, 0, 448);
  CHECK(e.wavesPerSimd == 7);
  CHECK(e.limiter == OccupancyLimiter::WorkgroupSlots);
  CHECK(e.workgroupsPerCu == 4);
}

TEST_CASE("unlaunchable kernels are reported, not estimated", "[occupancy]") {
  OccupancyEstimate e = estimate(32, 0, 32, 163841, 64);
  CHECK(e.limiter == OccupancyLimiter::Invalid);
  CHECK(e.wavesPerSimd == 0);
  CHECK(std::string(e.problem) == "LDS use exceeds the LDS per CU");
  CHECK(estimate(520, 300, 32, 0, 64).limiter == OccupancyLimiter::Invalid);
  CHECK(std::string(estimate(100, 300, 32, 0, 64).problem) ==
        "AGPR count exceeds the unified VGPR count");
  CHECK(estimate(32, 0, 109, 0, 64).limiter == OccupancyLimiter::Invalid);
  CHECK(estimate(32, 0, 32, 0, 0).limiter == OccupancyLimiter::Invalid);
  CHECK(estimate(32, 0, 32, 0, 1025).limiter == OccupancyLimiter::Invalid);
  // 1024 threads (16 waves, 4 per SIMD) x 256 VGPRs needs 1024 VGPRs per lane.
  OccupancyEstimate big = estimate(256, 0, 32, 0, 1024);
  CHECK(big.limiter == OccupancyLimiter::Invalid);
  CHECK(std::string(big.problem) == "workgroup needs more wave slots than the registers allow");
  CHECK(estimate(128, 0, 32, 0, 1024).workgroupsPerCu == 1);
  CHECK(std::string(occupancyLimiterName(OccupancyLimiter::Lds)) == "lds");
}

#include "moec/kernel_occupancy.h"

using moec::rt::KernelInfo;
using moec::rt::estimateKernelOccupancy;
using moec::rt::kernelResourceUse;

TEST_CASE("occupancy of a manifest kernel uses its workgroup size", "[occupancy]") {
  KernelInfo kernel;
  kernel.resources.vgpr = 128;
  kernel.resources.sgpr = 40;
  kernel.resources.ldsBytes = 65536;
  kernel.launch.workgroupSize = {64, 4, 1};
  KernelResourceUse use = kernelResourceUse(kernel);
  CHECK(use.workgroupSize == 256);
  OccupancyEstimate e = estimateKernelOccupancy(kGfx950, kernel);
  CHECK(e.wavesPerSimd == 2); // LDS: 2 groups x 4 waves / 4 SIMDs
  CHECK(e.limiter == OccupancyLimiter::Lds);
}
