//===- ScaledMfmaTest.cpp - MFMA lane layouts against hand-computed cases -===//
//
// The expected results use the layout as docs/targets.md ("Scaled-MFMA lane layout") states it,
// written out again here, not moec/target/mfma_layout.h: a wrong table would
// disagree with this test. Every random case uses random per-block scales
// and mixed FP8 x FP4 operands, since uniform scales hide a wrong K order.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/Emulator/ScaledMfma.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace moec;
using namespace moec::emu;
using namespace moec::emu::test;

namespace {

struct Geometry {
  mfma::Shape shape;
  int dim, k, groups, accPerLane;
};

Geometry geometry(mfma::Shape shape) {
  return shape == mfma::Shape::M32N32K64 ? Geometry{shape, 32, 64, 2, 16}
                                         : Geometry{shape, 16, 128, 4, 4};
}

/// docs/targets.md: FP8 byte e of lane group g holds k = (K/2)(e/16) + 16g + e%16;
/// FP4 element e holds k = 32g + e.
int factsK(const Geometry &geo, mfma::OperandFormat format, int lane, int e) {
  const int g = lane / geo.dim;
  if (format == mfma::OperandFormat::Fp8)
    return (geo.k / 2) * (e / 16) + 16 * g + e % 16;
  return 32 * g + e;
}

/// docs/targets.md: acc[4i+j] -> m = 8i + 4g + j (32x32); acc[j] -> m = 4g + j (16x16).
int factsAccRow(const Geometry &geo, int lane, int acc) {
  const int g = lane / geo.dim;
  if (geo.dim == 32)
    return 8 * (acc / 4) + 4 * g + acc % 4;
  return 4 * g + acc;
}

/// One operand as a matrix: codes [dim][K] (row = M of A or N of B) and
/// scale codes [dim][K/32].
struct Matrix {
  mfma::OperandFormat format;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
};

uint8_t randomCode(mfma::OperandFormat format, uint64_t bits) {
  if (format == mfma::OperandFormat::Fp4)
    return static_cast<uint8_t>(bits & 0xF);
  // FP8 with biased exponent in [4, 11]: every product and sum below is then
  // exact in double, so the expected value is the exact result rounded once.
  const uint8_t sign = (bits >> 8) & 1, exponent = 4 + ((bits >> 4) & 7),
                mantissa = bits & 7;
  return static_cast<uint8_t>(sign << 7 | exponent << 3 | mantissa);
}

Matrix randomMatrix(const Geometry &geo, mfma::OperandFormat format,
                    uint64_t seed) {
  ref::CounterRandom random(seed, 3);
  Matrix m{format, std::vector<uint8_t>(size_t(geo.dim * geo.k)),
           std::vector<uint8_t>(size_t(geo.dim * geo.k / 32))};
  for (size_t i = 0; i < m.codes.size(); ++i)
    m.codes[i] = randomCode(format, random.bits(i));
  // Scales 2^-3 .. 2^3, independent per (row, block).
  for (size_t i = 0; i < m.scales.size(); ++i)
    m.scales[i] = static_cast<uint8_t>(124 + random.bits(1000000 + i) % 7);
  return m;
}

double decode(mfma::OperandFormat format, uint8_t code) {
  return format == mfma::OperandFormat::Fp8 ? ref::decodeFp8E4M3(code)
                                            : ref::decodeE2M1(code);
}

/// Lane registers (32 bytes per lane) and per-lane scale bytes of a matrix,
/// placed with the formulas of docs/targets.md.
void toLanes(const Geometry &geo, const Matrix &m, std::vector<uint8_t> &regs,
             std::vector<uint8_t> &scales) {
  regs.assign(64 * 32, 0);
  scales.assign(64, 0);
  for (int lane = 0; lane < 64; ++lane) {
    const int row = lane % geo.dim, g = lane / geo.dim;
    for (int e = 0; e < 32; ++e) {
      const uint8_t code =
          m.codes[size_t(row * geo.k + factsK(geo, m.format, lane, e))];
      if (m.format == mfma::OperandFormat::Fp8) {
        regs[size_t(lane * 32 + e)] = code;
      } else {
        uint8_t &byte = regs[size_t(lane * 32 + e / 2)];
        byte |= static_cast<uint8_t>((code & 0xF) << (e % 2 ? 4 : 0));
      }
    }
    scales[size_t(lane)] = m.scales[size_t(row * (geo.k / 32) + g)];
  }
}

/// D[lane][acc] expected from the matrices: exact sum in double, rounded
/// once to float, plus C.
std::vector<float> expectedD(const Geometry &geo, const Matrix &a,
                             const Matrix &b, const std::vector<float> &c) {
  std::vector<float> d(size_t(64 * geo.accPerLane));
  for (int lane = 0; lane < 64; ++lane)
    for (int acc = 0; acc < geo.accPerLane; ++acc) {
      const int m = factsAccRow(geo, lane, acc), n = lane % geo.dim;
      double sum = 0.0;
      for (int k = 0; k < geo.k; ++k)
        sum += decode(a.format, a.codes[size_t(m * geo.k + k)]) *
               ref::decodeE8M0(a.scales[size_t(m * (geo.k / 32) + k / 32)]) *
               decode(b.format, b.codes[size_t(n * geo.k + k)]) *
               ref::decodeE8M0(b.scales[size_t(n * (geo.k / 32) + k / 32)]);
      const size_t slot = size_t(lane * geo.accPerLane + acc);
      d[slot] = static_cast<float>(sum + double(c[slot]));
    }
  return d;
}

std::vector<float> randomC(const Geometry &geo, uint64_t seed) {
  ref::CounterRandom random(seed, 9);
  std::vector<float> c(size_t(64 * geo.accPerLane));
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = static_cast<float>(random.normal(i));
  return c;
}

/// One E8M0 scale per lane near 1 (2^-7 .. 2^7), drawn from `random` at
/// indices first .. first + 63.
std::vector<uint8_t> nearUnitScales(const ref::CounterRandom &random,
                                    uint64_t first) {
  std::vector<uint8_t> scales(64);
  for (uint64_t l = 0; l < 64; ++l)
    scales[l] = static_cast<uint8_t>(120 + random.bits(first + l) % 15);
  return scales;
}

/// The placement tests' operands: FP8 (or FP4) A and FP4 B registers, zero but for
/// the one product a test places, with per-lane scales near 1.
struct SingleProduct {
  explicit SingleProduct(uint64_t seed)
      : random(seed, seed), aScales(nearUnitScales(random, 0)),
        bScales(nearUnitScales(random, 100)) {}

  /// Runs `shape` with every accumulator starting at `c0` and checks that
  /// only accumulator `hitAcc` of `hitLane` gains `product`.
  void check(mfma::Shape shape, float c0, int hitLane, int hitAcc,
             float product) {
    const int accPerLane = geometry(shape).accPerLane;
    std::vector<float> c(size_t(64 * accPerLane), c0), d(c.size());
    MfmaOperand a{aFormat, aRegs.data(), 32, aScales.data()};
    MfmaOperand b{mfma::OperandFormat::Fp4, bRegs.data(), 32, bScales.data()};
    scaledMfma(shape, a, b, c.data(), d.data());
    for (int lane = 0; lane < 64; ++lane)
      for (int acc = 0; acc < accPerLane; ++acc) {
        INFO("lane " << lane << " acc " << acc);
        CHECK(d[size_t(lane * accPerLane + acc)] ==
              (lane == hitLane && acc == hitAcc ? product + c0 : c0));
      }
  }

  const ref::CounterRandom random;
  /// A's format field (the instruction's cbsz): FP8 unless a test sets FP4.
  mfma::OperandFormat aFormat = mfma::OperandFormat::Fp8;
  std::vector<uint8_t> aRegs = std::vector<uint8_t>(64 * 32, 0);
  std::vector<uint8_t> bRegs = std::vector<uint8_t>(64 * 32, 0);
  std::vector<uint8_t> aScales, bScales;
};

} // namespace

TEST_CASE("32x32x64: one FP8 x FP4 product lands where docs/targets.md says",
          "[mfma]") {
  // A[m=5][k=37] = 1.5 (FP8): k = 32*(e/16) + 16g + e%16 gives g = 0,
  // e = 21, so lane 5 byte 21. Its scale (row 5, block 1) sits in lane
  // 5 + 32 = 37. B[k=37][n=9] = -3 (FP4): k = 32g + e gives g = 1, e = 5, so
  // lane 9 + 32 = 41, byte 2 high nibble; scale (column 9, block 1) in lane
  // 41. D[5][9]: m = 5 = 8i + 4g + j gives i = 0, g = 1, j = 1: lane 41,
  // acc 1. Value 1.5 * 2^2 * -3 * 2^-1 = -9.
  SingleProduct p(5);
  p.aRegs[5 * 32 + 21] = ref::encodeFp8E4M3(1.5);
  p.aScales[37] = 129;
  p.bRegs[41 * 32 + 2] = static_cast<uint8_t>(ref::encodeE2M1(-3.0) << 4);
  p.bScales[41] = 126;
  p.check(mfma::Shape::M32N32K64, 0.25f, /*hitLane=*/41, /*hitAcc=*/1, -9.0f);
}

TEST_CASE("16x16x128: one FP8 x FP4 product lands where docs/targets.md says",
          "[mfma]") {
  // A[m=3][k=100]: k = 64*(e/16) + 16g + e%16 gives e/16 = 1, g = 2,
  // e = 20: lane 3 + 32 = 35 byte 20; scale (row 3, block 3) in lane
  // 3 + 48 = 51. B[k=100][n=12]: g = 3, e = 4: lane 12 + 48 = 60, byte 2 low
  // nibble; scale (column 12, block 3) in lane 60. D[3][12]: m = 3 = 4g + j
  // gives g = 0, j = 3: lane 12, acc 3. Value -0.375 * 2^-3 * 6 * 2^5 = -9.
  SingleProduct p(6);
  p.aRegs[35 * 32 + 20] = ref::encodeFp8E4M3(-0.375);
  p.aScales[51] = 124;
  p.bRegs[60 * 32 + 2] = ref::encodeE2M1(6.0);
  p.bScales[60] = 132;
  p.check(mfma::Shape::M16N16K128, 0.0f, /*hitLane=*/12, /*hitAcc=*/3, -9.0f);
}

TEST_CASE("32x32x64 and 16x16x128: one FP4 x FP4 product (A4W4)", "[mfma]") {
  // 32x32x64. A[m=5][k=37] = 1.5 (FP4): k = 32g + e gives g = 1, e = 5, so
  // lane 5 + 32 = 37, byte 2 high nibble; its scale (row 5, block 1) sits in
  // the same lane 37. B[k=37][n=9] = -3: lane 41, byte 2 high nibble, scale
  // in lane 41. D[5][9]: lane 41, acc 1. Value 1.5 * 2^2 * -3 * 2^-1 = -9.
  {
    SingleProduct p(7);
    p.aFormat = mfma::OperandFormat::Fp4;
    p.aRegs[37 * 32 + 2] = static_cast<uint8_t>(ref::encodeE2M1(1.5) << 4);
    p.aScales[37] = 129;
    p.bRegs[41 * 32 + 2] = static_cast<uint8_t>(ref::encodeE2M1(-3.0) << 4);
    p.bScales[41] = 126;
    p.check(mfma::Shape::M32N32K64, 0.25f, /*hitLane=*/41, /*hitAcc=*/1, -9.0f);
  }
  // 16x16x128. A[m=3][k=100] = -4: g = 3, e = 4, so lane 3 + 48 = 51, byte
  // 2 low nibble, scale (row 3, block 3) in lane 51. B[k=100][n=12] = 6:
  // lane 60, byte 2 low nibble. D[3][12]: lane 12, acc 3.
  // Value -4 * 2^1 * 6 * 2^-2 = -12.
  {
    SingleProduct p(8);
    p.aFormat = mfma::OperandFormat::Fp4;
    p.aRegs[51 * 32 + 2] = ref::encodeE2M1(-4.0);
    p.aScales[51] = 128;
    p.bRegs[60 * 32 + 2] = ref::encodeE2M1(6.0);
    p.bScales[60] = 125;
    p.check(mfma::Shape::M16N16K128, 0.0f, /*hitLane=*/12, /*hitAcc=*/3, -12.0f);
  }
}

TEST_CASE("random mixed-format operands with random per-block scales",
          "[mfma]") {
  using F = mfma::OperandFormat;
  for (mfma::Shape shape : {mfma::Shape::M32N32K64, mfma::Shape::M16N16K128})
    for (auto [fa, fb] : {std::pair{F::Fp8, F::Fp4}, std::pair{F::Fp4, F::Fp8},
                          std::pair{F::Fp8, F::Fp8}, std::pair{F::Fp4, F::Fp4}})
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        const Geometry geo = geometry(shape);
        Matrix a = randomMatrix(geo, fa, seed * 10 + 1);
        Matrix b = randomMatrix(geo, fb, seed * 10 + 2);
        std::vector<float> c = randomC(geo, seed);
        std::vector<uint8_t> aRegs, aScales, bRegs, bScales;
        toLanes(geo, a, aRegs, aScales);
        toLanes(geo, b, bRegs, bScales);
        std::vector<float> d(c.size());
        scaledMfma(shape, MfmaOperand{fa, aRegs.data(), 32, aScales.data()},
                   MfmaOperand{fb, bRegs.data(), 32, bScales.data()}, c.data(),
                   d.data());
        std::vector<float> want = expectedD(geo, a, b, c);
        INFO("shape " << geo.dim << " formats " << int(fa) << "x" << int(fb)
                      << " seed " << seed);
        CHECK(std::memcmp(d.data(), want.data(), d.size() * 4) == 0);
      }
}

TEST_CASE("a permuted K order is visible with per-block scales", "[mfma]") {
  // Guard for the test itself: swapping the two FP8 16-byte chunks of every
  // lane (the "contiguous FP8" trap docs/targets.md names) must change the result.
  const Geometry geo = geometry(mfma::Shape::M32N32K64);
  Matrix a = randomMatrix(geo, mfma::OperandFormat::Fp8, 77);
  Matrix b = randomMatrix(geo, mfma::OperandFormat::Fp4, 78);
  std::vector<float> c(64 * 16, 0.0f), d(64 * 16);
  std::vector<uint8_t> aRegs, aScales, bRegs, bScales;
  toLanes(geo, a, aRegs, aScales);
  toLanes(geo, b, bRegs, bScales);
  for (int lane = 0; lane < 64; ++lane)
    for (int e = 0; e < 16; ++e)
      std::swap(aRegs[size_t(lane * 32 + e)], aRegs[size_t(lane * 32 + 16 + e)]);
  scaledMfma(geo.shape,
             MfmaOperand{mfma::OperandFormat::Fp8, aRegs.data(), 32, aScales.data()},
             MfmaOperand{mfma::OperandFormat::Fp4, bRegs.data(), 32, bScales.data()},
             c.data(), d.data());
  std::vector<float> want = expectedD(geo, a, b, c);
  CHECK(std::memcmp(d.data(), want.data(), d.size() * 4) != 0);
}

TEST_CASE("amdgpu.scaled_mfma in kernel IR, both shapes, op_sel bytes",
          "[mfma][ops]") {
  using F = mfma::OperandFormat;
  struct Variant {
    mfma::Shape shape;
    F fa, fb;
  };
  for (Variant v : {Variant{mfma::Shape::M32N32K64, F::Fp8, F::Fp4},
                    Variant{mfma::Shape::M32N32K64, F::Fp4, F::Fp8},
                    Variant{mfma::Shape::M16N16K128, F::Fp8, F::Fp4},
                    Variant{mfma::Shape::M16N16K128, F::Fp4, F::Fp8},
                    // A4W4: FP4 in both format fields.
                    Variant{mfma::Shape::M32N32K64, F::Fp4, F::Fp4},
                    Variant{mfma::Shape::M16N16K128, F::Fp4, F::Fp4}}) {
    const Geometry geo = geometry(v.shape);
    const std::string mnk = geo.dim == 32 ? "32x32x64" : "16x16x128";
    const std::string acc = std::to_string(geo.accPerLane);
    auto typeOf = [](F f) {
      return f == F::Fp8 ? std::string("vector<32xf8E4M3FN>")
                         : std::string("vector<32xf4E2M1FN>");
    };
    auto loadOf = [](F f, const std::string &name, const std::string &buffer) {
      // FP8: 8 dwords per lane; FP4: 4 dwords (the upper half is unused).
      if (f == F::Fp8)
        return "    %" + name + "i = vector.load %" + buffer +
               "[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<8xi32>\n"
               "    %" + name + " = vector.bitcast %" + name +
               "i : vector<8xi32> to vector<32xf8E4M3FN>\n";
      return "    %" + name + "i = vector.load %" + buffer +
             "[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<4xi32>\n"
             "    %" + name + " = vector.bitcast %" + name +
             "i : vector<4xi32> to vector<32xf4E2M1FN>\n";
    };
    const std::string text =
        "gpu.module @m {\n"
        "  gpu.func @mfma(%a: memref<512xi32, #gpu.address_space<global>>,\n"
        "      %b: memref<512xi32, #gpu.address_space<global>>,\n"
        "      %sa: memref<256xi8, #gpu.address_space<global>>,\n"
        "      %sb: memref<64xi8, #gpu.address_space<global>>,\n"
        "      %c: memref<1024xf32, #gpu.address_space<global>>,\n"
        "      %d: memref<1024xf32, #gpu.address_space<global>>) kernel\n"
        "      attributes {known_block_size = array<i32: 64, 1, 1>} {\n"
        "    %tid = gpu.thread_id x\n"
        "    %c8 = arith.constant 8 : index\n"
        "    %c4 = arith.constant 4 : index\n"
        "    %cacc = arith.constant " + acc + " : index\n"
        "    %r8 = arith.muli %tid, %c8 : index\n"
        "    %r4 = arith.muli %tid, %c4 : index\n"
        "    %racc = arith.muli %tid, %cacc : index\n" +
        loadOf(v.fa, "av", "a") + loadOf(v.fb, "bv", "b") +
        // A's scales: four bytes per lane, the kernel selects byte 2.
        "    %sai = vector.load %sa[%r4] : memref<256xi8, #gpu.address_space<global>>, vector<4xi8>\n"
        "    %sav = vector.bitcast %sai : vector<4xi8> to vector<4xf8E8M0FNU>\n"
        "    %sbi = memref.load %sb[%tid] : memref<64xi8, #gpu.address_space<global>>\n"
        "    %sbv = arith.bitcast %sbi : i8 to f8E8M0FNU\n"
        "    %cv = vector.load %c[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
        "    %dv = amdgpu.scaled_mfma " + mnk + " (%sav[2] * %av) * (%sbv[0] * %bv) + %cv : "
        "vector<4xf8E8M0FNU>, " + typeOf(v.fa) + ", f8E8M0FNU, " + typeOf(v.fb) +
        ", vector<" + acc + "xf32>\n"
        "    vector.store %dv, %d[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
        "    gpu.return\n"
        "  }\n"
        "}\n";
    ParsedKernel kernel = parseKernel(text);
    Matrix a = randomMatrix(geo, v.fa, 31 + int(v.shape) * 7 + int(v.fa));
    Matrix b = randomMatrix(geo, v.fb, 41 + int(v.shape) * 7 + int(v.fb));
    std::vector<float> c = randomC(geo, 3);
    std::vector<uint8_t> aRegs, aScales, bRegs, bScales;
    toLanes(geo, a, aRegs, aScales);
    toLanes(geo, b, bRegs, bScales);
    // Byte 2 of each lane's scale dword is the real scale; the others are
    // decoys that would change the result if op_sel were ignored.
    std::vector<uint8_t> aScaleDwords(256);
    for (int l = 0; l < 64; ++l)
      for (int byte = 0; byte < 4; ++byte)
        aScaleDwords[size_t(l * 4 + byte)] =
            byte == 2 ? aScales[size_t(l)] : static_cast<uint8_t>(140 + byte);
    std::vector<float> cFull(1024, 0.0f);
    std::copy(c.begin(), c.end(), cFull.begin());
    const BufferRun run(
        kernel, {BufferArg::input("a", aRegs), BufferArg::input("b", bRegs),
                 BufferArg::input("sa", aScaleDwords),
                 BufferArg::input("sb", bScales), BufferArg::input("c", cFull),
                 BufferArg::output("d", 1024 * 4)});
    CHECK(run.result.stats.mfmas == 1);
    CHECK(run.result.totalFindings() == 0);
    std::vector<float> got = run.read<float>("d");
    std::vector<float> want = expectedD(geo, a, b, c);
    INFO("shape " << mnk << " A " << int(v.fa) << " B " << int(v.fb));
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
  }
}

TEST_CASE("amdgpu.mfma (unscaled f8f6f4) is the scaled MFMA with unit scales",
          "[mfma][ops]") {
  using F = mfma::OperandFormat;
  for (mfma::Shape shape : {mfma::Shape::M32N32K64, mfma::Shape::M16N16K128}) {
    const Geometry geo = geometry(shape);
    const std::string mnk = geo.dim == 32 ? "32x32x64" : "16x16x128";
    const std::string acc = std::to_string(geo.accPerLane);
    const std::string text =
        "gpu.module @m {\n"
        "  gpu.func @mfma(%a: memref<512xi32, #gpu.address_space<global>>,\n"
        "      %b: memref<512xi32, #gpu.address_space<global>>,\n"
        "      %c: memref<1024xf32, #gpu.address_space<global>>,\n"
        "      %d: memref<1024xf32, #gpu.address_space<global>>) kernel\n"
        "      attributes {known_block_size = array<i32: 64, 1, 1>} {\n"
        "    %tid = gpu.thread_id x\n"
        "    %c8 = arith.constant 8 : index\n"
        "    %cacc = arith.constant " + acc + " : index\n"
        "    %r8 = arith.muli %tid, %c8 : index\n"
        "    %racc = arith.muli %tid, %cacc : index\n"
        "    %avi = vector.load %a[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<8xi32>\n"
        "    %av = vector.bitcast %avi : vector<8xi32> to vector<32xf8E4M3FN>\n"
        "    %bvi = vector.load %b[%r8] : memref<512xi32, #gpu.address_space<global>>, vector<4xi32>\n"
        "    %bv = vector.bitcast %bvi : vector<4xi32> to vector<32xf4E2M1FN>\n"
        "    %cv = vector.load %c[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
        "    %dv = amdgpu.mfma " + mnk + " %av * %bv + %cv blgp = none : "
        "vector<32xf8E4M3FN>, vector<32xf4E2M1FN>, vector<" + acc + "xf32>\n"
        "    vector.store %dv, %d[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
        "    gpu.return\n"
        "  }\n"
        "}\n";
    ParsedKernel kernel = parseKernel(text);
    Matrix a = randomMatrix(geo, F::Fp8, 51 + int(shape));
    Matrix b = randomMatrix(geo, F::Fp4, 61 + int(shape));
    // Unit block scales: the oracle then computes the unscaled product.
    std::fill(a.scales.begin(), a.scales.end(), uint8_t(127));
    std::fill(b.scales.begin(), b.scales.end(), uint8_t(127));
    std::vector<float> c = randomC(geo, 5);
    std::vector<uint8_t> aRegs, aScales, bRegs, bScales;
    toLanes(geo, a, aRegs, aScales);
    toLanes(geo, b, bRegs, bScales);
    std::vector<float> cFull(1024, 0.0f);
    std::copy(c.begin(), c.end(), cFull.begin());
    const BufferRun run(kernel, {BufferArg::input("a", aRegs),
                                 BufferArg::input("b", bRegs),
                                 BufferArg::input("c", cFull),
                                 BufferArg::output("d", 1024 * 4)});
    CHECK(run.result.stats.mfmas == 1);
    std::vector<float> got = run.read<float>("d");
    std::vector<float> want = expectedD(geo, a, b, c);
    INFO("shape " << mnk);
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
  }
}
