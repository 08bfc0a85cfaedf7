// Exhaustive and boundary tests of the narrow formats. Expected values come
// from independent definitions written here (field formulas, brute-force
// nearest-value search), never from the encoders under test.

#include "moec/reference/Formats.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace moec::ref;

namespace {

const double kE2M1Magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

/// E4M3FN value from its fields, written from the OCP table.
double e4m3FromFields(int code) {
  int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 7;
  double magnitude = exponent == 0
                         ? mantissa / 8.0 * std::pow(2.0, -6)
                         : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/// Brute-force nearest code among `codes` (same sign as x), ties to the code
/// with an even lowest bit; returns -1 if none.
template <typename Decode>
int bruteNearest(double x, const std::vector<int> &codes, Decode decode) {
  int best = -1;
  double bestDistance = std::numeric_limits<double>::infinity();
  for (int code : codes) {
    double value = decode(code);
    if (std::isnan(value) || std::signbit(value) != std::signbit(x))
      continue;
    double distance = std::fabs(value - x);
    if (distance < bestDistance ||
        (distance == bestDistance && (code & 1) == 0 && (best & 1) == 1)) {
      best = code;
      bestDistance = distance;
    }
  }
  return best;
}

std::vector<int> allCodes(int count) {
  std::vector<int> codes(count);
  for (int i = 0; i < count; ++i)
    codes[i] = i;
  return codes;
}

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

} // namespace

TEST_CASE("E2M1: all 16 codes decode, round-trip and order", "[formats]") {
  for (int code = 0; code < 16; ++code) {
    double expected = (code & 8 ? -1 : 1) * kE2M1Magnitudes[code & 7];
    double value = decodeE2M1(static_cast<uint8_t>(code));
    CHECK(value == expected);
    CHECK(std::signbit(value) == bool(code & 8));
    CHECK(encodeE2M1(value) == code);
    CHECK(decodeE2M1(static_cast<uint8_t>(code | 0xF0)) == expected);
  }
  for (int code = 0; code < 7; ++code) {
    CHECK(decodeE2M1(code) < decodeE2M1(code + 1));
    CHECK(decodeE2M1(8 + code) > decodeE2M1(8 + code + 1));
  }
}

TEST_CASE("E2M1: midpoints round to even, saturation, NaN", "[formats]") {
  // Midpoints between neighbours: the even-mantissa neighbour wins.
  CHECK(encodeE2M1(0.25) == 0x0);  // 0 (even) vs 0.5
  CHECK(encodeE2M1(0.75) == 0x2);  // 0.5 vs 1 (even)
  CHECK(encodeE2M1(1.25) == 0x2);  // 1 (even) vs 1.5
  CHECK(encodeE2M1(1.75) == 0x4);  // 1.5 vs 2 (even)
  CHECK(encodeE2M1(2.5) == 0x4);   // 2 (even) vs 3
  CHECK(encodeE2M1(3.5) == 0x6);   // 3 vs 4 (even)
  CHECK(encodeE2M1(5.0) == 0x6);   // 4 (even) vs 6
  CHECK(encodeE2M1(-5.0) == 0xE);
  CHECK(encodeE2M1(std::nextafter(5.0, 9.0)) == 0x7);
  CHECK(encodeE2M1(std::nextafter(0.25, 1.0)) == 0x1);
  CHECK(encodeE2M1(6.5) == 0x7);
  CHECK(encodeE2M1(1e30) == 0x7);
  CHECK(encodeE2M1(-std::numeric_limits<double>::infinity()) == 0xF);
  CHECK(encodeE2M1(-0.0) == 0x8);
  CHECK(encodeE2M1(-0.1) == 0x8);
  CHECK(encodeE2M1(std::numeric_limits<double>::quiet_NaN()) == 0x0);
}

TEST_CASE("E2M1: encoder agrees with brute-force nearest search", "[formats]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> uniform(-7.0, 7.0);
  std::vector<int> codes = allCodes(16);
  for (int i = 0; i < 20000; ++i) {
    double x = i < 16 ? decodeE2M1(i) + 0.25 : uniform(rng);
    double clipped = std::clamp(x, -6.0, 6.0);
    int expected = bruteNearest(clipped, codes, [](int c) { return decodeE2M1(c); });
    REQUIRE(encodeE2M1(x) == expected);
  }
}

TEST_CASE("E4M3FN: all 256 codes decode, round-trip, order and NaN", "[formats]") {
  int nanCount = 0;
  for (int code = 0; code < 256; ++code) {
    double value = decodeFp8E4M3(static_cast<uint8_t>(code));
    if ((code & 0x7F) == 0x7F) {
      CHECK(std::isnan(value));
      ++nanCount;
      continue;
    }
    CHECK(value == e4m3FromFields(code));
    CHECK(encodeFp8E4M3(value) == code);
    CHECK(encodeFp8E4M3(value, Overflow::ToNaN) == code);
  }
  CHECK(nanCount == 2);
  for (int code = 0; code < 0x7E; ++code) {
    CHECK(decodeFp8E4M3(code) < decodeFp8E4M3(code + 1));
    CHECK(decodeFp8E4M3(0x80 | code) > decodeFp8E4M3(0x80 | (code + 1)));
  }
  CHECK(decodeFp8E4M3(0x7E) == 448.0);
  CHECK(decodeFp8E4M3(0x01) == std::ldexp(1.0, -9));
  CHECK(decodeFp8E4M3(0x08) == std::ldexp(1.0, -6));
  CHECK(decodeFp8E4M3(0x38) == 1.0);
}

TEST_CASE("E4M3FN: midpoints round to even, saturation and NaN rules", "[formats]") {
  // Every midpoint between neighbouring finite codes goes to the even code;
  // a hair either side goes to the nearer neighbour.
  for (int code = 0; code < 0x7E; ++code) {
    double low = decodeFp8E4M3(code), high = decodeFp8E4M3(code + 1);
    double middle = (low + high) / 2;
    int even = (code & 1) == 0 ? code : code + 1;
    CHECK(encodeFp8E4M3(middle) == even);
    CHECK(encodeFp8E4M3(-middle) == (0x80 | even));
    CHECK(encodeFp8E4M3(std::nextafter(middle, 0.0)) == code);
    CHECK(encodeFp8E4M3(std::nextafter(middle, 1e9)) == code + 1);
  }
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(encodeFp8E4M3(449.0) == 0x7E);
  CHECK(encodeFp8E4M3(1e9) == 0x7E);
  CHECK(encodeFp8E4M3(-1e9) == 0xFE);
  CHECK(encodeFp8E4M3(inf) == 0x7E);
  CHECK(encodeFp8E4M3(464.0, Overflow::ToNaN) == 0x7E); // tie rounds to 448
  CHECK(encodeFp8E4M3(std::nextafter(464.0, 1e9), Overflow::ToNaN) == 0x7F);
  CHECK(encodeFp8E4M3(-500.0, Overflow::ToNaN) == 0xFF);
  CHECK(encodeFp8E4M3(inf, Overflow::ToNaN) == 0x7F);
  CHECK(encodeFp8E4M3(std::numeric_limits<double>::quiet_NaN()) == 0x7F);
  CHECK(encodeFp8E4M3(-std::numeric_limits<double>::quiet_NaN()) == 0xFF);
  CHECK(encodeFp8E4M3(-0.0) == 0x80);
  CHECK(encodeFp8E4M3(std::ldexp(1.0, -10)) == 0x00);  // tie: 0 is even
  CHECK(encodeFp8E4M3(std::ldexp(3.0, -11)) == 0x01);  // 0.75 quantum
  CHECK(encodeFp8E4M3(std::ldexp(1.0, -30)) == 0x00);
}

TEST_CASE("E4M3FN: encoder agrees with brute-force nearest search", "[formats]") {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> exponent(-12.0, 9.5);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<int> codes = allCodes(256);
  for (int i = 0; i < 50000; ++i) {
    double x = std::pow(2.0, exponent(rng)) * (sign(rng) ? -1 : 1);
    double clipped = std::clamp(x, -448.0, 448.0);
    int expected =
        bruteNearest(clipped, codes, [](int c) { return decodeFp8E4M3(c); });
    REQUIRE(encodeFp8E4M3(x) == expected);
  }
}

TEST_CASE("E8M0: all 256 codes decode, round-trip, order, NaN", "[formats]") {
  for (int code = 0; code < 255; ++code) {
    double value = decodeE8M0(static_cast<uint8_t>(code));
    CHECK(value == std::ldexp(1.0, code - 127));
    CHECK(encodeE8M0(value, ScaleRounding::Up) == code);
    CHECK(encodeE8M0(value, ScaleRounding::Down) == code);
    CHECK(encodeE8M0(value, ScaleRounding::NearestEven) == code);
    if (code > 0)
      CHECK(decodeE8M0(code - 1) < value);
  }
  CHECK(std::isnan(decodeE8M0(0xFF)));
  CHECK(decodeE8M0(127) == 1.0);
}

TEST_CASE("E8M0: rounding modes, clamping, specials", "[formats]") {
  for (int e = -20; e <= 20; ++e) {
    double base = std::ldexp(1.0, e);
    int code = e + 127;
    CHECK(encodeE8M0(std::nextafter(base, 1e300), ScaleRounding::Up) == code + 1);
    CHECK(encodeE8M0(std::nextafter(base, 1e300), ScaleRounding::Down) == code);
    CHECK(encodeE8M0(1.4 * base, ScaleRounding::NearestEven) == code);
    CHECK(encodeE8M0(1.6 * base, ScaleRounding::NearestEven) == code + 1);
    // The midpoint 1.5 * 2^e goes to whichever of code, code + 1 is even.
    CHECK(encodeE8M0(1.5 * base, ScaleRounding::NearestEven) ==
          (code % 2 == 0 ? code : code + 1));
    CHECK(encodeE8M0(1.999 * base, ScaleRounding::Down) == code);
  }
  CHECK(encodeE8M0(std::ldexp(1.0, -200), ScaleRounding::Up) == 0);
  CHECK(encodeE8M0(std::ldexp(1.0, 200), ScaleRounding::Down) == 254);
  CHECK(encodeE8M0(std::ldexp(1.5, 127), ScaleRounding::Up) == 254);
  CHECK(encodeE8M0(0.0, ScaleRounding::Up) == 0xFF);
  CHECK(encodeE8M0(-1.0, ScaleRounding::Up) == 0xFF);
  CHECK(encodeE8M0(std::numeric_limits<double>::infinity(), ScaleRounding::Up) == 0xFF);
  CHECK(encodeE8M0(std::numeric_limits<double>::quiet_NaN(), ScaleRounding::Up) == 0xFF);
}

TEST_CASE("ceilLog2Ratio is the smallest exponent that covers the value", "[formats]") {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> exponent(-40.0, 40.0);
  for (double maxValue : {448.0, 6.0, 1.0, 7.0}) {
    for (int i = 0; i < 5000; ++i) {
      double magnitude = std::pow(2.0, exponent(rng));
      if (i % 5 == 0) // exact powers of two times maxValue are boundaries
        magnitude = std::ldexp(maxValue, static_cast<int>(exponent(rng)));
      int k = ceilLog2Ratio(magnitude, maxValue);
      REQUIRE(std::ldexp(maxValue, k) >= magnitude);
      REQUIRE(std::ldexp(maxValue, k - 1) < magnitude);
    }
  }
}

TEST_CASE("BF16: all 65536 codes round-trip; NaN stays NaN", "[formats]") {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float value = decodeBf16(static_cast<uint16_t>(bits));
    REQUIRE(floatBits(value) == bits << 16);
    uint16_t back = encodeBf16(value);
    if (std::isnan(value)) {
      REQUIRE(std::isnan(decodeBf16(back)));
      REQUIRE((back & 0x8000) == (bits & 0x8000));
    } else {
      REQUIRE(back == bits);
    }
  }
}

TEST_CASE("BF16: float inputs match the integer RNE formula; one rounding from double",
          "[formats]") {
  std::mt19937_64 rng(14);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    float value;
    std::memcpy(&value, &bits, 4);
    if (std::isnan(value))
      continue;
    // Classic integer RNE on the float bits (overflow carries into inf).
    uint32_t rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
    REQUIRE(encodeBf16(value) == rounded);
  }
  // 1 + 2^-8 + 2^-40: float rounding first would land on the midpoint
  // 1 + 2^-8 and then tie to 1.0; one correct rounding gives 1 + 2^-7.
  CHECK(encodeBf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3F81);
  CHECK(encodeBf16(1.0 + std::ldexp(1.0, -8)) == 0x3F80);
  CHECK(encodeBf16(1e39) == 0x7F80);
  CHECK(encodeBf16(-std::numeric_limits<double>::infinity()) == 0xFF80);
  CHECK(encodeBf16(std::numeric_limits<double>::quiet_NaN()) == 0x7FC0);
}

TEST_CASE("E2M1 packing: even element in the low nibble", "[formats]") {
  CHECK(packE2M1Pair(0x1, 0x7) == 0x71);
  uint8_t packed[2] = {0x71, 0xC3};
  CHECK(unpackE2M1(packed, 0) == 0x1);
  CHECK(unpackE2M1(packed, 1) == 0x7);
  CHECK(unpackE2M1(packed, 2) == 0x3);
  CHECK(unpackE2M1(packed, 3) == 0xC);
}
