//===- Formats.cpp - bit-exact narrow-format conversions ------------------===//

#include "moec/reference/Formats.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace moec::ref {
namespace {

/// A binary floating-point format with an implicit leading bit and
/// subnormals: `mantissaBits` stored fraction bits, `minNormalExponent` the
/// unbiased exponent of the smallest normal number.
struct BinaryFormat {
  int exponentBits;
  int mantissaBits;
  int bias;
};

int minNormalExponent(const BinaryFormat &format) { return 1 - format.bias; }

/// Rounds finite `magnitude` >= 0 to the format's precision (RNE), ignoring
/// the top of the exponent range; the result may exceed the format maximum.
double roundMagnitude(double magnitude, const BinaryFormat &format) {
  if (magnitude == 0.0)
    return 0.0;
  int binaryExponent;
  std::frexp(magnitude, &binaryExponent); // magnitude in [2^(q-1), 2^q)
  int exponent = binaryExponent - 1;
  if (exponent < minNormalExponent(format))
    exponent = minNormalExponent(format); // subnormal: fixed quantum
  double quantum = std::ldexp(1.0, exponent - format.mantissaBits);
  // Scaling by a power of two is exact, so `units` holds the exact quotient.
  double units = magnitude / quantum;
  double whole = std::floor(units);
  double fraction = units - whole;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(whole, 2.0) != 0.0))
    whole += 1.0;
  return whole * quantum;
}

/// Code bits (without sign) of a magnitude that is exactly representable.
uint32_t magnitudeBits(double magnitude, const BinaryFormat &format) {
  if (magnitude == 0.0)
    return 0;
  int binaryExponent;
  std::frexp(magnitude, &binaryExponent);
  int exponent = binaryExponent - 1;
  if (exponent < minNormalExponent(format)) {
    double quantum =
        std::ldexp(1.0, minNormalExponent(format) - format.mantissaBits);
    return static_cast<uint32_t>(magnitude / quantum);
  }
  double fraction = std::ldexp(magnitude, -exponent) - 1.0; // in [0, 1)
  uint32_t mantissa =
      static_cast<uint32_t>(std::ldexp(fraction, format.mantissaBits));
  uint32_t biased = static_cast<uint32_t>(exponent + format.bias);
  return (biased << format.mantissaBits) | mantissa;
}

/// Decodes sign/exponent/mantissa fields of a format without specials.
double decodeFields(uint32_t code, const BinaryFormat &format) {
  uint32_t mantissaMask = (1u << format.mantissaBits) - 1;
  uint32_t exponentMask = (1u << format.exponentBits) - 1;
  uint32_t mantissa = code & mantissaMask;
  uint32_t biased = (code >> format.mantissaBits) & exponentMask;
  bool negative = (code >> (format.mantissaBits + format.exponentBits)) & 1;
  double value;
  if (biased == 0)
    value = std::ldexp(static_cast<double>(mantissa),
                       minNormalExponent(format) - format.mantissaBits);
  else
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa),
                                        -format.mantissaBits),
                       static_cast<int>(biased) - format.bias);
  return negative ? -value : value;
}

constexpr BinaryFormat kE2M1{2, 1, 1};
constexpr BinaryFormat kE4M3{4, 3, 7};
constexpr BinaryFormat kBf16{8, 7, 127};

} // namespace

double decodeE2M1(uint8_t code) { return decodeFields(code & 0xF, kE2M1); }

uint8_t encodeE2M1(double value) {
  if (std::isnan(value))
    return 0;
  uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  double magnitude = std::fabs(value);
  double rounded =
      std::isinf(magnitude) ? kE2M1Max : roundMagnitude(magnitude, kE2M1);
  if (rounded > kE2M1Max)
    rounded = kE2M1Max;
  return static_cast<uint8_t>(sign | magnitudeBits(rounded, kE2M1));
}

double decodeFp8E4M3(uint8_t code) {
  if ((code & 0x7F) == 0x7F)
    return std::numeric_limits<double>::quiet_NaN();
  return decodeFields(code, kE4M3);
}

uint8_t encodeFp8E4M3(double value, Overflow overflow) {
  uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value))
    return static_cast<uint8_t>(sign | 0x7F);
  double magnitude = std::fabs(value);
  double rounded = std::isinf(magnitude) ? std::numeric_limits<double>::infinity()
                                         : roundMagnitude(magnitude, kE4M3);
  if (rounded > kE4M3Max) {
    if (overflow == Overflow::ToNaN)
      return static_cast<uint8_t>(sign | 0x7F);
    rounded = kE4M3Max;
  }
  return static_cast<uint8_t>(sign | magnitudeBits(rounded, kE4M3));
}

double decodeE8M0(uint8_t code) {
  if (code == 0xFF)
    return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(code) - 127);
}

uint8_t encodeE8M0(double value, ScaleRounding rounding) {
  if (!(value > 0.0) || std::isinf(value))
    return 0xFF;
  int binaryExponent;
  double fraction = std::frexp(value, &binaryExponent); // [0.5, 1)
  int exponent = binaryExponent - 1;                    // value = m * 2^exponent
  double mantissa = fraction * 2.0;                     // m in [1, 2)
  switch (rounding) {
  case ScaleRounding::Up:
    if (mantissa > 1.0)
      ++exponent;
    break;
  case ScaleRounding::Down:
    break;
  case ScaleRounding::NearestEven:
    if (mantissa > 1.5)
      ++exponent;
    else if (mantissa == 1.5 && ((exponent + 127) & 1))
      ++exponent; // tie: the odd code moves up to the even one
    break;
  }
  int biased = exponent + 127;
  if (biased < 0)
    biased = 0;
  if (biased > 254)
    biased = 254;
  return static_cast<uint8_t>(biased);
}

int ceilLog2Ratio(double magnitude, double maxValue) {
  int magnitudeExponent, maxExponent;
  std::frexp(magnitude, &magnitudeExponent);
  std::frexp(maxValue, &maxExponent);
  // Start one below the candidate and step: at most two or three iterations.
  int exponent = magnitudeExponent - maxExponent - 1;
  while (std::ldexp(maxValue, exponent) < magnitude)
    ++exponent;
  while (std::ldexp(maxValue, exponent - 1) >= magnitude)
    --exponent;
  return exponent;
}

float decodeBf16(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

uint16_t encodeBf16(double value) {
  uint16_t sign = std::signbit(value) ? 0x8000 : 0x0000;
  if (std::isnan(value))
    return static_cast<uint16_t>(sign | 0x7FC0);
  double magnitude = std::fabs(value);
  // Largest finite BF16 is (2 - 2^-7) * 2^127; rounding may reach 2^128,
  // which is IEEE overflow to infinity.
  if (std::isinf(magnitude))
    return static_cast<uint16_t>(sign | 0x7F80);
  double rounded = roundMagnitude(magnitude, kBf16);
  if (rounded >= std::ldexp(1.0, 128))
    return static_cast<uint16_t>(sign | 0x7F80);
  float asFloat = static_cast<float>(rounded); // exact: BF16 is a subset
  uint32_t word;
  std::memcpy(&word, &asFloat, sizeof(word));
  return static_cast<uint16_t>(sign | ((word >> 16) & 0x7FFF));
}

} // namespace moec::ref
