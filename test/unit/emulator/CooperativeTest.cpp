//===- CooperativeTest.cpp - scf.while, spin-waits, deadlocks, EP ranks ---===//
//
// The residency cap from the occupancy model against hand-computed values.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/manifest.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("the residency cap follows the occupancy model", "[residency]") {
  std::string error;
  // 128 VGPRs, 64 SGPRs, no LDS, 256 threads (4 waves): 512 / 128 = 4 waves
  // per SIMD, 16 wave slots per CU, 4 workgroups of 4 waves per CU.
  moec::rt::KernelResources vgprBound;
  vgprBound.vgpr = 128;
  vgprBound.sgpr = 64;
  mlir::FailureOr<unsigned> cap = residentWorkgroupCap(vgprBound, 256, 256, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 4 * 256);
  cap = residentWorkgroupCap(vgprBound, 256, 2, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 8);

  // 96 VGPRs + 128 AGPRs = 224 registers: 2 waves per SIMD, 8 slots per CU;
  // 512 threads are 8 waves, so one workgroup per CU (LDS: 40000 bytes round
  // to 40960, 4 per CU, not the limit).
  moec::rt::KernelResources agprBound;
  agprBound.vgpr = 96;
  agprBound.agpr = 128;
  agprBound.sgpr = 90;
  agprBound.ldsBytes = 40000;
  cap = residentWorkgroupCap(agprBound, 512, 256, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 256);

  // One wave, 32 VGPRs, 64 KiB of LDS: 65536 rounds to 66560 bytes, two fit
  // in 160 KiB, so LDS bounds it at 2 workgroups per CU.
  moec::rt::KernelInfo ldsBound;
  ldsBound.resources.vgpr = 32;
  ldsBound.resources.sgpr = 32;
  ldsBound.resources.ldsBytes = 65536;
  ldsBound.launch.workgroupSize = {{64, 1, 1}};
  cap = residentWorkgroupCap(ldsBound, 256, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 512);

  // More LDS than a CU has: cannot launch.
  moec::rt::KernelResources tooBig;
  tooBig.vgpr = 32;
  tooBig.ldsBytes = 200 * 1024;
  cap = residentWorkgroupCap(tooBig, 64, 256, error);
  CHECK(mlir::failed(cap));
  CHECK(contains(error, "LDS use exceeds the LDS per CU"));
}
