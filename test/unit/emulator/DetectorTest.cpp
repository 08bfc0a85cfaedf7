//===- DetectorTest.cpp - raw buffers, barriers and the three detectors ---===//
//
// Each detector fires on a deliberately broken kernel and stays silent on
// its fixed twin.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include <catch2/catch.hpp>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

std::string replaceAll(std::string text, const std::string &from,
                       const std::string &to) {
  for (size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

const std::string kRawKernel = kernelText(
    "raw", R"mlir((%src: memref<64xi32, #gpu.address_space<global>>,
                %dst: memref<64xi32, #gpu.address_space<global>>,
                %vec: memref<64xi32, #gpu.address_space<global>>,
                %valid: i32))mlir",
    R"mlir(
    %v64 = arith.extui %valid : i32 to i64
    %rs = amdgpu.fat_raw_buffer_cast %src validBytes(%v64) : memref<64xi32, #gpu.address_space<global>> to memref<64xi32, #amdgpu.address_space<fat_raw_buffer>>
    %rd = amdgpu.fat_raw_buffer_cast %dst validBytes(%v64) : memref<64xi32, #gpu.address_space<global>> to memref<64xi32, #amdgpu.address_space<fat_raw_buffer>>
    %x = memref.load %rs[%tid] : memref<64xi32, #amdgpu.address_space<fat_raw_buffer>>
    %c1 = arith.constant 1 : i32
    %y = arith.addi %x, %c1 : i32
    memref.store %y, %rd[%tid] : memref<64xi32, #amdgpu.address_space<fat_raw_buffer>>
    %c16 = arith.constant 16 : index
    %c4 = arith.constant 4 : index
    %lane16 = arith.remui %tid, %c16 : index
    %q = arith.muli %lane16, %c4 : index
    %w = vector.load %rs[%q] : memref<64xi32, #amdgpu.address_space<fat_raw_buffer>>, vector<4xi32>
    %first = vector.extract %w[0] : i32 from vector<4xi32>
    %last = vector.extract %w[3] : i32 from vector<4xi32>
    %both = arith.addi %first, %last : i32
    memref.store %both, %vec[%tid] : memref<64xi32, #gpu.address_space<global>>
)mlir");

/// Two waves exchange halves through LDS. BARRIER is replaced by gpu.barrier
/// or by nothing.
const std::string kExchangeKernel = kernelText(
    "exchange", R"mlir((%out: memref<128xi32, #gpu.address_space<global>>) workgroup(%lds : memref<128xi32, #gpu.address_space<workgroup>>))mlir",
    R"mlir(
    %t = arith.index_cast %tid : index to i32
    memref.store %t, %lds[%tid] : memref<128xi32, #gpu.address_space<workgroup>>
    BARRIER
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %p = arith.addi %tid, %c64 : index
    %other = arith.remui %p, %c128 : index
    %v = memref.load %lds[%other] : memref<128xi32, #gpu.address_space<workgroup>>
    memref.store %v, %out[%tid] : memref<128xi32, #gpu.address_space<global>>
)mlir", 128);

} // namespace

TEST_CASE("raw buffers: out-of-range loads read 0, stores are dropped",
          "[raw-buffer]") {
  ParsedKernel kernel = parseKernel(kRawKernel);
  std::vector<int32_t> src(64);
  for (int i = 0; i < 64; ++i)
    src[size_t(i)] = 1000 + 3 * i;
  // 150 valid bytes: dwords 0..36 fully inside, dword 37 straddles the end.
  const int64_t validBytes = 150;
  GlobalMemory memory;
  unsigned srcId = addInput(memory, "src", src);
  unsigned dstId = memory.addBuffer("dst", 256);
  unsigned vecId = memory.addBuffer("vec", 256);
  memory.poison(dstId);
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(srcId),
                                KernelArgValue::makeBuffer(dstId),
                                KernelArgValue::makeBuffer(vecId),
                                KernelArgValue::makeScalar(validBytes)});
  CHECK(result.totalFindings() == 0);
  std::vector<int32_t> dst = readBuffer<int32_t>(memory, dstId);
  std::vector<int32_t> vec = readBuffer<int32_t>(memory, vecId);
  for (int t = 0; t < 64; ++t) {
    INFO("lane " << t);
    const bool inRange = (t + 1) * 4 <= validBytes;
    if (inRange) {
      CHECK(dst[size_t(t)] == src[size_t(t)] + 1);
      CHECK(memory.written(dstId)[4 * t] == 1);
    } else {
      // The store of 0 + 1 was dropped: the poison pattern is still there.
      CHECK(memory.written(dstId)[4 * t] == 0);
      CHECK(dst[size_t(t)] == -1);
    }
    // The 16-byte load at dword 4 * (t % 16) is in or out as a whole
    // (docs/emulator.md): bytes [16q, 16q + 16) against 150 valid bytes.
    const int q = t % 16;
    const bool vecIn = 16 * q + 16 <= validBytes;
    CHECK(vec[size_t(t)] == (vecIn ? src[size_t(4 * q)] + src[size_t(4 * q + 3)] : 0));
  }
  // Lanes 37..63 load out of range and drop their store; the vector loads
  // of q >= 9 (lanes with t % 16 >= 9: 7 per 16 lanes) read 0.
  CHECK(result.stats.rawLoadsOutOfRange == 27 + 4 * 7);
  CHECK(result.stats.rawStoresDropped == 27);
}

TEST_CASE("raw buffers bounded by the memref size when validBytes is absent",
          "[raw-buffer]") {
  std::string text = kRawKernel;
  text = replaceAll(text, " validBytes(%v64)", "");
  ParsedKernel kernel = parseKernel(text);
  std::vector<int32_t> src(64, 5);
  GlobalMemory memory;
  unsigned srcId = addInput(memory, "src", src);
  unsigned dstId = memory.addBuffer("dst", 256);
  unsigned vecId = memory.addBuffer("vec", 256);
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(srcId),
                                KernelArgValue::makeBuffer(dstId),
                                KernelArgValue::makeBuffer(vecId),
                                KernelArgValue::makeScalar(0)});
  CHECK(result.totalFindings() == 0);
  CHECK(result.stats.rawLoadsOutOfRange == 0);
  std::vector<int32_t> dst = readBuffer<int32_t>(memory, dstId);
  for (int t = 0; t < 64; ++t)
    CHECK(dst[size_t(t)] == 6);
}

TEST_CASE("a descriptor larger than its buffer is an out-of-bounds finding",
          "[raw-buffer][detector]") {
  ParsedKernel kernel = parseKernel(kRawKernel);
  std::vector<int32_t> src(32, 1); // 128 bytes registered, 256 claimed
  GlobalMemory memory;
  unsigned srcId = addInput(memory, "src", src);
  unsigned dstId = memory.addBuffer("dst", 256);
  unsigned vecId = memory.addBuffer("vec", 256);
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(srcId),
                                KernelArgValue::makeBuffer(dstId),
                                KernelArgValue::makeBuffer(vecId),
                                KernelArgValue::makeScalar(256)});
  CHECK(countOf(result, FindingKind::OutOfBounds) > 0);
  REQUIRE(!result.findings.empty());
  CHECK(result.findings[0].detail.find("'src'") != std::string::npos);
  CHECK(result.findings[0].lane == 32);
}

TEST_CASE("barriers order LDS traffic between waves", "[barrier]") {
  OutputRun run(replaceAll(kExchangeKernel, "BARRIER", "gpu.barrier"), 512);
  const RunResult &result = run.result;
  CHECK(result.totalFindings() == 0);
  CHECK(result.stats.barriers == 1);
  std::vector<int32_t> got = readBuffer<int32_t>(run.memory, run.out);
  for (int t = 0; t < 128; ++t)
    CHECK(got[size_t(t)] == (t + 64) % 128);
}

TEST_CASE("detector: a missing barrier is an LDS race", "[detector]") {
  LaunchConfig launch;
  launch.maxFindings = 200;
  OutputRun run(replaceAll(kExchangeKernel, "BARRIER", ""), 512, launch);
  const RunResult &result = run.result;
  // Wave 0 reads the half wave 1 has not written yet (never written);
  // wave 1 reads the half wave 0 wrote in the same (only) barrier interval.
  CHECK(countOf(result, FindingKind::UninitializedRead) == 64);
  // Wave 1's stores hit bytes wave 0 read in this interval (64), and its
  // loads read bytes wave 0 wrote in it (64).
  CHECK(countOf(result, FindingKind::LdsRace) == 128);
  bool sawRace = false, sawWar = false;
  for (const Finding &f : result.findings) {
    if (f.kind != FindingKind::LdsRace)
      continue;
    CHECK(f.kernel == "m::exchange");
    CHECK(f.wave == 1);
    CHECK(f.str().find("workgroup (0,0,0) wave 1 lane") != std::string::npos);
    if (f.opName == "memref.store") {
      sawWar = true;
      CHECK(f.location.find(":7:") != std::string::npos);
      CHECK(f.detail.find("read by wave 0") != std::string::npos);
    } else {
      sawRace = true;
      CHECK(f.opName == "memref.load");
      CHECK(f.location.find(":13:") != std::string::npos);
      CHECK(f.detail.find("written by wave 0") != std::string::npos);
    }
  }
  CHECK(sawWar);
  CHECK(sawRace);
}

TEST_CASE("detector: a store after another wave's read in one interval is a "
          "race", "[detector]") {
  const std::string text = kernelText(
      "war", R"mlir((%out: memref<128xi32, #gpu.address_space<global>>) workgroup(%lds : memref<128xi32, #gpu.address_space<workgroup>>))mlir",
      R"mlir(
    %t = arith.index_cast %tid : index to i32
    memref.store %t, %lds[%tid] : memref<128xi32, #gpu.address_space<workgroup>>
    gpu.barrier
    %c64 = arith.constant 64 : index
    %isWave0 = arith.cmpi ult, %tid, %c64 : index
    scf.if %isWave0 {
      %p = arith.addi %tid, %c64 : index
      %v = memref.load %lds[%p] : memref<128xi32, #gpu.address_space<workgroup>>
      memref.store %v, %out[%tid] : memref<128xi32, #gpu.address_space<global>>
    } else {
      %two = arith.constant 2 : i32
      %n = arith.muli %t, %two : i32
      memref.store %n, %lds[%tid] : memref<128xi32, #gpu.address_space<workgroup>>
    }
)mlir", 128);
  OutputRun run(text, 512);
  const RunResult &result = run.result;
  CHECK(countOf(result, FindingKind::LdsRace) == 64);
  REQUIRE(!result.findings.empty());
  CHECK(result.findings[0].wave == 1);
  CHECK(result.findings[0].opName == "memref.store");
  CHECK(result.findings[0].detail.find("read by wave 0") != std::string::npos);
}

TEST_CASE("detector: reads of never-written global and LDS memory",
          "[detector]") {
  const std::string text = kernelText(
      "uninit", R"mlir((%in: memref<64xi32, #gpu.address_space<global>>,
                   %out: memref<128xi32, #gpu.address_space<global>>) workgroup(%lds : memref<64xi32, #gpu.address_space<workgroup>>))mlir",
      R"mlir(
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    %c1 = arith.constant 1 : i32
    %x = memref.load %in[%tid] : memref<64xi32, #gpu.address_space<global>>
    memref.store %x, %out[%tid] : memref<128xi32, #gpu.address_space<global>>
    %r = arith.remui %tid, %c2 : index
    %even = arith.cmpi eq, %r, %c2 : index
    %t = arith.index_cast %tid : index to i32
    %odd = arith.cmpi ne, %r, %c2 : index
    scf.if %odd {
      %z = arith.constant 0 : index
      %isOdd = arith.cmpi ne, %r, %z : index
      scf.if %isOdd {
        memref.store %t, %lds[%tid] : memref<64xi32, #gpu.address_space<workgroup>>
      }
    }
    %y = memref.load %lds[%tid] : memref<64xi32, #gpu.address_space<workgroup>>
    %j = arith.addi %tid, %c64 : index
    memref.store %y, %out[%j] : memref<128xi32, #gpu.address_space<global>>
)mlir");
  ParsedKernel kernel = parseKernel(text);
  GlobalMemory memory;
  // `in` has only its first 32 dwords written by the host.
  unsigned in = memory.addBuffer("in", 256);
  std::vector<int32_t> half(32, 9);
  memory.write(in, 0, half.data(), 128);
  unsigned out = memory.addBuffer("out", 512);
  LaunchConfig launch;
  launch.maxFindings = 100;
  RunResult result =
      runOrFail(kernel, memory, bufferArgs({in, out}), launch);
  // 32 lanes read unwritten global dwords; the 32 even lanes read LDS that
  // only odd lanes wrote.
  CHECK(countOf(result, FindingKind::UninitializedRead) == 64);
  CHECK(countOf(result, FindingKind::LdsRace) == 0);
  CHECK(countOf(result, FindingKind::OutOfBounds) == 0);
  int globalReports = 0, ldsReports = 0;
  for (const Finding &f : result.findings) {
    if (f.detail.find("buffer 'in'") != std::string::npos) {
      ++globalReports;
      CHECK(f.lane >= 32);
    } else if (f.detail.find("LDS") != std::string::npos) {
      ++ldsReports;
      CHECK(f.lane % 2 == 0);
    }
  }
  CHECK(globalReports == 32);
  CHECK(ldsReports == 32);
}

TEST_CASE("detector: out-of-bounds global and LDS indices", "[detector]") {
  const std::string text = kernelText(
      "oob", R"mlir((%out: memref<64xi32, #gpu.address_space<global>>) workgroup(%lds : memref<64xi32, #gpu.address_space<workgroup>>))mlir",
      R"mlir(
    %t = arith.index_cast %tid : index to i32
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %shifted = arith.addi %tid, %c8 : index
    memref.store %t, %lds[%shifted] : memref<64xi32, #gpu.address_space<workgroup>>
    %next = arith.addi %tid, %c1 : index
    memref.store %t, %out[%next] : memref<64xi32, #gpu.address_space<global>>
)mlir");
  OutputRun run(text, 256);
  const RunResult &result = run.result;
  // LDS: lanes 56..63 index 64..71; global: lane 63 indexes 64.
  CHECK(countOf(result, FindingKind::OutOfBounds) == 9);
  bool sawGlobal = false;
  for (const Finding &f : result.findings) {
    if (f.detail.find("global memref") != std::string::npos) {
      sawGlobal = true;
      CHECK(f.lane == 63);
      CHECK(f.detail.find("byte 256") != std::string::npos);
    } else {
      CHECK(f.lane >= 56);
      CHECK(f.detail.find("LDS") != std::string::npos);
    }
  }
  CHECK(sawGlobal);
  // The out-of-bounds store went nowhere; the others landed.
  std::vector<int32_t> got = readBuffer<int32_t>(run.memory, run.out);
  for (int t = 1; t < 64; ++t)
    CHECK(got[size_t(t)] == t - 1);
}

TEST_CASE("a runaway loop is an error, not a hang", "[scheduler]") {
  const char *text = R"mlir(
gpu.module @m {
  gpu.func @spin(%out: memref<64xi32, #gpu.address_space<global>>) kernel
      attributes {known_block_size = array<i32: 64, 1, 1>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %big = arith.constant 1000000000000 : index
    %z = arith.constant 0 : i32
    %r = scf.for %i = %c0 to %big step %c1 iter_args(%a = %z) -> (i32) {
      scf.yield %a : i32
    }
    gpu.return
  }
}
)mlir";
  ParsedKernel kernel = parseKernel(text);
  GlobalMemory memory;
  unsigned out = memory.addBuffer("out", 256);
  LaunchConfig launch;
  launch.maxStepsPerWave = 100000;
  std::string error;
  auto result = runKernel(kernel.func, memory, bufferArgs({out}),
                          launch, error);
  CHECK(mlir::failed(result));
  CHECK(error.find("exceeded 100000 steps") != std::string::npos);
}

TEST_CASE("many workgroups share the resident slots", "[scheduler]") {
  // Every workgroup writes the same 128 outputs: what matters is that all
  // workgroups run, each with its own LDS, and none sees another's bytes.
  LaunchConfig launch;
  launch.grid = {7, 1, 1};
  launch.maxResidentWorkgroups = 3;
  OutputRun run(replaceAll(kExchangeKernel, "BARRIER", "gpu.barrier"), 512,
                launch);
  const RunResult &result = run.result;
  CHECK(result.totalFindings() == 0);
  CHECK(result.stats.workgroups == 7);
  CHECK(result.stats.barriers == 7);
}

TEST_CASE("argument binding errors are reported", "[scheduler]") {
  ParsedKernel kernel = parseKernel(kRawKernel);
  GlobalMemory memory;
  unsigned buffer = memory.addBuffer("b", 256);
  std::string error;
  auto result = runKernel(kernel.func, memory,
                          bufferArgs({buffer}), LaunchConfig(),
                          error);
  CHECK(mlir::failed(result));
  CHECK(error.find("takes 4 arguments, got 1") != std::string::npos);
}
