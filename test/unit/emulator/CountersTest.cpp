//===- CountersTest.cpp - RunStats counters against hand-derived counts ---===//
//
// Every expected number below is derived by hand from the kernel text and
// the model in docs/emulator.md ("Counters"), op by op, in the comments.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include <catch2/catch.hpp>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

// One wave per workgroup, grid 2. Per op: what it moves and its LDS bank
// conflicts (64 banks of 4 bytes; 16-byte accesses in phases of 16 lanes).
const std::string kCountersKernel = kernelText(
    "counters", R"mlir((%in: memref<256xi32, #gpu.address_space<global>>,
                     %out: memref<128xi32, #gpu.address_space<global>>,
                     %flag: memref<16xi32, #gpu.address_space<global>>)
      workgroup(%lds : memref<4096xi32, #gpu.address_space<workgroup>>))mlir",
    R"mlir(
    %bid = gpu.block_id x
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %c5 = arith.constant 5 : index
    %c8 = arith.constant 8 : index
    %c64 = arith.constant 64 : index
    %x = memref.load %in[%tid] : memref<256xi32, #gpu.address_space<global>>
    %u5 = memref.load %in[%c5] : memref<256xi32, #gpu.address_space<global>>
    %s2 = arith.muli %tid, %c2 : index
    memref.store %x, %lds[%s2] : memref<4096xi32, #gpu.address_space<workgroup>>
    %v = vector.broadcast %x : i32 to vector<4xi32>
    %s8 = arith.muli %tid, %c8 : index
    vector.store %v, %lds[%s8] : memref<4096xi32, #gpu.address_space<workgroup>>, vector<4xi32>
    gpu.barrier
    %y = memref.load %lds[%s2] : memref<4096xi32, #gpu.address_space<workgroup>>
    %w = vector.load %lds[%s8] : memref<4096xi32, #gpu.address_space<workgroup>>, vector<4xi32>
    %u0 = memref.load %lds[%c0] : memref<4096xi32, #gpu.address_space<workgroup>>
    %s64 = arith.muli %tid, %c64 : index
    memref.store %y, %lds[%s64] : memref<4096xi32, #gpu.address_space<workgroup>>
    %w0 = vector.extract %w[0] : i32 from vector<4xi32>
    %t1 = arith.addi %y, %w0 : i32
    %t2 = arith.addi %t1, %u0 : i32
    %t3 = arith.addi %t2, %u5 : i32
    %ob = arith.muli %bid, %c64 : index
    %oi = arith.addi %ob, %tid : index
    memref.store %t3, %out[%oi] : memref<128xi32, #gpu.address_space<global>>
    memref.store %t3, %flag[%c0] : memref<16xi32, #gpu.address_space<global>>
)mlir");

// One scaled MFMA 16x16x128, FP8 x FP8, scalar scales.
const std::string kMfmaKernel = kernelText(
    "mfma", R"mlir((%a: memref<512xi32, #gpu.address_space<global>>,
                 %b: memref<512xi32, #gpu.address_space<global>>,
                 %sa: memref<64xi8, #gpu.address_space<global>>,
                 %sb: memref<64xi8, #gpu.address_space<global>>,
                 %c: memref<256xf32, #gpu.address_space<global>>,
                 %d: memref<256xf32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %c8 = arith.constant 8 : index
    %c4 = arith.constant 4 : index
    %r8 = arith.muli %tid, %c8 : index
    %r4 = arith.muli %tid, %c4 : index
    %ai = vector.load %a[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<8xi32>
    %av = vector.bitcast %ai : vector<8xi32> to vector<32xf8E4M3FN>
    %bi = vector.load %b[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<8xi32>
    %bv = vector.bitcast %bi : vector<8xi32> to vector<32xf8E4M3FN>
    %sai = memref.load %sa[%tid] : memref<64xi8, #gpu.address_space<global>>
    %sav = arith.bitcast %sai : i8 to f8E8M0FNU
    %sbi = memref.load %sb[%tid] : memref<64xi8, #gpu.address_space<global>>
    %sbv = arith.bitcast %sbi : i8 to f8E8M0FNU
    %cv = vector.load %c[%r4] : memref<256xf32, #gpu.address_space<global>>, vector<4xf32>
    %dv = amdgpu.scaled_mfma 16x16x128 (%sav[0] * %av) * (%sbv[0] * %bv) + %cv : f8E8M0FNU, vector<32xf8E4M3FN>, f8E8M0FNU, vector<32xf8E4M3FN>, vector<4xf32>
    vector.store %dv, %d[%r4] : memref<256xf32, #gpu.address_space<global>>, vector<4xf32>
)mlir");

} // namespace

TEST_CASE("counters: global and LDS bytes, distinct lines, bank conflicts",
          "[counters]") {
  ParsedKernel kernel = parseKernel(kCountersKernel);
  std::vector<int32_t> in(256);
  for (int i = 0; i < 256; ++i)
    in[size_t(i)] = 7 * i + 1;
  LaunchConfig launch;
  launch.grid = {2, 1, 1};
  const BufferRun run(kernel,
                      {BufferArg::input("in", in),
                       BufferArg::output("out", 128 * 4),
                       BufferArg::output("flag", 16 * 4)},
                      launch);
  const RunResult &result = run.result;
  REQUIRE(result.totalFindings() == 0);
  const RunStats &s = result.stats;
  // Per workgroup: in[tid] 64 x 4 bytes; in[5] a uniform load, once, 4.
  CHECK(s.globalBytesRead == 2 * (256 + 4));
  // Both workgroups read bytes 0..255 of `in`: lines 0..3, counted once.
  CHECK(s.globalLinesRead == 4);
  // out[64 bid + tid] 64 x 4, and flag[0] stored by every lane (64 x 4).
  CHECK(s.globalBytesWritten == 2 * (256 + 256));
  // out: lines 0..3 (workgroup 0) and 4..7 (workgroup 1); flag: line 0.
  CHECK(s.globalLinesWritten == 8 + 1);
  // LDS writes: lds[2 tid] 256, vector<4> at lds[8 tid] 1024, lds[64 tid]
  // 256. Reads: lds[2 tid] 256, vector<4> at lds[8 tid] 1024, lds[0]
  // uniform 4.
  CHECK(s.ldsBytesWritten == 2 * (256 + 1024 + 256));
  CHECK(s.ldsBytesRead == 2 * (256 + 1024 + 4));
  // lds[2 tid] (store and load): one phase of 64 dwords 0, 2, .., 126;
  // every even bank holds two of them: 1 extra cycle each.
  // vector<4> at lds[8 tid] (store and load): 4 phases of 16 lanes, lanes
  // t and t + 8 of a phase share banks (8 t mod 64): 1 extra per phase, 4.
  // lds[64 tid]: 64 distinct dwords in bank 0: 63 extra. lds[0] uniform: 0.
  CHECK(s.ldsBankConflicts == 2 * (1 + 1 + 4 + 4 + 63));
  CHECK(s.scaledMfmas == 0);
  // 29 ops per wave (the 28 lines of the body and gpu.return), one wave
  // per workgroup.
  CHECK(s.otherInstructions == 2 * 29);
  REQUIRE(result.launchStats.size() == 1);
  CHECK(result.launchStats[0].ldsBankConflicts == s.ldsBankConflicts);
}

TEST_CASE("counters: a scaled MFMA and its operand traffic", "[counters]") {
  ParsedKernel kernel = parseKernel(kMfmaKernel);
  std::vector<uint8_t> a(2048), b(2048), sa(64, 127), sb(64, 127);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>((i * 37 + 5) % 0x7E);
    b[i] = static_cast<uint8_t>((i * 11 + 3) % 0x7E);
  }
  std::vector<float> c(256, 0.5f);
  const BufferRun run(
      kernel, {BufferArg::input("a", a), BufferArg::input("b", b),
               BufferArg::input("sa", sa), BufferArg::input("sb", sb),
               BufferArg::input("c", c), BufferArg::output("d", 256 * 4)});
  REQUIRE(run.result.totalFindings() == 0);
  const RunStats &s = run.result.stats;
  CHECK(s.scaledMfmas == 1);
  // A and B: 64 lanes x 32 bytes each; scales 64 x 1 each; C 64 x 16.
  CHECK(s.globalBytesRead == 2048 + 2048 + 64 + 64 + 1024);
  CHECK(s.globalLinesRead == 32 + 32 + 1 + 1 + 16);
  CHECK(s.globalBytesWritten == 1024);
  CHECK(s.globalLinesWritten == 16);
  CHECK(s.ldsBytesRead == 0);
  CHECK(s.ldsBytesWritten == 0);
  CHECK(s.ldsBankConflicts == 0);
  // 17 ops in the body; the MFMA is not among the other instructions.
  CHECK(s.otherInstructions == 16);
}

TEST_CASE("counters: two launches sum, lines are distinct per launch",
          "[counters]") {
  ParsedKernel kernel = parseKernel(kCountersKernel);
  std::vector<int32_t> in(256, 3);
  GlobalMemory memory;
  unsigned inId = addInput(memory, "in", in);
  unsigned outA = memory.addBuffer("outA", 128 * 4);
  unsigned outB = memory.addBuffer("outB", 128 * 4);
  unsigned flagA = memory.addBuffer("flagA", 16 * 4);
  unsigned flagB = memory.addBuffer("flagB", 16 * 4);
  std::vector<KernelLaunch> launches(2);
  for (int i = 0; i < 2; ++i) {
    launches[size_t(i)].func = kernel.func;
    launches[size_t(i)].launch.grid = {1, 1, 1};
    launches[size_t(i)].label = "rank " + std::to_string(i);
    launches[size_t(i)].args = {KernelArgValue::makeBuffer(inId),
                                KernelArgValue::makeBuffer(i ? outB : outA),
                                KernelArgValue::makeBuffer(i ? flagB : flagA)};
  }
  std::string error;
  auto result = runKernels(launches, memory, error);
  REQUIRE(succeeded(result));
  REQUIRE(result->launchStats.size() == 2);
  for (const RunStats &one : result->launchStats) {
    CHECK(one.globalLinesRead == 4);
    CHECK(one.globalLinesWritten == 4 + 1);
    CHECK(one.ldsBankConflicts == 73);
  }
  // Each launch reads the same 4 lines of `in`: summed, not merged.
  CHECK(result->stats.globalLinesRead == 8);
  CHECK(result->stats.globalBytesRead == 2 * 260);
  CHECK(result->stats.ldsBankConflicts == 2 * 73);
}

namespace {

// Every lane of every workgroup reads one byte past `in` (an out-of-bounds
// finding each) and one never-written byte of `gap`, so each of the 8
// workgroups reports findings.
const std::string kFindingsKernel = kernelText(
    "findings", R"mlir((%in: memref<64xi32, #gpu.address_space<global>>,
                     %gap: memref<512xi32, #gpu.address_space<global>>,
                     %out: memref<512xi32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %bid = gpu.block_id x
    %c64 = arith.constant 64 : index
    %base = arith.muli %bid, %c64 : index
    %i = arith.addi %base, %tid : index
    %x = memref.load %in[%i] : memref<64xi32, #gpu.address_space<global>>
    %y = memref.load %gap[%i] : memref<512xi32, #gpu.address_space<global>>
    %s = arith.addi %x, %y : i32
    memref.store %s, %out[%i] : memref<512xi32, #gpu.address_space<global>>
)mlir");

RunResult runFindings(ParsedKernel &kernel, unsigned threads,
                      GlobalMemory &memory, unsigned &outId) {
  std::vector<int32_t> in(64, 5);
  unsigned inId = addInput(memory, "in", in);
  unsigned gapId = memory.addBuffer("gap", 512 * 4);
  outId = memory.addBuffer("out", 512 * 4);
  LaunchConfig launch;
  launch.grid = {8, 1, 1};
  launch.threads = threads;
  launch.maxFindings = 100;
  return runOrFail(kernel, memory,
                   bufferArgs({inId, gapId, outId}),
                   launch);
}

} // namespace

TEST_CASE("threads: a run on 3 threads equals the run on one, findings "
          "included", "[threads]") {
  ParsedKernel kernel = parseKernel(kFindingsKernel);
  GlobalMemory one, three;
  unsigned outOne = 0, outThree = 0;
  RunResult a = runFindings(kernel, 1, one, outOne);
  RunResult b = runFindings(kernel, 3, three, outThree);
  // Workgroup 0 reads `in` in bounds; workgroups 1..7 read past it (64
  // lanes each); every lane of every workgroup reads never-written `gap`.
  CHECK(countOf(a, FindingKind::OutOfBounds) == 7 * 64);
  CHECK(countOf(a, FindingKind::UninitializedRead) == 8 * 64);
  CHECK(a.findingCounts == b.findingCounts);
  REQUIRE(a.findings.size() == 100);
  REQUIRE(b.findings.size() == a.findings.size());
  for (size_t i = 0; i < a.findings.size(); ++i)
    CHECK(a.findings[i].str() == b.findings[i].str());
  // In workgroup order: the first kept findings are workgroup 0's.
  CHECK(a.findings.front().workgroup[0] == 0);
  CHECK(std::memcmp(one.data(outOne), three.data(outThree), 512 * 4) == 0);
  CHECK(std::memcmp(one.written(outOne), three.written(outThree), 512 * 4) ==
        0);
  CHECK(a.stats.waveOps == b.stats.waveOps);
  CHECK(a.stats.globalLinesRead == b.stats.globalLinesRead);
  CHECK(a.stats.globalBytesWritten == b.stats.globalBytesWritten);
}

TEST_CASE("threads: a W2 stage on 3 threads is bit-identical to one thread",
          "[threads]") {
  moec::StageSpec spec;
  spec.stage = moec::abi::Stage::W2;
  spec.fields = {{"hidden", "512"},      {"intermediate", "512"},
                 {"experts", "8"},       {"top_k", "2"},
                 {"ep", "1"},            {"m", "16"},
                 {"n", "128"},           {"k", "256"},
                 {"waves", "4"},         {"mfma", "m16n16k128"},
                 {"orientation", "b_major"}, {"b_cache", "nt"}};
  BuiltStage built = buildStageOrFail(spec);
  DataOptions options;
  options.tokens = 40;
  std::vector<StageOutcome> outcomes(2);
  for (int t = 0; t < 2; ++t) {
    LayerData data;
    LaunchConfig launch;
    launch.threads = t ? 3 : 1;
    std::string error;
    REQUIRE(succeeded(
        built.harness->check(data, 0, options, launch, outcomes[size_t(t)],
                             error)));
    CHECK(outcomes[size_t(t)].pass);
  }
  const RunStats &s1 = outcomes[0].run.stats, &s3 = outcomes[1].run.stats;
  CHECK(s1.mfmas > 0);
  CHECK(s1.mfmas == s3.mfmas);
  CHECK(s1.waveOps == s3.waveOps);
  CHECK(s1.ldsBankConflicts == s3.ldsBankConflicts);
  CHECK(s1.globalLinesRead == s3.globalLinesRead);
  REQUIRE(outcomes[0].outputs.size() == outcomes[1].outputs.size());
  for (const auto &[name, snapshot] : outcomes[0].outputs) {
    INFO(name);
    const auto &other = outcomes[1].outputs.at(name);
    CHECK(snapshot.bytes == other.bytes);
    CHECK(snapshot.written == other.written);
  }
}
