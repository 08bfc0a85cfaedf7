//===- A16W4KernelTest.cpp - BF16 activation kernels vs the oracle ---------===//
//
// A16W4 (problem.activation bf16, MXFP4 weights) on the emulator:
//
// - amdgpu.mfma 16x16x32 and 32x32x16 on vector<8xbf16> operands in kernel
//   IR against a plain loop over the gfx950 lane layout written out here
//   (lane l supplies row / column l mod dim and K 8 (l / dim) .. + 7; C
//   value a of lane l is row (a / 4) 4 (64 / dim) + 4 (l / dim) + a mod 4,
//   column l mod dim), on seeded random BF16 operands and C: bit-identical
//   to the loop's double sum rounded once to FP32 (the emulator's documented
//   arithmetic, ScaledMfma.h), and a K-permuted operand changes the result.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/Compiler/Pipeline.h"
#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Tolerance.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

using namespace moec;
using namespace moec::emu;

namespace {

//===----------------------------------------------------------------------===//
// The BF16 MFMA op
//===----------------------------------------------------------------------===//

struct Bf16Geometry {
  int dim, k, accPerLane;
};

/// Random BF16 bits of magnitude in [2^-4, 2^4), both signs.
std::vector<uint16_t> randomBf16(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mag(-4.0, 4.0);
  std::vector<uint16_t> bits(count);
  for (auto &b : bits)
    b = ref::encodeBf16((rng() & 1 ? -1.0 : 1.0) * std::exp2(mag(rng)));
  return bits;
}

/// D of one wave by the plain loop: A [dim][k] and B [k][dim] row-major.
std::vector<float> expectedBf16D(const Bf16Geometry &g,
                                 const std::vector<uint16_t> &a,
                                 const std::vector<uint16_t> &b,
                                 const std::vector<float> &c) {
  const int groups = 64 / g.dim;
  std::vector<float> d(size_t(64 * g.accPerLane));
  for (int lane = 0; lane < 64; ++lane)
    for (int acc = 0; acc < g.accPerLane; ++acc) {
      const int row = (acc / 4) * 4 * groups + 4 * (lane / g.dim) + acc % 4;
      const int col = lane % g.dim;
      double sum = 0.0;
      for (int k = 0; k < g.k; ++k)
        sum += double(ref::decodeBf16(a[size_t(row * g.k + k)])) *
               double(ref::decodeBf16(b[size_t(k * g.dim + col)]));
      const size_t slot = size_t(lane * g.accPerLane + acc);
      d[slot] = float(sum + double(c[slot]));
    }
  return d;
}

/// Lane registers (8 BF16 each) of A [dim][k] (rows) or B [k][dim]
/// (columns); `permute` swaps the lane's two halves (a wrong K order).
std::vector<uint16_t> toBf16Lanes(const Bf16Geometry &g,
                                  const std::vector<uint16_t> &m, bool isB,
                                  bool permute = false) {
  std::vector<uint16_t> regs(64 * 8);
  for (int lane = 0; lane < 64; ++lane)
    for (int e = 0; e < 8; ++e) {
      const int rc = lane % g.dim, k = 8 * (lane / g.dim) + e;
      const int slot = permute ? (e + 4) % 8 : e;
      regs[size_t(lane * 8 + slot)] =
          isB ? m[size_t(k * g.dim + rc)] : m[size_t(rc * g.k + k)];
    }
  return regs;
}

std::string bf16MfmaKernel(const Bf16Geometry &g) {
  const std::string mnk = std::to_string(g.dim) + "x" + std::to_string(g.dim) +
                          "x" + std::to_string(g.k);
  const std::string acc = std::to_string(g.accPerLane);
  return "gpu.module @m {\n"
         "  gpu.func @mfma(%a: memref<256xi32, #gpu.address_space<global>>,\n"
         "      %b: memref<256xi32, #gpu.address_space<global>>,\n"
         "      %c: memref<1024xf32, #gpu.address_space<global>>,\n"
         "      %d: memref<1024xf32, #gpu.address_space<global>>) kernel\n"
         "      attributes {known_block_size = array<i32: 64, 1, 1>} {\n"
         "    %tid = gpu.thread_id x\n"
         "    %c4 = arith.constant 4 : index\n"
         "    %cacc = arith.constant " + acc + " : index\n"
         "    %r4 = arith.muli %tid, %c4 : index\n"
         "    %racc = arith.muli %tid, %cacc : index\n"
         "    %avi = vector.load %a[%r4] : memref<256xi32, #gpu.address_space<global>>, vector<4xi32>\n"
         "    %av = vector.bitcast %avi : vector<4xi32> to vector<8xbf16>\n"
         "    %bvi = vector.load %b[%r4] : memref<256xi32, #gpu.address_space<global>>, vector<4xi32>\n"
         "    %bv = vector.bitcast %bvi : vector<4xi32> to vector<8xbf16>\n"
         "    %cv = vector.load %c[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
         "    %dv = amdgpu.mfma " + mnk + " %av * %bv + %cv blgp = none : "
         "vector<8xbf16>, vector<8xbf16>, vector<" + acc + "xf32>\n"
         "    vector.store %dv, %d[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
         "    gpu.return\n"
         "  }\n"
         "}\n";
}

} // namespace

TEST_CASE("amdgpu.mfma on BF16 (16x16x32, 32x32x16) matches a plain loop",
          "[a16w4][mfma][ops]") {
  for (const Bf16Geometry g : {Bf16Geometry{16, 32, 4}, Bf16Geometry{32, 16, 16}}) {
    test::ParsedKernel kernel = test::parseKernel(bf16MfmaKernel(g));
    const std::vector<uint16_t> a = randomBf16(size_t(g.dim * g.k), 11 + g.dim);
    const std::vector<uint16_t> b = randomBf16(size_t(g.k * g.dim), 23 + g.dim);
    std::mt19937 rng(37 + g.dim);
    std::uniform_real_distribution<float> cDist(-8.0f, 8.0f);
    std::vector<float> c(size_t(64 * g.accPerLane));
    for (float &v : c)
      v = cDist(rng);
    std::vector<float> cFull(1024, 0.0f);
    std::copy(c.begin(), c.end(), cFull.begin());
    const std::vector<float> want = expectedBf16D(g, a, b, c);
    INFO("shape " << g.dim << "x" << g.dim << "x" << g.k);
    for (bool permute : {false, true}) {
      const test::BufferRun run(
          kernel, {test::BufferArg::input("a", toBf16Lanes(g, a, false, permute)),
                   test::BufferArg::input("b", toBf16Lanes(g, b, true)),
                   test::BufferArg::input("c", cFull),
                   test::BufferArg::output("d", 1024 * 4)});
      CHECK(run.result.stats.mfmas == 1);
      CHECK(run.result.totalFindings() == 0);
      const std::vector<float> got = run.read<float>("d");
      const bool equal = std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
      INFO("A's K order permuted: " << permute);
      // The right lane layout gives the loop's result bit for bit; a wrong
      // K order on one side must not.
      CHECK(equal == !permute);
    }
  }
}

