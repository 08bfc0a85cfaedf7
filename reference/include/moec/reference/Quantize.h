//===- Quantize.h - per-1x32 FP8 and MXFP4 block quantisers -----*- C++ -*-===//
//
// Block quantisers along K (the contraction dimension): 32 consecutive
// elements of a row share one E8M0 scale byte. Scales are stored row-major,
// [rows, K / 32], one byte per block; FP8 elements one byte each, [rows, K];
// MXFP4 elements two per byte, [rows, K / 2], element 2j in the low nibble.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_QUANTIZE_H
#define MOEC_REFERENCE_QUANTIZE_H

#include <cstdint>

namespace moec::ref {

/// Elements that share one E8M0 scale (OCP MX block size).
constexpr int64_t kBlockSize = 32;

/// Smallest block maximum the activation recipe uses (FP32 1e-4, as
/// DeepSeek V4 clamps amax in float32).
constexpr double kActivationAmaxFloor = static_cast<double>(1e-4f);

/// E8M0 scale code of one activation block, DeepSeek V4 recipe:
///   scale = 2^ceil(log2(max(amax, 1e-4) / 448)), biased exponent clamped to
///   [1, 254].
/// ceil(log2(.)) is evaluated exactly (see ceilLog2Ratio), so for every
/// finite amax the scaled block fits in [-448, 448]: it never saturates.
/// A non-finite amax (the block holds NaN or infinity) gives 0xFF.
uint8_t activationScaleCode(double amax);

/// Quantises one row of `k` values (k % 32 == 0) to FP8 E4M3FN with one
/// activation scale per 32 elements (recipe above): element = RNE(x / scale)
/// to E4M3FN. A block that holds NaN or infinity gets scale 0xFF and NaN
/// element codes, so it dequantises to NaN.
void quantizeFp8Row(const double *values, int64_t k, uint8_t *codes,
                    uint8_t *scales);

/// Exact dequantisation of an FP8 row: code value * 2^(scale - 127).
void dequantizeFp8Row(const uint8_t *codes, const uint8_t *scales, int64_t k,
                      double *values);

/// E8M0 scale code of one MXFP4 weight block, RoundUp recipe:
///   scale = ceil_pow2(amax / 6) = 2^ceil(log2(amax / 6)),
/// biased exponent clamped to [0, 254]; amax == 0 gives code 0 (2^-127, the
/// block is all zeros anyway); non-finite amax gives 0xFF.
uint8_t weightScaleCode(double amax);

/// Quantises one row of `k` values (k % 32 == 0) to MXFP4: scale per block by
/// the RoundUp recipe above, elements RNE(x / scale) to E2M1, saturating at 6
/// (which RoundUp never needs except when the scale is clamped at 2^127).
/// A block that holds NaN or infinity gets scale 0xFF and zero elements.
/// `packed` receives k / 2 bytes (element 2j in the low nibble).
void quantizeMxfp4Row(const double *values, int64_t k, uint8_t *packed,
                      uint8_t *scales);

/// Exact dequantisation of an MXFP4 row: E2M1 value * 2^(scale - 127).
void dequantizeMxfp4Row(const uint8_t *packed, const uint8_t *scales,
                        int64_t k, double *values);

/// E8M0 scale code of one MXFP4 activation block, AITER's rule (its Triton
/// `_mxfp4_quant_op`, the quantiser of AITER's A4W4 MoE inputs): the OCP MX
/// v1.0 shared exponent floor(log2(amax)) - 2 (2 = E2M1's largest exponent),
/// except that amax is first rounded up to the next power of two when its
/// significand is at least 1.75 (AITER adds 0x200000 to the FP32 bits and
/// truncates the mantissa), so amax / scale lies in [3.5, 7). The biased
/// exponent is clamped to [0, 254], and an amax that rounds up past FP32's
/// range (>= 1.75 * 2^127) gets 254 (AITER's log2 of infinity); amax == 0
/// gives code 0; non-finite amax gives 0xFF.
uint8_t activationFp4ScaleCode(double amax);

/// Quantises one row of `k` values (k % 32 == 0) to MXFP4 activations: scale
/// per block by activationFp4ScaleCode, elements RNE(x / scale) to E2M1,
/// saturating at 6 (scaled magnitudes in [6, 7) do). A block that holds NaN
/// or infinity gets scale 0xFF and zero elements. `packed` receives k / 2
/// bytes (element 2j in the low nibble).
void quantizeFp4ActivationRow(const double *values, int64_t k, uint8_t *packed,
                              uint8_t *scales);

/// Element format of quantised activations (the A operand of a GEMM stage):
/// the layer input after `moe.quant` and the intermediate between the GEMMs.
enum class ActivationFormat {
  /// FP8 E4M3FN, one byte per element, DeepSeek V4 scale recipe (A8W4).
  Fp8E4M3,
  /// MXFP4 (E2M1 pairs), AITER's scale rule (A4W4).
  Mxfp4,
  /// BF16 (A16W4): two bytes per element (little-endian bits), no scales.
  Bf16,
};

/// Bytes of one quantised row of `k` elements in `format`.
inline int64_t activationRowBytes(ActivationFormat format, int64_t k) {
  return format == ActivationFormat::Mxfp4  ? k / 2
         : format == ActivationFormat::Bf16 ? 2 * k
                                            : k;
}

/// quantizeFp8Row or quantizeFp4ActivationRow, by `format`; for Bf16 each
/// value rounded to BF16 (nearest even) and `scales` left untouched.
void quantizeActivationRow(ActivationFormat format, const double *values,
                           int64_t k, uint8_t *codes, uint8_t *scales);

} // namespace moec::ref

#endif // MOEC_REFERENCE_QUANTIZE_H
