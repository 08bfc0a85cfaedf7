//===- CooperativeTest.cpp - scf.while, spin-waits, deadlocks, EP ranks ---===//
//
// scf.while with uniform and per-lane conditions against host loops; the
// cooperative scheduler: a workgroup spinning on a flag another workgroup
// sets, the same kernel deadlocking under a residency cap of one, two ranks
// playing ping-pong through peer buffers, a deadlock across ranks, and a
// spin that only the step limit can end; the residency cap from the
// occupancy model against hand-computed values.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/manifest.h"
#include "moec/target/target_info.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

/// The gpu.func named `name` in a parsed module.
mlir::gpu::GPUFuncOp funcNamed(ParsedKernel &kernel, llvm::StringRef name) {
  mlir::gpu::GPUFuncOp found;
  kernel.module->walk([&](mlir::gpu::GPUFuncOp func) {
    if (func.getName() == name)
      found = func;
  });
  REQUIRE(found);
  return found;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// gfx950's facts on `computeUnits` CUs: a device small enough that the
/// residency cap bites in a test.
moec::target::TargetInfo chipWithCus(unsigned computeUnits) {
  moec::target::TargetInfo chip = moec::target::kGfx950;
  chip.computeUnits = computeUnits;
  return chip;
}

/// Lane t (of 128) loops t % 5 times. The condition forwards three values
/// (one of another type) to the after-region, which yields two; every
/// iteration also logs to log[5 t + j] so that a lane that has left the loop
/// and still stored would show.
const std::string kDivergentWhile = kernelText(
    "divergent", R"mlir((%out: memref<384xi32, #gpu.address_space<global>>,
                      %log: memref<640xi32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %t = arith.index_cast %tid : index to i32
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c3 = arith.constant 3 : i32
    %c5 = arith.constant 5 : i32
    %trips = arith.remui %t, %c5 : i32
    %r:3 = scf.while (%i = %c0, %acc = %c0) : (i32, i32) -> (i32, i32, i64) {
      %go = arith.cmpi slt, %i, %trips : i32
      %sq = arith.muli %i, %i : i32
      %wide = arith.extsi %sq : i32 to i64
      scf.condition(%go) %i, %acc, %wide : i32, i32, i64
    } do {
    ^bb0(%j: i32, %a: i32, %w: i64):
      %prod = arith.muli %t, %j : i32
      %x = arith.addi %prod, %c3 : i32
      %a2 = arith.addi %a, %x : i32
      %j2 = arith.addi %j, %c1 : i32
      %t5 = arith.muli %t, %c5 : i32
      %slot = arith.addi %t5, %j : i32
      %slotIdx = arith.index_cast %slot : i32 to index
      memref.store %a2, %log[%slotIdx] : memref<640xi32, #gpu.address_space<global>>
      scf.yield %j2, %a2 : i32, i32
    }
    %c128 = arith.constant 128 : index
    %c256 = arith.constant 256 : index
    %o1 = arith.addi %tid, %c128 : index
    %o2 = arith.addi %tid, %c256 : index
    %w32 = arith.trunci %r#2 : i64 to i32
    memref.store %r#0, %out[%tid] : memref<384xi32, #gpu.address_space<global>>
    memref.store %r#1, %out[%o1] : memref<384xi32, #gpu.address_space<global>>
    memref.store %w32, %out[%o2] : memref<384xi32, #gpu.address_space<global>>
)mlir", 128);

/// A uniform loop of %n iterations that touches only registers: every
/// iteration yields, and none may be mistaken for a deadlock.
const std::string kUniformWhile = kernelText(
    "uniform", R"mlir((%out: memref<64xi32, #gpu.address_space<global>>,
                    %n: i32))mlir",
    R"mlir(
    %t = arith.index_cast %tid : index to i32
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %c3 = arith.constant 3 : i32
    %r:2 = scf.while (%i = %c0, %acc = %c1) : (i32, i32) -> (i32, i32) {
      %go = arith.cmpi slt, %i, %n : i32
      scf.condition(%go) %i, %acc : i32, i32
    } do {
    ^bb0(%j: i32, %a: i32):
      %a3 = arith.muli %a, %c3 : i32
      %a2 = arith.addi %a3, %j : i32
      %j2 = arith.addi %j, %c1 : i32
      scf.yield %j2, %a2 : i32, i32
    }
    %sum = arith.addi %r#1, %t : i32
    %v = arith.addi %sum, %r#0 : i32
    memref.store %v, %out[%tid] : memref<64xi32, #gpu.address_space<global>>
)mlir");

/// Workgroup 0's thread 0 spins (fetch-add 0, s_sleep) until workgroup 1
/// has written the payload and raised the flag; then workgroup 0 copies the
/// payload.
const char *kHandoff = R"mlir(
gpu.module @m {
  gpu.func @handoff(%flag: memref<1xi32, #gpu.address_space<global>>,
                    %payload: memref<64xi32, #gpu.address_space<global>>,
                    %copy: memref<64xi32, #gpu.address_space<global>>) kernel
      attributes {known_block_size = array<i32: 64, 1, 1>} {
    %bid = gpu.block_id x
    %tid = gpu.thread_id x
    %c0 = arith.constant 0 : index
    %z = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %isConsumer = arith.cmpi eq, %bid, %c0 : index
    %isLeader = arith.cmpi eq, %tid, %c0 : index
    scf.if %isConsumer {
      scf.if %isLeader {
        scf.while : () -> () {
          %f = memref.atomic_rmw addi %z, %flag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
          %wait = arith.cmpi eq, %f, %z : i32
          scf.condition(%wait)
        } do {
          rocdl.s.sleep 1
          scf.yield
        }
      }
      gpu.barrier
      %v = memref.load %payload[%tid] : memref<64xi32, #gpu.address_space<global>>
      memref.store %v, %copy[%tid] : memref<64xi32, #gpu.address_space<global>>
    } else {
      %t = arith.index_cast %tid : index to i32
      %c7 = arith.constant 7 : i32
      %c100 = arith.constant 100 : i32
      %t7 = arith.muli %t, %c7 : i32
      %x = arith.addi %t7, %c100 : i32
      memref.store %x, %payload[%tid] : memref<64xi32, #gpu.address_space<global>>
      gpu.barrier
      scf.if %isLeader {
        %old = memref.atomic_rmw assign %one, %flag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
      }
    }
    gpu.return
  }
}
)mlir";

/// One EP rank of a ping-pong: in round i rank r sends prev * 3 + r + i into
/// the peer's mailbox slot i, raises the peer's flag to i + 1, waits until
/// its own flag reaches i + 1, and receives its slot i. The peer's mailbox
/// and flag are peer pointers: the other rank's buffers.
const std::string kPingPong = kernelText(
    "pingpong", R"mlir((%rank: i32,
                     %myFlag: memref<1xi32, #gpu.address_space<global>>,
                     %peerFlag: memref<1xi32, #gpu.address_space<global>>,
                     %myBox: memref<8xi32, #gpu.address_space<global>>,
                     %peerBox: memref<8xi32, #gpu.address_space<global>>,
                     %out: memref<8xi32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0 : i32
    %i1 = arith.constant 1 : i32
    %i3 = arith.constant 3 : i32
    %i1000 = arith.constant 1000 : i32
    %isLeader = arith.cmpi eq, %tid, %c0 : index
    scf.if %isLeader {
      %r1000 = arith.muli %rank, %i1000 : i32
      %init = arith.addi %r1000, %i1 : i32
      %last = scf.for %i = %c0 to %c8 step %c1 iter_args(%prev = %init) -> (i32) {
        %iv = arith.index_cast %i : index to i32
        %p3 = arith.muli %prev, %i3 : i32
        %pr = arith.addi %p3, %rank : i32
        %send = arith.addi %pr, %iv : i32
        memref.store %send, %peerBox[%i] : memref<8xi32, #gpu.address_space<global>>
        %round = arith.addi %iv, %i1 : i32
        %old = memref.atomic_rmw assign %round, %peerFlag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
        scf.while : () -> () {
          %f = memref.atomic_rmw addi %z, %myFlag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
          %wait = arith.cmpi slt, %f, %round : i32
          scf.condition(%wait)
        } do {
          rocdl.s.sleep 2
          scf.yield
        }
        %recv = memref.load %myBox[%i] : memref<8xi32, #gpu.address_space<global>>
        memref.store %recv, %out[%i] : memref<8xi32, #gpu.address_space<global>>
        scf.yield %recv : i32
      }
    }
)mlir");

/// Two kernels that each wait for a flag nobody sets.
const char *kWaitForever = R"mlir(
gpu.module @m {
  gpu.func @wait_a(%flag: memref<1xi32, #gpu.address_space<global>>) kernel
      attributes {known_block_size = array<i32: 64, 1, 1>} {
    %c0 = arith.constant 0 : index
    %z = arith.constant 0 : i32
    scf.while : () -> () {
      %f = memref.atomic_rmw addi %z, %flag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
      %wait = arith.cmpi eq, %f, %z : i32
      scf.condition(%wait)
    } do {
      rocdl.s.sleep 1
      scf.yield
    }
    gpu.return
  }
  gpu.func @wait_b(%flag: memref<1xi32, #gpu.address_space<global>>) kernel
      attributes {known_block_size = array<i32: 128, 1, 1>} {
    %c0 = arith.constant 0 : index
    %z = arith.constant 0 : i32
    %f0 = memref.load %flag[%c0] : memref<1xi32, #gpu.address_space<global>>
    %r = scf.while (%seen = %f0) : (i32) -> i32 {
      %wait = arith.cmpi eq, %seen, %z : i32
      scf.condition(%wait) %seen : i32
    } do {
    ^bb0(%s: i32):
      %f = memref.load %flag[%c0] : memref<1xi32, #gpu.address_space<global>>
      scf.yield %f : i32
    }
    gpu.return
  }
}
)mlir";

/// A spin that counts its iterations: its state changes every iteration, so
/// nothing proves it stuck and only the step limit ends it.
const char *kCountingSpin = R"mlir(
gpu.module @m {
  gpu.func @counting_spin(%flag: memref<1xi32, #gpu.address_space<global>>,
                          %out: memref<1xi32, #gpu.address_space<global>>) kernel
      attributes {known_block_size = array<i32: 64, 1, 1>} {
    %c0 = arith.constant 0 : index
    %z = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %n = scf.while (%count = %z) : (i32) -> i32 {
      %f = memref.load %flag[%c0] : memref<1xi32, #gpu.address_space<global>>
      %wait = arith.cmpi eq, %f, %z : i32
      scf.condition(%wait) %count : i32
    } do {
    ^bb0(%c: i32):
      %c1 = arith.addi %c, %one : i32
      rocdl.s.sleep 1
      scf.yield %c1 : i32
    }
    memref.store %n, %out[%c0] : memref<1xi32, #gpu.address_space<global>>
    gpu.return
  }
}
)mlir";

} // namespace

TEST_CASE("scf.while with a per-lane condition", "[while]") {
  ParsedKernel kernel = parseKernel(kDivergentWhile);
  std::string error;
  REQUIRE(mlir::succeeded(checkSupported(kernel.func, error)));
  GlobalMemory memory;
  unsigned out = memory.addBuffer("out", 384 * 4);
  unsigned log = addInput(memory, "log", std::vector<int32_t>(640, -1));
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(out),
                                KernelArgValue::makeBuffer(log)});
  CHECK(result.totalFindings() == 0);
  // Each wave has lanes with 4 trips: four iteration boundaries each.
  CHECK(result.stats.yields == 2 * 4);
  std::vector<int32_t> got = readBuffer<int32_t>(memory, out);
  std::vector<int32_t> logged = readBuffer<int32_t>(memory, log);
  for (int t = 0; t < 128; ++t) {
    INFO("lane " << t);
    const int trips = t % 5;
    int32_t acc = 0;
    for (int j = 0; j < 5; ++j) {
      if (j < trips) {
        acc += t * j + 3;
        CHECK(logged[size_t(5 * t + j)] == acc);
      } else {
        // The lane had left the loop: it must not have stored.
        CHECK(logged[size_t(5 * t + j)] == -1);
      }
    }
    CHECK(got[size_t(t)] == trips);
    CHECK(got[size_t(128 + t)] == acc);
    CHECK(got[size_t(256 + t)] == trips * trips);
  }
}

TEST_CASE("scf.while with a uniform condition", "[while]") {
  ParsedKernel kernel = parseKernel(kUniformWhile);
  const int32_t n = GENERATE(0, 1, 1000);
  INFO("n = " << n);
  GlobalMemory memory;
  unsigned out = memory.addBuffer("out", 256);
  LaunchConfig launch;
  launch.grid = {3, 1, 1};
  launch.maxResidentWorkgroups = 2;
  RunResult result = runOrFail(
      kernel, memory,
      {KernelArgValue::makeBuffer(out), KernelArgValue::makeScalar(n)}, launch);
  // Register-only iterations yield without any write, and still are not a
  // deadlock: each changes the loop's state.
  CHECK(result.stats.yields == uint64_t(3 * n));
  uint32_t acc = 1;
  for (int j = 0; j < n; ++j)
    acc = acc * 3u + uint32_t(j);
  std::vector<int32_t> got = readBuffer<int32_t>(memory, out);
  for (int t = 0; t < 64; ++t)
    CHECK(uint32_t(got[size_t(t)]) == acc + uint32_t(t) + uint32_t(n));
}

TEST_CASE("a workgroup spins until another workgroup raises a flag",
          "[scheduler][spin]") {
  ParsedKernel kernel = parseKernel(kHandoff);
  std::string error;
  REQUIRE(mlir::succeeded(checkSupported(kernel.func, error)));
  // 100 KiB of LDS: one workgroup per CU (occupancy model), so the cap is
  // the number of CUs.
  moec::rt::KernelResources resources;
  resources.vgpr = 64;
  resources.sgpr = 32;
  resources.ldsBytes = 100 * 1024;
  const unsigned computeUnits = GENERATE(1u, 2u);
  mlir::FailureOr<unsigned> cap =
      residentWorkgroupCap(resources, 64, chipWithCus(computeUnits), error);
  INFO(error);
  REQUIRE(mlir::succeeded(cap));
  REQUIRE(*cap == computeUnits);

  GlobalMemory memory;
  unsigned flag = addInput(memory, "flag", std::vector<int32_t>{0});
  unsigned payload = memory.addBuffer("payload", 256);
  unsigned copy = memory.addBuffer("copy", 256);
  memory.poison(copy);
  LaunchConfig launch;
  launch.grid = {2, 1, 1};
  launch.maxResidentWorkgroups = *cap;
  // A failure to see the deadlock would end at this limit, not hang.
  launch.maxStepsPerWave = 1000000;
  std::vector<KernelArgValue> args = {KernelArgValue::makeBuffer(flag),
                                      KernelArgValue::makeBuffer(payload),
                                      KernelArgValue::makeBuffer(copy)};
  if (*cap >= 2) {
    RunResult result = runOrFail(kernel, memory, args, launch);
    CHECK(result.totalFindings() == 0);
    CHECK(result.stats.workgroups == 2);
    // Workgroup 1 ran between workgroup 0's iterations.
    CHECK(result.stats.yields >= 1);
    std::vector<int32_t> got = readBuffer<int32_t>(memory, copy);
    for (int t = 0; t < 64; ++t)
      CHECK(got[size_t(t)] == 7 * t + 100);
    CHECK(readBuffer<int32_t>(memory, flag)[0] == 1);
  } else {
    // Workgroup 1 can only start once workgroup 0 has finished, and
    // workgroup 0 waits for it: the hardware hazard, reported.
    auto result = runKernel(kernel.func, memory, args, launch, error);
    REQUIRE(mlir::failed(result));
    INFO(error);
    CHECK(error.rfind("emulator: deadlock: 1 workgroup spins and nothing can "
                      "change what they wait on: m::handoff workgroup (0,0,0) "
                      "wave 0 at ",
                      0) == 0);
    CHECK(contains(error, "(scf.while)"));
    CHECK(contains(error, "1 workgroup of m::handoff not yet resident "
                          "(at most 1 resident)"));
    CHECK(error.find('\n') == std::string::npos);
    // Nothing was copied.
    CHECK(memory.written(copy)[0] == 0);
  }
}

TEST_CASE("two ranks play ping-pong through peer pointers",
          "[scheduler][ranks]") {
  ParsedKernel kernel = parseKernel(kPingPong);
  GlobalMemory memory;
  unsigned flags[2], boxes[2], outs[2];
  for (int r = 0; r < 2; ++r) {
    flags[r] = addInput(memory, "flag" + std::to_string(r),
                        std::vector<int32_t>{0});
    boxes[r] = memory.addBuffer("box" + std::to_string(r), 32);
    outs[r] = memory.addBuffer("out" + std::to_string(r), 32);
  }
  std::vector<KernelLaunch> launches(2);
  for (int r = 0; r < 2; ++r) {
    KernelLaunch &l = launches[size_t(r)];
    l.func = kernel.func;
    l.label = "rank " + std::to_string(r);
    l.launch.maxResidentWorkgroups = 1;
    l.launch.maxStepsPerWave = 1000000;
    l.args = {KernelArgValue::makeScalar(r),
              KernelArgValue::makeBuffer(flags[r]),
              KernelArgValue::makeBuffer(flags[1 - r]),
              KernelArgValue::makeBuffer(boxes[r]),
              KernelArgValue::makeBuffer(boxes[1 - r]),
              KernelArgValue::makeBuffer(outs[r])};
  }
  std::string error;
  mlir::FailureOr<RunResult> result = runKernels(launches, memory, error);
  INFO(error);
  REQUIRE(mlir::succeeded(result));
  for (const Finding &f : result->findings)
    UNSCOPED_INFO(f.str());
  CHECK(result->totalFindings() == 0);
  CHECK(result->stats.workgroups == 2);
  CHECK(result->stats.waves == 2);

  // The host's game: both ranks send in round i what they received in
  // round i - 1.
  uint32_t prev[2] = {1, 1001};
  std::vector<uint32_t> expectOut[2], expectBox[2];
  for (int i = 0; i < 8; ++i) {
    uint32_t send[2];
    for (int r = 0; r < 2; ++r)
      send[r] = prev[r] * 3u + uint32_t(r) + uint32_t(i);
    for (int r = 0; r < 2; ++r) {
      expectBox[r].push_back(send[1 - r]);
      expectOut[r].push_back(send[1 - r]);
      prev[r] = send[1 - r];
    }
  }
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    std::vector<int32_t> out = readBuffer<int32_t>(memory, outs[r]);
    std::vector<int32_t> box = readBuffer<int32_t>(memory, boxes[r]);
    for (int i = 0; i < 8; ++i) {
      INFO("round " << i);
      CHECK(uint32_t(out[size_t(i)]) == expectOut[r][size_t(i)]);
      CHECK(uint32_t(box[size_t(i)]) == expectBox[r][size_t(i)]);
    }
    CHECK(readBuffer<int32_t>(memory, flags[r])[0] == 8);
  }
}

TEST_CASE("ranks that wait for flags nobody sets are a deadlock",
          "[scheduler][ranks]") {
  ParsedKernel kernel = parseKernel(kWaitForever);
  GlobalMemory memory;
  unsigned flagA = addInput(memory, "flagA", std::vector<int32_t>{0});
  unsigned flagB = addInput(memory, "flagB", std::vector<int32_t>{0});
  std::vector<KernelLaunch> launches(2);
  launches[0].func = funcNamed(kernel, "wait_a");
  launches[0].label = "rank 0";
  launches[0].args = {KernelArgValue::makeBuffer(flagA)};
  launches[1].func = funcNamed(kernel, "wait_b");
  launches[1].label = "rank 1";
  launches[1].args = {KernelArgValue::makeBuffer(flagB)};
  launches[1].launch.grid = {7, 1, 1};
  launches[1].launch.maxResidentWorkgroups = 5;
  for (KernelLaunch &l : launches)
    l.launch.maxStepsPerWave = 1000000;
  std::string error;
  auto result = runKernels(launches, memory, error);
  REQUIRE(mlir::failed(result));
  INFO(error);
  // One spinner of rank 0, five resident ones of rank 1 (the first four
  // entries are listed), and rank 1's two workgroups never made resident.
  CHECK(error.rfind("emulator: deadlock: 6 workgroups spin and nothing can "
                    "change what they wait on: rank 0: m::wait_a workgroup "
                    "(0,0,0) wave 0 at ",
                    0) == 0);
  CHECK(contains(error, "; rank 1: m::wait_b workgroup (0,0,0) wave 0 at "));
  CHECK(contains(error, "; rank 1: m::wait_b workgroup (2,0,0) wave 0 at "));
  CHECK(!contains(error, "workgroup (3,0,0)"));
  CHECK(contains(error, "; and 2 more"));
  CHECK(contains(error, "; rank 1: 2 workgroups of m::wait_b not yet resident "
                        "(at most 5 resident)"));
  CHECK(error.find('\n') == std::string::npos);
}

TEST_CASE("a spin nothing satisfies ends at the step limit", "[scheduler]") {
  ParsedKernel kernel = parseKernel(kCountingSpin);
  GlobalMemory memory;
  unsigned flag = addInput(memory, "flag", std::vector<int32_t>{0});
  unsigned out = memory.addBuffer("out", 4);
  LaunchConfig launch;
  launch.maxStepsPerWave = 5000;
  std::string error;
  auto result = runKernel(kernel.func, memory,
                          {KernelArgValue::makeBuffer(flag),
                           KernelArgValue::makeBuffer(out)},
                          launch, error);
  REQUIRE(mlir::failed(result));
  INFO(error);
  CHECK(contains(error, "m::counting_spin"));
  CHECK(contains(error, "wave 0 exceeded 5000 steps (runaway loop?)"));
  CHECK(!contains(error, "deadlock"));
  CHECK(memory.written(out)[0] == 0);

  // The same spin without a step limit but with the flag raised by the
  // host ends after one look.
  int32_t raised = 1;
  memory.write(flag, 0, &raised, 4);
  launch.maxStepsPerWave = 0;
  RunResult ok = runOrFail(kernel, memory,
                           {KernelArgValue::makeBuffer(flag),
                            KernelArgValue::makeBuffer(out)},
                           launch);
  CHECK(readBuffer<int32_t>(memory, out)[0] == 0);
  CHECK(ok.stats.yields == 0);
}

TEST_CASE("findings and errors carry the launch label", "[scheduler][ranks]") {
  const std::string text = kernelText(
      "copy", R"mlir((%src: memref<64xi32, #gpu.address_space<global>>,
                 %dst: memref<64xi32, #gpu.address_space<global>>))mlir",
      R"mlir(
    %v = memref.load %src[%tid] : memref<64xi32, #gpu.address_space<global>>
    memref.store %v, %dst[%tid] : memref<64xi32, #gpu.address_space<global>>
)mlir");
  ParsedKernel kernel = parseKernel(text);
  GlobalMemory memory;
  unsigned written = addInput(memory, "written", std::vector<int32_t>(64, 5));
  unsigned fresh = memory.addBuffer("fresh", 256);
  unsigned dst0 = memory.addBuffer("dst0", 256);
  unsigned dst1 = memory.addBuffer("dst1", 256);
  std::vector<KernelLaunch> launches(2);
  launches[0].func = launches[1].func = kernel.func;
  launches[0].label = "rank 0";
  launches[0].args = {KernelArgValue::makeBuffer(written),
                      KernelArgValue::makeBuffer(dst0)};
  launches[1].label = "rank 1";
  launches[1].args = {KernelArgValue::makeBuffer(fresh),
                      KernelArgValue::makeBuffer(dst1)};
  std::string error;
  auto result = runKernels(launches, memory, error);
  INFO(error);
  REQUIRE(mlir::succeeded(result));
  // Only rank 1 read never-written memory, once per lane.
  CHECK(countOf(*result, FindingKind::UninitializedRead) == 64);
  REQUIRE(!result->findings.empty());
  CHECK(result->findings[0].launch == "rank 1");
  CHECK(result->findings[0].str().rfind(
            "rank 1: read of never-written memory in m::copy at ", 0) == 0);
  CHECK(result->stats.workgroups == 2);
  CHECK(readBuffer<int32_t>(memory, dst0)[63] == 5);

  launches[1].args.pop_back();
  result = runKernels(launches, memory, error);
  CHECK(mlir::failed(result));
  CHECK(error == "emulator: rank 1: m::copy takes 2 arguments, got 1");
}

TEST_CASE("the residency cap follows the occupancy model", "[residency]") {
  std::string error;
  // 128 VGPRs, 64 SGPRs, no LDS, 256 threads (4 waves): 512 / 128 = 4 waves
  // per SIMD, 16 wave slots per CU, 4 workgroups of 4 waves per CU.
  moec::rt::KernelResources vgprBound;
  vgprBound.vgpr = 128;
  vgprBound.sgpr = 64;
  mlir::FailureOr<unsigned> cap =
      residentWorkgroupCap(vgprBound, 256, moec::target::kGfx950, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 4 * 256);
  // MI350P: the same per-CU occupancy on half the CUs.
  cap = residentWorkgroupCap(vgprBound, 256, moec::target::kMi350p, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 4 * 128);
  cap = residentWorkgroupCap(vgprBound, 256, chipWithCus(2), error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 8);

  // 96 VGPRs + 128 AGPRs: .vgpr_count is the unified 224, 2 waves per SIMD,
  // 8 slots per CU; 512 threads are 8 waves, so one workgroup per CU (LDS:
  // 40000 bytes round to 40960, 4 per CU, not the limit).
  moec::rt::KernelResources agprBound;
  agprBound.vgpr = 224;
  agprBound.agpr = 128;
  agprBound.sgpr = 90;
  agprBound.ldsBytes = 40000;
  cap = residentWorkgroupCap(agprBound, 512, moec::target::kGfx950, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 256);

  // One wave, 32 VGPRs, 64 KiB of LDS: 65536 rounds to 66560 bytes, two fit
  // in 160 KiB, so LDS bounds it at 2 workgroups per CU.
  moec::rt::KernelInfo ldsBound;
  ldsBound.resources.vgpr = 32;
  ldsBound.resources.sgpr = 32;
  ldsBound.resources.ldsBytes = 65536;
  ldsBound.launch.workgroupSize = {{64, 1, 1}};
  cap = residentWorkgroupCap(ldsBound, moec::target::kGfx950, error);
  REQUIRE(mlir::succeeded(cap));
  CHECK(*cap == 512);

  // More LDS than a CU has: cannot launch.
  moec::rt::KernelResources tooBig;
  tooBig.vgpr = 32;
  tooBig.ldsBytes = 200 * 1024;
  cap = residentWorkgroupCap(tooBig, 64, moec::target::kGfx950, error);
  CHECK(mlir::failed(cap));
  CHECK(contains(error, "LDS use exceeds the LDS per CU"));
}
