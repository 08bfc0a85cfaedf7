//===- Quantize.cpp - per-1x32 FP8 and MXFP4 block quantisers -------------===//

#include "moec/reference/Quantize.h"
#include "moec/reference/Formats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moec::ref {
namespace {

/// Largest magnitude of a block; infinity if the block holds NaN or infinity.
double blockAmax(const double *values) {
  double amax = 0.0;
  for (int64_t i = 0; i < kBlockSize; ++i) {
    double magnitude = std::fabs(values[i]);
    if (!std::isfinite(magnitude))
      return std::numeric_limits<double>::infinity();
    amax = std::max(amax, magnitude);
  }
  return amax;
}

} // namespace

uint8_t activationScaleCode(double amax) {
  if (!std::isfinite(amax))
    return 0xFF;
  int exponent = ceilLog2Ratio(std::max(amax, kActivationAmaxFloor), kE4M3Max);
  return static_cast<uint8_t>(std::clamp(exponent + 127, 1, 254));
}

void quantizeFp8Row(const double *values, int64_t k, uint8_t *codes,
                    uint8_t *scales) {
  for (int64_t block = 0; block < k / kBlockSize; ++block) {
    const double *blockValues = values + block * kBlockSize;
    uint8_t *blockCodes = codes + block * kBlockSize;
    uint8_t scaleCode = activationScaleCode(blockAmax(blockValues));
    scales[block] = scaleCode;
    if (scaleCode == 0xFF) {
      for (int64_t i = 0; i < kBlockSize; ++i)
        blockCodes[i] = 0x7F;
      continue;
    }
    int exponent = static_cast<int>(scaleCode) - 127;
    for (int64_t i = 0; i < kBlockSize; ++i)
      blockCodes[i] =
          encodeFp8E4M3(std::ldexp(blockValues[i], -exponent), Overflow::Saturate);
  }
}

void dequantizeFp8Row(const uint8_t *codes, const uint8_t *scales, int64_t k,
                      double *values) {
  for (int64_t block = 0; block < k / kBlockSize; ++block) {
    double scale = decodeE8M0(scales[block]);
    for (int64_t i = 0; i < kBlockSize; ++i) {
      int64_t index = block * kBlockSize + i;
      values[index] = decodeFp8E4M3(codes[index]) * scale;
    }
  }
}

uint8_t weightScaleCode(double amax) {
  if (!std::isfinite(amax))
    return 0xFF;
  if (amax == 0.0)
    return 0;
  int exponent = ceilLog2Ratio(amax, kE2M1Max);
  return static_cast<uint8_t>(std::clamp(exponent + 127, 0, 254));
}

/// MXFP4 blocks of one row with the scale code `scaleOf(amax)`.
template <typename ScaleOf>
static void quantizeE2M1Blocks(const double *values, int64_t k, uint8_t *packed,
                        uint8_t *scales, ScaleOf scaleOf) {
  for (int64_t block = 0; block < k / kBlockSize; ++block) {
    const double *blockValues = values + block * kBlockSize;
    uint8_t *blockPacked = packed + block * kBlockSize / 2;
    uint8_t scaleCode = scaleOf(blockAmax(blockValues));
    scales[block] = scaleCode;
    int exponent = static_cast<int>(scaleCode) - 127;
    for (int64_t i = 0; i < kBlockSize; i += 2) {
      uint8_t even = 0, odd = 0;
      if (scaleCode != 0xFF) {
        even = encodeE2M1(std::ldexp(blockValues[i], -exponent));
        odd = encodeE2M1(std::ldexp(blockValues[i + 1], -exponent));
      }
      blockPacked[i / 2] = packE2M1Pair(even, odd);
    }
  }
}

void quantizeMxfp4Row(const double *values, int64_t k, uint8_t *packed,
                      uint8_t *scales) {
  quantizeE2M1Blocks(values, k, packed, scales, weightScaleCode);
}

void dequantizeMxfp4Row(const uint8_t *packed, const uint8_t *scales,
                        int64_t k, double *values) {
  for (int64_t index = 0; index < k; ++index)
    values[index] =
        decodeE2M1(unpackE2M1(packed, index)) * decodeE8M0(scales[index / kBlockSize]);
}

uint8_t activationFp4ScaleCode(double amax) {
  if (!std::isfinite(amax))
    return 0xFF;
  if (amax == 0.0)
    return 0;
  int exponent = std::ilogb(amax); // floor(log2(amax)), exact
  // AITER's +0x200000 on the FP32 bits carries into the exponent exactly
  // when the significand is >= 1.75 (and, for FP32 subnormals, only where
  // the clamp below gives code 0 anyway).
  if (amax >= std::ldexp(1.75, exponent))
    ++exponent;
  // Rounded past FP32's range, AITER's amax is infinity, its log2 too, and
  // the clamp gives the largest scale.
  if (exponent > 127)
    return 254;
  return static_cast<uint8_t>(std::clamp(exponent - 2 + 127, 0, 254));
}

void quantizeFp4ActivationRow(const double *values, int64_t k, uint8_t *packed,
                              uint8_t *scales) {
  quantizeE2M1Blocks(values, k, packed, scales, activationFp4ScaleCode);
}

void quantizeActivationRow(ActivationFormat format, const double *values,
                           int64_t k, uint8_t *codes, uint8_t *scales) {
  if (format == ActivationFormat::Bf16) {
    for (int64_t i = 0; i < k; ++i) {
      const uint16_t bits = encodeBf16(values[i]);
      codes[2 * i] = static_cast<uint8_t>(bits & 0xFF);
      codes[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
    }
  } else if (format == ActivationFormat::Mxfp4)
    quantizeFp4ActivationRow(values, k, codes, scales);
  else
    quantizeFp8Row(values, k, codes, scales);
}

} // namespace moec::ref
