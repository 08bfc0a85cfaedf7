//===- OpSemanticsTest.cpp - each op against hand-written C++ -------------===//
//
// Every kernel here stores per-lane results to a global buffer; the expected
// values are computed in the test with plain C++ on the same inputs, never
// by the emulator.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

/// `count` normal draws of CounterRandom(seed, stream), times `scale`.
std::vector<float> normalFloats(uint64_t seed, uint64_t stream, size_t count,
                                double scale) {
  moec::ref::CounterRandom random(seed, stream);
  std::vector<float> values(count);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(random.normal(i) * scale);
  return values;
}

const std::string kIntegerKernel = kernelText(
    "ints", R"mlir((%out: memref<1280xi32, #gpu.address_space<global>>,
                 %scalar: i32))mlir",
    R"mlir(
    %t = arith.index_cast %tid : index to i32
    %c2 = arith.constant 2 : i32
    %c3 = arith.constant 3 : i32
    %c7 = arith.constant 7 : i32
    %c100 = arith.constant 100 : i32
    %cm5 = arith.constant -5 : i32
    %c0 = arith.constant 0 : i32
    %t7 = arith.muli %t, %c7 : i32
    %x = arith.subi %t7, %c100 : i32
    %r0 = arith.addi %x, %scalar : i32
    %r1 = arith.divsi %x, %c3 : i32
    %r2 = arith.remsi %x, %c3 : i32
    %r3 = arith.divui %t, %c3 : i32
    %r4 = arith.remui %t, %c3 : i32
    %r5 = arith.floordivsi %x, %c3 : i32
    %r6 = arith.ceildivsi %x, %c3 : i32
    %r7 = arith.minsi %x, %cm5 : i32
    %r8 = arith.maxui %x, %c3 : i32
    %r9 = arith.shrsi %x, %c2 : i32
    %r10 = arith.shrui %x, %c2 : i32
    %r11 = arith.shli %t, %c3 : i32
    %a = arith.andi %x, %c100 : i32
    %o = arith.ori %a, %c3 : i32
    %r12 = arith.xori %o, %t : i32
    %neg = arith.cmpi slt, %x, %c0 : i32
    %r13 = arith.select %neg, %t, %x : i32
    %narrow = arith.trunci %x : i32 to i8
    %r14 = arith.extsi %narrow : i8 to i32
    %r15 = arith.extui %narrow : i8 to i32
    %ult = arith.cmpi ult, %x, %c100 : i32
    %r16 = arith.extui %ult : i1 to i32
    %r17 = arith.minui %x, %c100 : i32
    %r18 = arith.maxsi %x, %cm5 : i32
    %r19 = arith.ceildivui %t, %c7 : i32
    %results = vector.from_elements %r0, %r1 : vector<2xi32>
    %c64 = arith.constant 64 : index
    %row0 = arith.addi %tid, %c64 : index
    %i0 = arith.constant 0 : index
    %s0 = arith.addi %tid, %i0 : index
    memref.store %r0, %out[%s0] : memref<1280xi32, #gpu.address_space<global>>
    %p1 = arith.constant 64 : index
    %s1 = arith.addi %tid, %p1 : index
    memref.store %r1, %out[%s1] : memref<1280xi32, #gpu.address_space<global>>
    %p2 = arith.constant 128 : index
    %s2 = arith.addi %tid, %p2 : index
    memref.store %r2, %out[%s2] : memref<1280xi32, #gpu.address_space<global>>
    %p3 = arith.constant 192 : index
    %s3 = arith.addi %tid, %p3 : index
    memref.store %r3, %out[%s3] : memref<1280xi32, #gpu.address_space<global>>
    %p4 = arith.constant 256 : index
    %s4 = arith.addi %tid, %p4 : index
    memref.store %r4, %out[%s4] : memref<1280xi32, #gpu.address_space<global>>
    %p5 = arith.constant 320 : index
    %s5 = arith.addi %tid, %p5 : index
    memref.store %r5, %out[%s5] : memref<1280xi32, #gpu.address_space<global>>
    %p6 = arith.constant 384 : index
    %s6 = arith.addi %tid, %p6 : index
    memref.store %r6, %out[%s6] : memref<1280xi32, #gpu.address_space<global>>
    %p7 = arith.constant 448 : index
    %s7 = arith.addi %tid, %p7 : index
    memref.store %r7, %out[%s7] : memref<1280xi32, #gpu.address_space<global>>
    %p8 = arith.constant 512 : index
    %s8 = arith.addi %tid, %p8 : index
    memref.store %r8, %out[%s8] : memref<1280xi32, #gpu.address_space<global>>
    %p9 = arith.constant 576 : index
    %s9 = arith.addi %tid, %p9 : index
    memref.store %r9, %out[%s9] : memref<1280xi32, #gpu.address_space<global>>
    %p10 = arith.constant 640 : index
    %s10 = arith.addi %tid, %p10 : index
    memref.store %r10, %out[%s10] : memref<1280xi32, #gpu.address_space<global>>
    %p11 = arith.constant 704 : index
    %s11 = arith.addi %tid, %p11 : index
    memref.store %r11, %out[%s11] : memref<1280xi32, #gpu.address_space<global>>
    %p12 = arith.constant 768 : index
    %s12 = arith.addi %tid, %p12 : index
    memref.store %r12, %out[%s12] : memref<1280xi32, #gpu.address_space<global>>
    %p13 = arith.constant 832 : index
    %s13 = arith.addi %tid, %p13 : index
    memref.store %r13, %out[%s13] : memref<1280xi32, #gpu.address_space<global>>
    %p14 = arith.constant 896 : index
    %s14 = arith.addi %tid, %p14 : index
    memref.store %r14, %out[%s14] : memref<1280xi32, #gpu.address_space<global>>
    %p15 = arith.constant 960 : index
    %s15 = arith.addi %tid, %p15 : index
    memref.store %r15, %out[%s15] : memref<1280xi32, #gpu.address_space<global>>
    %p16 = arith.constant 1024 : index
    %s16 = arith.addi %tid, %p16 : index
    memref.store %r16, %out[%s16] : memref<1280xi32, #gpu.address_space<global>>
    %p17 = arith.constant 1088 : index
    %s17 = arith.addi %tid, %p17 : index
    memref.store %r17, %out[%s17] : memref<1280xi32, #gpu.address_space<global>>
    %p18 = arith.constant 1152 : index
    %s18 = arith.addi %tid, %p18 : index
    memref.store %r18, %out[%s18] : memref<1280xi32, #gpu.address_space<global>>
    %p19 = arith.constant 1216 : index
    %s19 = arith.addi %tid, %p19 : index
    memref.store %r19, %out[%s19] : memref<1280xi32, #gpu.address_space<global>>
)mlir");

int32_t floorDiv(int32_t a, int32_t b) {
  int32_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int32_t ceilDiv(int32_t a, int32_t b) {
  int32_t q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q;
}

} // namespace

TEST_CASE("integer arith ops match C++ on every lane", "[ops]") {
  // vector.from_elements is not a kernel-IR op the emulator supports; drop
  // it from this kernel (its own test checks the unsupported-op error).
  std::string text = kIntegerKernel;
  const std::string fromElements =
      "    %results = vector.from_elements %r0, %r1 : vector<2xi32>\n";
  text.erase(text.find(fromElements), fromElements.size());
  ParsedKernel kernel = parseKernel(text);
  GlobalMemory memory;
  unsigned out = memory.addBuffer("out", 1280 * 4);
  const int32_t scalar = -123457;
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(out),
                                KernelArgValue::makeScalar(scalar)});
  CHECK(result.totalFindings() == 0);
  std::vector<int32_t> got = readBuffer<int32_t>(memory, out);
  for (int32_t t = 0; t < 64; ++t) {
    const int32_t x = 7 * t - 100;
    const uint32_t ux = static_cast<uint32_t>(x);
    const int32_t o = (x & 100) | 3;
    const int32_t expected[20] = {
        x + scalar,
        x / 3,
        x % 3,
        t / 3,
        t % 3,
        floorDiv(x, 3),
        ceilDiv(x, 3),
        std::min(x, -5),
        static_cast<int32_t>(std::max<uint32_t>(ux, 3u)),
        x >> 2, // arithmetic shift of a negative int (defined since C++20,
                // and what every supported compiler does)
        static_cast<int32_t>(ux >> 2),
        t << 3,
        o ^ t,
        x < 0 ? t : x,
        static_cast<int32_t>(static_cast<int8_t>(x & 0xFF)),
        static_cast<int32_t>(static_cast<uint8_t>(x & 0xFF)),
        ux < 100u ? 1 : 0,
        static_cast<int32_t>(std::min<uint32_t>(ux, 100u)),
        std::max(x, -5),
        (t + 6) / 7,
    };
    for (int r = 0; r < 20; ++r) {
      INFO("lane " << t << " result " << r);
      CHECK(got[size_t(r * 64 + t)] == expected[r]);
    }
  }
}

TEST_CASE("an unsupported op is an error naming the op", "[ops]") {
  ParsedKernel kernel = parseKernel(kIntegerKernel);
  std::string error;
  CHECK(mlir::failed(checkSupported(kernel.func, error)));
  CHECK(error.find("vector.from_elements") != std::string::npos);
  CHECK(error.find("loc(") != std::string::npos);
}

TEST_CASE("float ops and conversions round like IEEE FP32 and BF16", "[ops]") {
  const std::string text = kernelText(
      "floats", R"mlir((%in: memref<128xf32, #gpu.address_space<global>>,
                   %out: memref<448xf32, #gpu.address_space<global>>,
                   %outb: memref<64xbf16, #gpu.address_space<global>>))mlir",
      R"mlir(
    %c64 = arith.constant 64 : index
    %j = arith.addi %tid, %c64 : index
    %x = memref.load %in[%tid] : memref<128xf32, #gpu.address_space<global>>
    %y = memref.load %in[%j] : memref<128xf32, #gpu.address_space<global>>
    %add = arith.addf %x, %y : f32
    %sub = arith.subf %x, %y : f32
    %mul = arith.mulf %x, %y : f32
    %div = arith.divf %x, %y : f32
    %max = arith.maxnumf %x, %y : f32
    %min = arith.minnumf %x, %y : f32
    %b = arith.truncf %mul : f32 to bf16
    %back = arith.extf %b : bf16 to f32
    %c0 = arith.constant 0 : index
    %c128 = arith.constant 128 : index
    %c192 = arith.constant 192 : index
    %c256 = arith.constant 256 : index
    %c320 = arith.constant 320 : index
    %c384 = arith.constant 384 : index
    memref.store %add, %out[%tid] : memref<448xf32, #gpu.address_space<global>>
    memref.store %sub, %out[%j] : memref<448xf32, #gpu.address_space<global>>
    %i2 = arith.addi %tid, %c128 : index
    memref.store %mul, %out[%i2] : memref<448xf32, #gpu.address_space<global>>
    %i3 = arith.addi %tid, %c192 : index
    memref.store %div, %out[%i3] : memref<448xf32, #gpu.address_space<global>>
    %i4 = arith.addi %tid, %c256 : index
    memref.store %max, %out[%i4] : memref<448xf32, #gpu.address_space<global>>
    %i5 = arith.addi %tid, %c320 : index
    memref.store %min, %out[%i5] : memref<448xf32, #gpu.address_space<global>>
    %i6 = arith.addi %tid, %c384 : index
    memref.store %back, %out[%i6] : memref<448xf32, #gpu.address_space<global>>
    memref.store %b, %outb[%tid] : memref<64xbf16, #gpu.address_space<global>>
)mlir");
  ParsedKernel kernel = parseKernel(text);
  std::vector<float> in = normalFloats(7, 1, 128, 3.0);
  in[69] = 0.0f; // lane 5 divides by zero (gives inf)
  const BufferRun run(kernel, {BufferArg::input("in", in),
                               BufferArg::output("out", 448 * 4),
                               BufferArg::output("outb", 64 * 2)});
  CHECK(run.result.totalFindings() == 0);
  std::vector<float> got = run.read<float>("out");
  std::vector<uint16_t> gotb = run.read<uint16_t>("outb");
  for (int t = 0; t < 64; ++t) {
    const float x = in[size_t(t)], y = in[size_t(t + 64)];
    volatile float mul = x * y; // volatile: no contraction with anything
    const float expected[7] = {x + y, x - y, mul, x / y,
                               std::fmax(x, y), std::fmin(x, y),
                               moec::ref::decodeBf16(moec::ref::encodeBf16(mul))};
    for (int r = 0; r < 7; ++r) {
      INFO("lane " << t << " result " << r);
      uint32_t eb, gb;
      std::memcpy(&eb, &expected[r], 4);
      std::memcpy(&gb, &got[size_t(r * 64 + t)], 4);
      CHECK(gb == eb);
    }
    CHECK(gotb[size_t(t)] == moec::ref::encodeBf16(mul));
  }
}

TEST_CASE("vector ops move the right elements", "[ops]") {
  const std::string text = kernelText(
      "vectors", R"mlir((%in: memref<256xi32, #gpu.address_space<global>>,
                    %out: memref<1024xi32, #gpu.address_space<global>>,
                    %bytes: memref<4096xi8, #gpu.address_space<global>>))mlir",
      R"mlir(
    %c4 = arith.constant 4 : index
    %c16 = arith.constant 16 : index
    %base = arith.muli %tid, %c4 : index
    %v = vector.load %in[%base] : memref<256xi32, #gpu.address_space<global>>, vector<4xi32>
    %w = vector.shuffle %v, %v [3, 6, 1, 4, 0, 7, 2, 5] : vector<4xi32>, vector<4xi32>
    %e = vector.extract %w[2] : i32 from vector<8xi32>
    %s = vector.extract_strided_slice %w {offsets = [4], sizes = [4], strides = [1]} : vector<8xi32> to vector<4xi32>
    %ins = vector.insert %e, %s [0] : i32 into vector<4xi32>
    %seven = arith.constant 7 : i32
    %bc = vector.broadcast %seven : i32 to vector<4xi32>
    %sum = arith.addi %ins, %bc : vector<4xi32>
    %obase = arith.muli %tid, %c16 : index
    vector.store %sum, %out[%obase] : memref<1024xi32, #gpu.address_space<global>>, vector<4xi32>
    %o2 = arith.addi %obase, %c4 : index
    vector.store %w, %out[%o2] : memref<1024xi32, #gpu.address_space<global>>, vector<8xi32>
    %o3 = arith.addi %o2, %c4 : index
    %o4 = arith.addi %o3, %c4 : index
    %asbytes = vector.bitcast %v : vector<4xi32> to vector<16xi8>
    %c64 = arith.constant 64 : index
    %bbase = arith.muli %tid, %c64 : index
    vector.store %asbytes, %bytes[%bbase] : memref<4096xi8, #gpu.address_space<global>>, vector<16xi8>
)mlir");
  ParsedKernel kernel = parseKernel(text);
  std::vector<int32_t> in(256);
  moec::ref::CounterRandom random(11, 2);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<int32_t>(random.bits(i));
  const BufferRun run(kernel, {BufferArg::input("in", in),
                               BufferArg::output("out", 1024 * 4),
                               BufferArg::output("bytes", 4096)});
  CHECK(run.result.totalFindings() == 0);
  std::vector<int32_t> got = run.read<int32_t>("out");
  const unsigned bytes = run.id("bytes");
  for (int t = 0; t < 64; ++t) {
    const int32_t *v = &in[size_t(4 * t)];
    const int32_t w[8] = {v[3], v[2], v[1], v[0], v[0], v[3], v[2], v[1]};
    INFO("lane " << t);
    // shuffle indices >= 4 read the second operand (the same vector here).
    CHECK(got[size_t(16 * t + 0)] == w[2] + 7);
    CHECK(got[size_t(16 * t + 1)] == w[5] + 7);
    CHECK(got[size_t(16 * t + 2)] == w[6] + 7);
    CHECK(got[size_t(16 * t + 3)] == w[7] + 7);
    for (int i = 0; i < 8; ++i)
      CHECK(got[size_t(16 * t + 4 + i)] == w[i]);
    // Little-endian bytes of v, as vector.bitcast defines them.
    const uint8_t *raw = run.memory.data(bytes) + 64 * t;
    CHECK(std::memcmp(raw, v, 16) == 0);
    // The unwritten tail of each slot stays poisoned.
    CHECK(run.memory.written(bytes)[64 * t + 16] == 0);
  }
}

TEST_CASE("divergent scf.if and per-lane scf.for merge lanes correctly",
          "[ops][control]") {
  const std::string text = kernelText(
      "control", R"mlir((%out: memref<192xi32, #gpu.address_space<global>>))mlir",
      R"mlir(
    %t = arith.index_cast %tid : index to i32
    %c3 = arith.constant 3 : i32
    %c0 = arith.constant 0 : i32
    %c1000 = arith.constant 1000 : i32
    %m = arith.remui %t, %c3 : i32
    %isZero = arith.cmpi eq, %m, %c0 : i32
    %r = scf.if %isZero -> (i32) {
      %a = arith.addi %t, %c1000 : i32
      scf.yield %a : i32
    } else {
      %isOne = arith.cmpi eq, %m, %c3 : i32
      %inner = scf.if %isOne -> (i32) {
        scf.yield %c0 : i32
      } else {
        %n = arith.subi %c0, %t : i32
        scf.yield %n : i32
      }
      scf.yield %inner : i32
    }
    memref.store %r, %out[%tid] : memref<192xi32, #gpu.address_space<global>>
    %i0 = arith.constant 0 : index
    %i1 = arith.constant 1 : index
    %i5 = arith.constant 5 : index
    %ub = arith.remui %tid, %i5 : index
    %sum = scf.for %iv = %i0 to %ub step %i1 iter_args(%acc = %c0) -> (i32) {
      %ivi = arith.index_cast %iv : index to i32
      %sq = arith.muli %ivi, %ivi : i32
      %next = arith.addi %acc, %sq : i32
      scf.yield %next : i32
    }
    %c64 = arith.constant 64 : index
    %j = arith.addi %tid, %c64 : index
    memref.store %sum, %out[%j] : memref<192xi32, #gpu.address_space<global>>
    %c4 = arith.constant 4 : index
    %c10 = arith.constant 10 : i32
    %uni = scf.for %iv = %i0 to %c4 step %i1 iter_args(%acc = %t) -> (i32) {
      %odd = arith.andi %acc, %c3 : i32
      %isOdd = arith.cmpi ne, %odd, %c0 : i32
      %step = scf.if %isOdd -> (i32) {
        %x = arith.addi %acc, %c10 : i32
        scf.yield %x : i32
      } else {
        %x = arith.muli %acc, %c3 : i32
        scf.yield %x : i32
      }
      scf.yield %step : i32
    }
    %c128 = arith.constant 128 : index
    %k = arith.addi %tid, %c128 : index
    memref.store %uni, %out[%k] : memref<192xi32, #gpu.address_space<global>>
)mlir");
  OutputRun run(text, 192 * 4);
  const RunResult &result = run.result;
  CHECK(result.totalFindings() == 0);
  std::vector<int32_t> got = readBuffer<int32_t>(run.memory, run.out);
  for (int32_t t = 0; t < 64; ++t) {
    INFO("lane " << t);
    CHECK(got[size_t(t)] == (t % 3 == 0 ? t + 1000 : -t));
    int32_t sum = 0;
    for (int32_t i = 0; i < t % 5; ++i)
      sum += i * i;
    CHECK(got[size_t(64 + t)] == sum);
    int32_t acc = t;
    for (int i = 0; i < 4; ++i)
      acc = (acc & 3) ? acc + 10 : acc * 3;
    CHECK(got[size_t(128 + t)] == acc);
  }
}

TEST_CASE("thread and block ids follow the launch geometry", "[ops]") {
  const char *text = R"mlir(
gpu.module @m {
  gpu.func @ids(%out: memref<4096xi32, #gpu.address_space<global>>) kernel {
    %tx = gpu.thread_id x
    %ty = gpu.thread_id y
    %bx = gpu.block_id x
    %by = gpu.block_id y
    %dx = gpu.block_dim x
    %dy = gpu.block_dim y
    %gx = gpu.grid_dim x
    %row = arith.muli %ty, %dx : index
    %local = arith.addi %row, %tx : index
    %wgSize = arith.muli %dx, %dy : index
    %wgLinear0 = arith.muli %by, %gx : index
    %wgLinear = arith.addi %wgLinear0, %bx : index
    %base = arith.muli %wgLinear, %wgSize : index
    %slot = arith.addi %base, %local : index
    %c1000 = arith.constant 1000 : index
    %tag0 = arith.muli %wgLinear, %c1000 : index
    %tag = arith.addi %tag0, %local : index
    %v = arith.index_cast %tag : index to i32
    memref.store %v, %out[%slot] : memref<4096xi32, #gpu.address_space<global>>
    gpu.return
  }
}
)mlir";
  LaunchConfig launch;
  launch.grid = {3, 2, 1};
  launch.block = {40, 3, 1}; // 120 threads: two waves, the second partial
  OutputRun run(text, 4096 * 4, launch);
  const RunResult &result = run.result;
  CHECK(result.stats.workgroups == 6);
  CHECK(result.stats.waves == 12);
  std::vector<int32_t> got = readBuffer<int32_t>(run.memory, run.out);
  for (int wg = 0; wg < 6; ++wg)
    for (int local = 0; local < 120; ++local)
      CHECK(got[size_t(wg * 120 + local)] == wg * 1000 + local);
  CHECK(run.memory.written(run.out)[6 * 120 * 4] == 0);
}

TEST_CASE("W13 epilogue ops: maximumf/minimumf, absf, negf, exp2, FP8 "
          "truncf, interleave", "[ops]") {
  const std::string text = kernelText(
      "epilogue", R"mlir((%in: memref<128xf32, #gpu.address_space<global>>,
                     %out: memref<320xf32, #gpu.address_space<global>>,
                     %fp8: memref<64xi8, #gpu.address_space<global>>,
                     %pairs: memref<512xi32, #gpu.address_space<global>>))mlir",
      R"mlir(
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %c192 = arith.constant 192 : index
    %c256 = arith.constant 256 : index
    %j = arith.addi %tid, %c64 : index
    %x = memref.load %in[%tid] : memref<128xf32, #gpu.address_space<global>>
    %y = memref.load %in[%j] : memref<128xf32, #gpu.address_space<global>>
    %max = arith.maximumf %x, %y : f32
    %min = arith.minimumf %x, %y : f32
    %abs = math.absf %x : f32
    %neg = arith.negf %abs : f32
    %exp = math.exp2 %y : f32
    memref.store %max, %out[%tid] : memref<320xf32, #gpu.address_space<global>>
    memref.store %min, %out[%j] : memref<320xf32, #gpu.address_space<global>>
    %i2 = arith.addi %tid, %c128 : index
    memref.store %neg, %out[%i2] : memref<320xf32, #gpu.address_space<global>>
    %i3 = arith.addi %tid, %c192 : index
    memref.store %exp, %out[%i3] : memref<320xf32, #gpu.address_space<global>>
    %xs = vector.broadcast %x : f32 to vector<4xf32>
    %q = arith.truncf %xs : vector<4xf32> to vector<4xf8E4M3FN>
    %q0 = vector.extract %q[0] : f8E4M3FN from vector<4xf8E4M3FN>
    %qi = arith.bitcast %q0 : f8E4M3FN to i8
    memref.store %qi, %fp8[%tid] : memref<64xi8, #gpu.address_space<global>>
    %back = arith.extf %q0 : f8E4M3FN to f32
    %i4 = arith.addi %tid, %c256 : index
    memref.store %back, %out[%i4] : memref<320xf32, #gpu.address_space<global>>
    %t = arith.index_cast %tid : index to i32
    %a = vector.broadcast %t : i32 to vector<4xi32>
    %c1000 = arith.constant dense<[1000, 2000, 3000, 4000]> : vector<4xi32>
    %b = arith.addi %a, %c1000 : vector<4xi32>
    %il = vector.interleave %a, %b : vector<4xi32> -> vector<8xi32>
    %c8 = arith.constant 8 : index
    %base = arith.muli %tid, %c8 : index
    vector.store %il, %pairs[%base] : memref<512xi32, #gpu.address_space<global>>, vector<8xi32>
)mlir");
  ParsedKernel kernel = parseKernel(text);
  std::vector<float> in = normalFloats(23, 4, 128, 100.0);
  in[0] = -0.0f;
  in[64] = 0.0f;
  in[1] = std::numeric_limits<float>::quiet_NaN();
  in[2] = 500.0f;  // saturates to 448
  in[3] = -1000.0f; // saturates to -448
  in[4] = 1.0f;
  const BufferRun run(kernel, {BufferArg::input("in", in),
                               BufferArg::output("out", 320 * 4),
                               BufferArg::output("fp8", 64),
                               BufferArg::output("pairs", 512 * 4)});
  CHECK(run.result.totalFindings() == 0);
  std::vector<float> got = run.read<float>("out");
  std::vector<uint8_t> codes = run.read<uint8_t>("fp8");
  std::vector<int32_t> il = run.read<int32_t>("pairs");
  // Hand-known cases first.
  CHECK(std::signbit(got[0]) == false);   // maximumf(-0, +0) = +0
  CHECK(std::signbit(got[64]) == true);   // minimumf(-0, +0) = -0
  CHECK(std::isnan(got[1]));              // NaN propagates
  CHECK(std::isnan(got[65]));
  CHECK(codes[2] == 0x7E);                // 500 -> 448
  CHECK(codes[3] == 0xFE);                // -1000 -> -448
  CHECK(codes[4] == 0x38);                // 1.0
  CHECK((codes[1] & 0x7F) == 0x7F);       // NaN
  for (int t = 0; t < 64; ++t) {
    INFO("lane " << t);
    const float x = in[size_t(t)], y = in[size_t(t + 64)];
    if (t >= 2) {
      CHECK(got[size_t(t)] == std::max(x, y));
      CHECK(got[size_t(64 + t)] == std::min(x, y));
    }
    if (t != 1)
      CHECK(got[size_t(128 + t)] == -std::fabs(x));
    CHECK(got[size_t(192 + t)] == static_cast<float>(std::exp2(double(y))));
    if (t != 1) {
      CHECK(codes[size_t(t)] ==
            moec::ref::encodeFp8E4M3(x, moec::ref::Overflow::Saturate));
      CHECK(got[size_t(256 + t)] ==
            static_cast<float>(moec::ref::decodeFp8E4M3(codes[size_t(t)])));
    }
    for (int e = 0; e < 4; ++e) {
      CHECK(il[size_t(8 * t + 2 * e)] == t);
      CHECK(il[size_t(8 * t + 2 * e + 1)] == t + 1000 * (e + 1));
    }
  }
}

TEST_CASE("memref.atomic_rmw on LDS and global memory", "[ops][atomics]") {
  const std::string text = kernelText(
      "hist", R"mlir((%old: memref<128xi32, #gpu.address_space<global>>,
                 %counts: memref<8xi32, #gpu.address_space<global>>,
                 %gmax: memref<2xi32, #gpu.address_space<global>>) workgroup(%lds : memref<8xi32, #gpu.address_space<workgroup>>))mlir",
      R"mlir(
    %c8 = arith.constant 8 : index
    %z = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %first = arith.cmpi ult, %tid, %c8 : index
    scf.if %first {
      memref.store %z, %lds[%tid] : memref<8xi32, #gpu.address_space<workgroup>>
    }
    gpu.barrier
    %bin = arith.remui %tid, %c8 : index
    %o = memref.atomic_rmw addi %one, %lds[%bin] : (i32, memref<8xi32, #gpu.address_space<workgroup>>) -> i32
    memref.store %o, %old[%tid] : memref<128xi32, #gpu.address_space<global>>
    %t = arith.index_cast %tid : index to i32
    %c77 = arith.constant 77 : i32
    %v = arith.subi %t, %c77 : i32
    %c0 = arith.constant 0 : index
    %m = memref.atomic_rmw maxs %v, %gmax[%c0] : (i32, memref<2xi32, #gpu.address_space<global>>) -> i32
    %c1 = arith.constant 1 : index
    %n = memref.atomic_rmw minu %v, %gmax[%c1] : (i32, memref<2xi32, #gpu.address_space<global>>) -> i32
    gpu.barrier
    scf.if %first {
      %c = memref.load %lds[%tid] : memref<8xi32, #gpu.address_space<workgroup>>
      memref.store %c, %counts[%tid] : memref<8xi32, #gpu.address_space<global>>
    }
)mlir", 128);
  ParsedKernel kernel = parseKernel(text);
  const BufferRun run(
      kernel, {BufferArg::output("old", 512), BufferArg::output("counts", 32),
               BufferArg::input("gmax", std::vector<int32_t>{-1000, -1})});
  CHECK(run.result.totalFindings() == 0);
  std::vector<int32_t> gotCounts = run.read<int32_t>("counts");
  for (int b = 0; b < 8; ++b)
    CHECK(gotCounts[size_t(b)] == 16);
  // Each bin's returned old values are exactly 0..15 in some order: every
  // lane saw a distinct count, as atomics guarantee.
  std::vector<int32_t> gotOld = run.read<int32_t>("old");
  for (int b = 0; b < 8; ++b) {
    std::vector<int32_t> seen;
    for (int t = b; t < 128; t += 8)
      seen.push_back(gotOld[size_t(t)]);
    std::sort(seen.begin(), seen.end());
    for (int i = 0; i < 16; ++i)
      CHECK(seen[size_t(i)] == i);
  }
  std::vector<int32_t> g = run.read<int32_t>("gmax");
  CHECK(g[0] == 127 - 77); // signed max
  CHECK(g[1] == 0);        // unsigned min of {-77..50} as u32 and 0xFFFFFFFF
}

namespace {

/// Two waves gather 16-byte chunks from a raw buffer into LDS. Lane l of
/// wave w reads chunk (5 l + 7 w) mod 64 (a permutation; 1000 valid bytes
/// leave chunks 62 and 63 out of range); wave 0 writes LDS dwords
/// [256, 512), wave 1 [0, 256) (BASE). Then lanes 8..39 of wave 0 gather
/// chunk l into a second LDS buffer pre-filled with -1 by ordinary stores,
/// from base 0: the first active lane is 8, but lane l still lands at
/// dword 4 l. Everything is copied to `out` after a barrier.
const std::string kGatherKernel = kernelText(
    "gather", R"mlir((%src: memref<256xi32, #gpu.address_space<global>>,
                   %out: memref<768xi32, #gpu.address_space<global>>,
                   %valid: i32)
      workgroup(%lds : memref<512xi32, #gpu.address_space<workgroup>>,
                %lds2 : memref<256xi32, #gpu.address_space<workgroup>>))mlir",
    R"mlir(
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %c7 = arith.constant 7 : index
    %c8 = arith.constant 8 : index
    %c40 = arith.constant 40 : index
    %c64 = arith.constant 64 : index
    %c256 = arith.constant 256 : index
    %v64 = arith.extui %valid : i32 to i64
    %rs = amdgpu.fat_raw_buffer_cast %src validBytes(%v64) : memref<256xi32, #gpu.address_space<global>> to memref<256xi32, #amdgpu.address_space<fat_raw_buffer>>
    %wave = arith.divui %tid, %c64 : index
    %lane = arith.remui %tid, %c64 : index
    %l5 = arith.muli %lane, %c5 : index
    %w7 = arith.muli %wave, %c7 : index
    %s = arith.addi %l5, %w7 : index
    %chunk = arith.remui %s, %c64 : index
    %srcIdx = arith.muli %chunk, %c4 : index
    %other = arith.subi %c1, %wave : index
    %base = BASE
    amdgpu.gather_to_lds %rs[%srcIdx], %lds[%base] : vector<4xi32>, memref<256xi32, #amdgpu.address_space<fat_raw_buffer>>, memref<512xi32, #gpu.address_space<workgroup>>
    %isWave0 = arith.cmpi eq, %wave, %c0 : index
    scf.if %isWave0 {
      %minus1 = arith.constant dense<-1> : vector<4xi32>
      %slot = arith.muli %lane, %c4 : index
      vector.store %minus1, %lds2[%slot] : memref<256xi32, #gpu.address_space<workgroup>>, vector<4xi32>
      %ge = arith.cmpi uge, %lane, %c8 : index
      %lt = arith.cmpi ult, %lane, %c40 : index
      %some = arith.andi %ge, %lt : i1
      scf.if %some {
        amdgpu.gather_to_lds %rs[%slot], %lds2[%c0] : vector<4xi32>, memref<256xi32, #amdgpu.address_space<fat_raw_buffer>>, memref<256xi32, #gpu.address_space<workgroup>>
      }
    }
    amdgpu.memory_counter_wait load(0)
    gpu.barrier
    %mine = arith.muli %tid, %c4 : index
    %v = vector.load %lds[%mine] : memref<512xi32, #gpu.address_space<workgroup>>, vector<4xi32>
    vector.store %v, %out[%mine] : memref<768xi32, #gpu.address_space<global>>, vector<4xi32>
    scf.if %isWave0 {
      %w = vector.load %lds2[%mine] : memref<256xi32, #gpu.address_space<workgroup>>, vector<4xi32>
      %at = arith.addi %mine, %c256 : index
      %at2 = arith.addi %at, %c256 : index
      vector.store %w, %out[%at2] : memref<768xi32, #gpu.address_space<global>>, vector<4xi32>
    }
)mlir", 128);

std::string gatherKernel(const std::string &base) {
  std::string text = kGatherKernel;
  const std::string marker = "BASE";
  text.replace(text.find(marker), marker.size(), base);
  return text;
}

} // namespace

TEST_CASE("amdgpu.gather_to_lds: per-lane raw-buffer reads, LDS in lane "
          "order from the wave's base",
          "[ops][gather]") {
  ParsedKernel kernel = parseKernel(
      gatherKernel("arith.muli %other, %c256 : index"));
  std::string error;
  REQUIRE(mlir::succeeded(checkSupported(kernel.func, error)));
  std::vector<int32_t> src(256);
  for (int i = 0; i < 256; ++i)
    src[size_t(i)] = 1000 + 7 * i;
  const int64_t validBytes = 1000;
  GlobalMemory memory;
  unsigned srcId = addInput(memory, "src", src);
  unsigned out = memory.addBuffer("out", 768 * 4);
  RunResult result = runOrFail(kernel, memory,
                               {KernelArgValue::makeBuffer(srcId),
                                KernelArgValue::makeBuffer(out),
                                KernelArgValue::makeScalar(validBytes)});
  // Every LDS byte read was written by a gather or a store: no finding.
  CHECK(result.totalFindings() == 0);
  // Wave 0 ran two gathers, wave 1 one.
  CHECK(result.stats.ldsDmaOps == 3);
  // Chunks 62 and 63 (bytes [992, 1024)) fail the range check once per wave.
  CHECK(result.stats.rawLoadsOutOfRange == 4);
  std::vector<int32_t> got = readBuffer<int32_t>(memory, out);
  auto chunkValue = [&](int chunk, int j) {
    return 16 * chunk + 16 <= validBytes ? src[size_t(4 * chunk + j)] : 0;
  };
  int zeros = 0;
  for (int slot = 0; slot < 128; ++slot) {
    // LDS slots [0, 64) hold wave 1's lanes, [64, 128) wave 0's.
    const int w = slot < 64 ? 1 : 0;
    const int l = slot % 64;
    const int chunk = (5 * l + 7 * w) % 64;
    for (int j = 0; j < 4; ++j) {
      INFO("LDS slot " << slot << " dword " << j << " (wave " << w << " lane "
                       << l << ", chunk " << chunk << ")");
      CHECK(got[size_t(4 * slot + j)] == chunkValue(chunk, j));
      zeros += got[size_t(4 * slot + j)] == 0;
    }
  }
  CHECK(zeros == 4 * 4);
  for (int l = 0; l < 64; ++l) {
    for (int j = 0; j < 4; ++j) {
      INFO("second buffer lane " << l << " dword " << j);
      const bool gathered = l >= 8 && l < 40;
      CHECK(got[size_t(512 + 4 * l + j)] ==
            (gathered ? src[size_t(4 * l + j)] : -1));
    }
  }
}

TEST_CASE("amdgpu.gather_to_lds writes are seen by the LDS detectors",
          "[ops][gather][detector]") {
  std::vector<int32_t> src(256, 3);
  auto run = [&](const std::string &base) {
    ParsedKernel kernel = parseKernel(gatherKernel(base));
    GlobalMemory memory;
    unsigned srcId = addInput(memory, "src", src);
    unsigned out = memory.addBuffer("out", 768 * 4);
    return runOrFail(kernel, memory,
                     {KernelArgValue::makeBuffer(srcId),
                      KernelArgValue::makeBuffer(out),
                      KernelArgValue::makeScalar(int64_t(1024))});
  };
  SECTION("both waves gather to the same LDS in one barrier interval") {
    RunResult result = run("arith.muli %c0, %c256 : index");
    CHECK(countOf(result, FindingKind::LdsRace) > 0);
    bool named = false;
    for (const Finding &f : result.findings)
      named |= f.opName == "amdgpu.gather_to_lds" && f.wave == 1;
    CHECK(named);
    // Dwords [256, 512) were never written; wave 1 reads them.
    CHECK(countOf(result, FindingKind::UninitializedRead) > 0);
  }
  SECTION("a base past the end of LDS") {
    // Base dword 400 of 512: lane l writes bytes [1600 + 16 l, +16), so
    // lanes 28..63 of both waves are out of bounds.
    RunResult result = run("arith.addi %c256, %c256 : index");
    CHECK(countOf(result, FindingKind::OutOfBounds) == 2 * 64);
    RunResult partly = run("arith.constant 400 : index");
    CHECK(countOf(partly, FindingKind::OutOfBounds) == 2 * 36);
  }
}

TEST_CASE("amdgpu.gather_to_lds needs one LDS base per wave", "[ops][gather]") {
  // Every lane passing its own destination is an error, not a guess.
  ParsedKernel kernel = parseKernel(gatherKernel("arith.muli %tid, %c4 : index"));
  std::vector<int32_t> src(256, 1);
  GlobalMemory memory;
  unsigned srcId = addInput(memory, "src", src);
  unsigned out = memory.addBuffer("out", 768 * 4);
  std::string error;
  std::vector<KernelArgValue> args = {KernelArgValue::makeBuffer(srcId),
                                      KernelArgValue::makeBuffer(out),
                                      KernelArgValue::makeScalar(int64_t(1024))};
  mlir::FailureOr<RunResult> result =
      runKernel(kernel.func, memory, args, LaunchConfig(), error);
  CHECK(mlir::failed(result));
  INFO(error);
  CHECK(error.find("amdgpu.gather_to_lds") != std::string::npos);
  CHECK(error.find("lanes 0 and 1 pass different LDS destinations") !=
        std::string::npos);
}
