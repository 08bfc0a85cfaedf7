// Block quantisers: recipes checked against brute-force definitions, error
// bounds, no saturation, packing and non-finite blocks.

#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace moec::ref;

namespace {

/// Smallest k with maxValue * 2^k >= magnitude, by linear search.
int smallestCoveringExponent(double magnitude, double maxValue) {
  int k = -300;
  while (std::ldexp(maxValue, k) < magnitude)
    ++k;
  return k;
}

/// Rows of 32-element blocks with block magnitudes spread over many octaves,
/// including an all-zero block and a block below the 1e-4 floor.
std::vector<double> spreadRow(std::mt19937_64 &rng, int64_t k) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> octave(-30.0, 20.0);
  std::vector<double> row(k);
  for (int64_t block = 0; block < k / 32; ++block) {
    double magnitude = std::pow(2.0, octave(rng));
    if (block == 1)
      magnitude = 0.0;
    if (block == 2)
      magnitude = 1e-7;
    for (int i = 0; i < 32; ++i)
      row[block * 32 + i] = magnitude * normal(rng);
  }
  return row;
}

} // namespace

TEST_CASE("activation scale: DeepSeek V4 recipe by brute force", "[quantize]") {
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<double> octave(-40.0, 40.0);
  for (int i = 0; i < 20000; ++i) {
    double amax = std::pow(2.0, octave(rng));
    if (i % 7 == 0) // exact boundaries: 448 * 2^k
      amax = std::ldexp(448.0, static_cast<int>(octave(rng)));
    double floored = std::max(amax, static_cast<double>(1e-4f));
    int expected = std::clamp(smallestCoveringExponent(floored, 448.0) + 127, 1, 254);
    REQUIRE(activationScaleCode(amax) == expected);
  }
  CHECK(activationScaleCode(448.0) == 127);
  CHECK(activationScaleCode(std::nextafter(448.0, 1e9)) == 128);
  CHECK(activationScaleCode(0.0) == 127 - 22); // 1e-4 / 448 -> 2^-22
  CHECK(activationScaleCode(std::numeric_limits<double>::infinity()) == 0xFF);
}

TEST_CASE("MXFP4 scale: RoundUp ceil_pow2(amax / 6) by brute force", "[quantize]") {
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<double> octave(-60.0, 60.0);
  for (int i = 0; i < 20000; ++i) {
    double amax = std::pow(2.0, octave(rng));
    if (i % 7 == 0)
      amax = std::ldexp(6.0, static_cast<int>(octave(rng)));
    int expected = std::clamp(smallestCoveringExponent(amax, 6.0) + 127, 0, 254);
    REQUIRE(weightScaleCode(amax) == expected);
  }
  CHECK(weightScaleCode(6.0) == 127);
  CHECK(weightScaleCode(6.5) == 128);
  CHECK(weightScaleCode(0.0) == 0);
}

TEST_CASE("FP8 1x32 quantisation: nearest codes, bounds, never saturates",
          "[quantize]") {
  std::mt19937_64 rng(23);
  const int64_t k = 256;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> row = spreadRow(rng, k);
    std::vector<uint8_t> codes(k), scales(k / 32);
    quantizeFp8Row(row.data(), k, codes.data(), scales.data());
    std::vector<double> back(k);
    dequantizeFp8Row(codes.data(), scales.data(), k, back.data());
    for (int64_t block = 0; block < k / 32; ++block) {
      double amax = 0;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(row[block * 32 + i]));
      double scale = std::ldexp(1.0, scales[block] - 127);
      REQUIRE(scales[block] >= 1);
      REQUIRE(scales[block] <= 254);
      REQUIRE(amax / scale <= 448.0);
      if (amax >= 1e-4) // minimal: half the scale would overflow 448
        REQUIRE(amax / scale > 224.0);
      for (int i = 0; i < 32; ++i) {
        int64_t index = block * 32 + i;
        double x = row[index];
        REQUIRE((codes[index] & 0x7F) != 0x7F);
        REQUIRE(back[index] == decodeFp8E4M3(codes[index]) * scale);
        // Half an ulp: 2^-4 relative for normals, 2^-10 * scale below.
        double bound = std::max(std::fabs(x) * 0x1p-4, scale * 0x1p-10);
        REQUIRE(std::fabs(back[index] - x) <= bound);
        // No other FP8 value is closer to x / scale.
        double target = x / scale;
        double distance = std::fabs(decodeFp8E4M3(codes[index]) - target);
        for (int code = 0; code < 256; ++code) {
          double value = decodeFp8E4M3(code);
          if (!std::isnan(value))
            REQUIRE(std::fabs(value - target) >= distance);
        }
      }
    }
  }
}

namespace {

/// One spreadRow of `k` values through an MXFP4 quantiser and back.
struct Mxfp4Trial {
  std::vector<double> row, back;
  std::vector<uint8_t> packed, scales;
};

template <typename Quantize>
Mxfp4Trial mxfp4Trial(std::mt19937_64 &rng, int64_t k, Quantize quantize) {
  Mxfp4Trial t{spreadRow(rng, k), std::vector<double>(size_t(k)),
               std::vector<uint8_t>(size_t(k / 2)),
               std::vector<uint8_t>(size_t(k / 32))};
  quantize(t.row.data(), k, t.packed.data(), t.scales.data());
  dequantizeMxfp4Row(t.packed.data(), t.scales.data(), k, t.back.data());
  return t;
}

} // namespace

TEST_CASE("MXFP4 quantisation: nearest codes, bounds, packing", "[quantize]") {
  std::mt19937_64 rng(24);
  const int64_t k = 128;
  for (int trial = 0; trial < 300; ++trial) {
    const Mxfp4Trial t = mxfp4Trial(rng, k, quantizeMxfp4Row);
    const auto &[row, back, packed, scales] = t;
    for (int64_t block = 0; block < k / 32; ++block) {
      double amax = 0;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(row[block * 32 + i]));
      double scale = std::ldexp(1.0, scales[block] - 127);
      REQUIRE(amax / scale <= 6.0);
      if (amax > 0)
        REQUIRE(amax / scale > 3.0);
      for (int i = 0; i < 32; ++i) {
        int64_t index = block * 32 + i;
        double target = row[index] / scale;
        uint8_t code = unpackE2M1(packed.data(), index);
        REQUIRE(back[index] == decodeE2M1(code) * scale);
        // Half the E2M1 spacing at this magnitude.
        double magnitude = std::fabs(target);
        double halfSpacing = magnitude <= 2 ? 0.25 : magnitude <= 4 ? 0.5 : 1.0;
        REQUIRE(std::fabs(decodeE2M1(code) - target) <= halfSpacing);
        double distance = std::fabs(decodeE2M1(code) - target);
        for (int other = 0; other < 16; ++other)
          REQUIRE(std::fabs(decodeE2M1(other) - target) >= distance);
      }
    }
  }
}

TEST_CASE("MXFP4 quantisation: literal layout of one block", "[quantize]") {
  // amax 6 -> scale 2^0; element 0 = 0.5 (code 1), element 1 = 6 (code 7),
  // element 2 = -1 (code 0xA), element 3 = 2.5 -> tie -> 2 (code 4).
  std::vector<double> row(32, 0.0);
  row[0] = 0.5;
  row[1] = 6.0;
  row[2] = -1.0;
  row[3] = 2.5;
  std::vector<uint8_t> packed(16), scales(1);
  quantizeMxfp4Row(row.data(), 32, packed.data(), scales.data());
  CHECK(scales[0] == 127);
  CHECK(packed[0] == 0x71);
  CHECK(packed[1] == 0x4A);
  CHECK(packed[2] == 0x00);
}

TEST_CASE("quantisers mark non-finite blocks through the scale", "[quantize]") {
  std::vector<double> row(64, 1.0);
  row[5] = std::numeric_limits<double>::quiet_NaN();
  row[40] = std::numeric_limits<double>::infinity();
  std::vector<uint8_t> codes(64), scales(2), packed(32), weightScales(2);
  quantizeFp8Row(row.data(), 64, codes.data(), scales.data());
  CHECK(scales[0] == 0xFF);
  CHECK(scales[1] == 0xFF);
  std::vector<double> back(64);
  dequantizeFp8Row(codes.data(), scales.data(), 64, back.data());
  CHECK(std::isnan(back[0]));
  row[40] = 1.0;
  quantizeMxfp4Row(row.data(), 64, packed.data(), weightScales.data());
  CHECK(weightScales[0] == 0xFF);
  CHECK(weightScales[1] == 127 - 2); // amax 1 -> ceil_pow2(1/6) = 2^-2
  dequantizeMxfp4Row(packed.data(), weightScales.data(), 64, back.data());
  CHECK(std::isnan(back[3]));
  CHECK(back[40] == 1.0);
}

namespace {

/// AITER's `_mxfp4_quant_op` scale, restated from its FP32 bit operations:
/// add 0x200000 to the bits of amax, keep sign and exponent, take
/// floor(log2) - 2 clamped to [-127, 127], bias 127.
int aiterFp4ScaleCode(float amax) {
  uint32_t bits;
  std::memcpy(&bits, &amax, 4);
  bits = (bits + 0x200000u) & 0xFF800000u;
  if ((bits & 0x7F800000u) == 0) // +0 (or a subnormal that stayed one)
    return 0;
  if ((bits & 0x7F800000u) == 0x7F800000u) // rounded to infinity: log2 = inf
    return 254;
  const int unbiased = int((bits >> 23) & 0xFF) - 127; // floor(log2)
  return std::clamp(unbiased - 2, -127, 127) + 127;
}

} // namespace

TEST_CASE("MXFP4 activation scale: AITER's rule, hand-checked values",
          "[quantize]") {
  // amax 6: floor(log2 6) = 2, 6 < 1.75 * 4, so scale 2^0.
  CHECK(activationFp4ScaleCode(6.0) == 127);
  // amax 7 = 1.75 * 4 rounds up to 8: scale 2^1 (OCP's floor rule alone
  // would keep 2^0 and saturate 7 to 6).
  CHECK(activationFp4ScaleCode(7.0) == 128);
  CHECK(activationFp4ScaleCode(6.999) == 127);
  // amax 1: scale 2^-2, amax / scale = 4.
  CHECK(activationFp4ScaleCode(1.0) == 125);
  CHECK(activationFp4ScaleCode(0.0) == 0);
  CHECK(activationFp4ScaleCode(0x1p-140) == 0);   // clamped at 2^-127
  CHECK(activationFp4ScaleCode(0x1p+200) == 254); // clamped at 2^127
  // 1.75 * 2^127 rounds to infinity in AITER's FP32 bits: the largest scale.
  CHECK(activationFp4ScaleCode(0x1.cp+127) == 254);
  CHECK(activationFp4ScaleCode(0x1.8p+127) == 252);
  CHECK(activationFp4ScaleCode(std::numeric_limits<double>::infinity()) == 0xFF);
  CHECK(activationFp4ScaleCode(std::numeric_limits<double>::quiet_NaN()) == 0xFF);
}

TEST_CASE("MXFP4 activation scale equals AITER's bit operations on floats",
          "[quantize]") {
  std::mt19937_64 rng(31);
  std::uniform_int_distribution<uint32_t> finiteBits(0, 0x7F7FFFFFu);
  for (int trial = 0; trial < 200000; ++trial) {
    const uint32_t bits = finiteBits(rng);
    float amax;
    std::memcpy(&amax, &bits, 4);
    INFO("amax bits " << bits);
    REQUIRE(activationFp4ScaleCode(amax) == aiterFp4ScaleCode(amax));
  }
  // Every exponent at the significands around the 1.75 boundary.
  for (int e = -149; e <= 127; ++e)
    for (double m : {1.0, 1.5, 1.75 - 0x1p-23, 1.75, 1.999})
      if (float amax = float(std::ldexp(m, e)); std::isfinite(amax) && amax > 0)
        REQUIRE(activationFp4ScaleCode(amax) == aiterFp4ScaleCode(amax));
}

TEST_CASE("MXFP4 activation quantisation: literal block, RNE and saturation",
          "[quantize]") {
  // amax 13: floor(log2 13) = 3 and 13 < 1.75 * 8, so scale 2^(3-2) = 2.
  // 13 / 2 = 6.5 saturates to 6 (7); -7 / 2 = -3.5 ties to even 4 (0xE);
  // 1 / 2 = 0.5 (1); 2.5 / 2 = 1.25 ties to 1 (2); 0.3 / 2 -> 0 (0);
  // -0.75 / 2 = -0.375 -> -0.5 (9).
  std::vector<double> row(32, 0.0);
  const double values[6] = {13.0, -7.0, 1.0, 2.5, 0.3, -0.75};
  std::copy(values, values + 6, row.begin());
  std::vector<uint8_t> packed(16), scales(1);
  quantizeFp4ActivationRow(row.data(), 32, packed.data(), scales.data());
  CHECK(scales[0] == 128);
  CHECK(packed[0] == 0xE7);
  CHECK(packed[1] == 0x21);
  CHECK(packed[2] == 0x90);
  for (int i = 3; i < 16; ++i)
    CHECK(packed[size_t(i)] == 0);
  // amax 14 = 1.75 * 8 sets the next scale, 4: 14 / 4 = 3.5 ties to 4.
  row[0] = 14.0;
  quantizeFp4ActivationRow(row.data(), 32, packed.data(), scales.data());
  CHECK(scales[0] == 129);
  CHECK((packed[0] & 0xF) == 0x6);
}

TEST_CASE("MXFP4 activation quantisation: nearest codes within [3.5, 7)",
          "[quantize]") {
  std::mt19937_64 rng(25);
  const int64_t k = 128;
  for (int trial = 0; trial < 300; ++trial) {
    const Mxfp4Trial t = mxfp4Trial(rng, k, quantizeFp4ActivationRow);
    const auto &[row, back, packed, scales] = t;
    for (int64_t block = 0; block < k / 32; ++block) {
      double amax = 0;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(row[block * 32 + i]));
      const double scale = std::ldexp(1.0, scales[block] - 127);
      if (amax > 0 && scales[block] > 0) {
        REQUIRE(amax / scale >= 3.5);
        REQUIRE(amax / scale < 7.0);
      }
      for (int i = 0; i < 32; ++i) {
        const int64_t index = block * 32 + i;
        const double target = std::min(std::fabs(row[index]) / scale, 6.0);
        const uint8_t code = unpackE2M1(packed.data(), index);
        REQUIRE(back[index] == decodeE2M1(code) * scale);
        const double distance = std::fabs(std::fabs(decodeE2M1(code)) - target);
        for (int other = 0; other < 8; ++other)
          REQUIRE(std::fabs(decodeE2M1(uint8_t(other)) - target) >= distance);
      }
    }
  }
}
