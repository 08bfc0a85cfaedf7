//===- Formats.h - bit-exact E2M1, E4M3FN, E8M0 and BF16 --------*- C++ -*-===//
//
// Conversions between double and the narrow formats the gfx950 MoE kernels
// read and write. Every encoder rounds the exact real value of its double
// argument once (round to nearest, ties to even), so encode(decode(c)) == c
// for every non-NaN code. Bit layouts and the rules for NaN, infinity and
// overflow are tabulated in docs/numerics.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_FORMATS_H
#define MOEC_REFERENCE_FORMATS_H

#include <cstdint>

namespace moec::ref {

//===----------------------------------------------------------------------===//
// E2M1 (FP4): S.EE.M, exponent bias 1, values 0 .5 1 1.5 2 3 4 6. No NaN/Inf.
//===----------------------------------------------------------------------===//

/// Largest finite E2M1 magnitude.
constexpr double kE2M1Max = 6.0;

/// Value of the E2M1 code in the low 4 bits of `code` (high bits ignored).
/// Codes 0x0 and 0x8 are +0 and -0.
double decodeE2M1(uint8_t code);

/// Nearest E2M1 code to `value`, ties to even mantissa. Magnitudes above 6
/// (including infinity) saturate to +-6; the sign of zero is kept; NaN, which
/// E2M1 cannot represent, encodes as +0 (the MX quantiser marks a block that
/// holds NaN through its scale instead, see Quantize.h).
uint8_t encodeE2M1(double value);

/// Two E2M1 codes in one byte as the kernels store them: element 2j in the
/// low nibble, element 2j+1 in the high nibble.
inline uint8_t packE2M1Pair(uint8_t evenElement, uint8_t oddElement) {
  return static_cast<uint8_t>((evenElement & 0xF) | ((oddElement & 0xF) << 4));
}

/// E2M1 code of element `index` of a packed row (low nibble = even index).
inline uint8_t unpackE2M1(const uint8_t *packed, int64_t index) {
  return static_cast<uint8_t>((packed[index >> 1] >> ((index & 1) * 4)) & 0xF);
}

//===----------------------------------------------------------------------===//
// FP8 E4M3FN (OCP): S.EEEE.MMM, bias 7, max 448, NaN S.1111.111, no infinity.
//===----------------------------------------------------------------------===//

/// Largest finite E4M3FN magnitude.
constexpr double kE4M3Max = 448.0;

/// Value of an E4M3FN code; 0x7F and 0xFF decode to NaN.
double decodeFp8E4M3(uint8_t code);

/// What an encoder does with magnitudes that round above the format maximum.
enum class Overflow {
  /// Clamp to +-max; infinity too (gfx950 conversions with clamp, and the
  /// "satfinite" mode of the OCP spec).
  Saturate,
  /// Produce NaN (S.1111.111); infinity too (OCP non-saturating mode, PyTorch
  /// float8_e4m3fn casts).
  ToNaN,
};

/// Nearest E4M3FN code to `value`, ties to even mantissa; NaN encodes as
/// S.1111.111 with the sign of the input. With Overflow::ToNaN, values whose
/// magnitude is above 464 (the midpoint between 448 and the non-existent 480)
/// become NaN; 464 itself rounds to even, i.e. to 448.
uint8_t encodeFp8E4M3(double value, Overflow overflow = Overflow::Saturate);

//===----------------------------------------------------------------------===//
// E8M0 (MX scale): 8-bit biased exponent, bias 127, 2^-127 .. 2^127, 0xFF NaN.
//===----------------------------------------------------------------------===//

/// 2^(code - 127); 0xFF decodes to NaN. There is no zero and no sign.
double decodeE8M0(uint8_t code);

/// How an arbitrary positive value is rounded to a power of two.
enum class ScaleRounding {
  /// Smallest power of two >= value (the MX "RoundUp" of the kernels).
  Up,
  /// Largest power of two <= value (OCP MX spec's floor rule).
  Down,
  /// Nearest in linear distance; the midpoint 1.5 * 2^e goes to the even code.
  NearestEven,
};

/// E8M0 code for a finite value > 0 after `rounding`, clamped to codes
/// [0, 254] (2^-127 .. 2^127). Zero, negative, infinite and NaN values give
/// 0xFF (NaN): E8M0 has no zero, sign or infinity.
uint8_t encodeE8M0(double value, ScaleRounding rounding);

/// Exponent e of the smallest power of two with maxValue * 2^e >= magnitude,
/// computed exactly (no division or logarithm), for finite magnitude > 0 and
/// maxValue > 0. This is ceil(log2(magnitude / maxValue)) in real arithmetic.
int ceilLog2Ratio(double magnitude, double maxValue);

//===----------------------------------------------------------------------===//
// BF16: the upper 16 bits of an IEEE binary32.
//===----------------------------------------------------------------------===//

/// Value of BF16 bits (exact in float and double).
float decodeBf16(uint16_t bits);

/// BF16 bits nearest to `value` (rounded once from the exact double, ties to
/// even); overflow gives infinity as in IEEE; NaN gives a quiet NaN with the
/// input's sign (0x7FC0 / 0xFFC0).
uint16_t encodeBf16(double value);

/// Float nearest to `value` (ties to even), the same single rounding as a
/// C++ double-to-float conversion under the default rounding mode.
inline float roundToFloat(double value) { return static_cast<float>(value); }

} // namespace moec::ref

#endif // MOEC_REFERENCE_FORMATS_H
