// Shared fixtures of the oracle tests: a small layer with dense device-layout
// weights plus the naive formulation's dequantised copy, and comparisons.
#ifndef MOEC_TEST_REFERENCE_TEST_DATA_H
#define MOEC_TEST_REFERENCE_TEST_DATA_H

#include "NaiveOracle.h"

#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>

namespace testdata {

using namespace moec::ref;

/// Dense MXFP4 W13/W2 generated from a seed, with a DenseWeights view and a
/// naive dequantised copy. scaleOffset raises the weight scales (2^offset) to
/// push activations into the SwiGLU clamp.
struct DenseLayer {
  MoeShape shape;
  GluConfig glu;
  std::vector<uint8_t> w13Packed, w13Scales, w2Packed, w2Scales;
  std::unique_ptr<DenseWeights> w13, w2;
  naive::Layer naiveLayer;

  DenseLayer(const MoeShape &layerShape, const GluConfig &gluConfig,
             uint64_t seed, int scaleOffset = 0)
      : shape(layerShape), glu(gluConfig) {
    GeneratedMxfp4Weights g13(seed, 13, shape.experts, 2 * shape.intermediate,
                              shape.hidden,
                              defaultScaleExponent(shape.hidden) + scaleOffset);
    GeneratedMxfp4Weights g2(seed, 2, shape.experts, shape.hidden,
                             shape.intermediate,
                             defaultScaleExponent(shape.intermediate) + scaleOffset);
    materializeWeights(g13, w13Packed, w13Scales);
    materializeWeights(g2, w2Packed, w2Scales);
    w13 = std::make_unique<DenseWeights>(WeightFormat::Mxfp4, w13Packed.data(),
                                         w13Scales.data(), shape.experts,
                                         2 * shape.intermediate, shape.hidden);
    w2 = std::make_unique<DenseWeights>(WeightFormat::Mxfp4, w2Packed.data(),
                                        w2Scales.data(), shape.experts,
                                        shape.hidden, shape.intermediate);
    naiveLayer.hidden = shape.hidden;
    naiveLayer.intermediate = shape.intermediate;
    naiveLayer.interleave = glu.interleave;
    naiveLayer.clampLimit = glu.clampLimit;
    for (int64_t e = 0; e < shape.experts; ++e) {
      naiveLayer.w13.push_back(naive::fromMxfp4(w13Packed, w13Scales, e,
                                                2 * shape.intermediate, shape.hidden));
      naiveLayer.w2.push_back(naive::fromMxfp4(w2Packed, w2Scales, e,
                                               shape.hidden, shape.intermediate));
    }
  }
};

/// One generated batch per EP rank, rank r from stream r of `seed`.
inline std::vector<TokenBatch> rankBatches(const MoeShape &shape, int64_t ep,
                                           const std::vector<int64_t> &tokens,
                                           const RoutingOptions &routing,
                                           uint64_t seed) {
  std::vector<TokenBatch> ranks;
  for (int64_t rank = 0; rank < ep; ++rank)
    ranks.push_back(generateBatch(seed, uint64_t(rank), tokens[size_t(rank)],
                                  shape, routing));
  return ranks;
}

inline uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

/// Oracle outputs against the naive double result. Tolerance: the oracle
/// rounds its double sum once to FP32 (2^-24 relative) and sums K blocks in
/// a different order than the naive single loop (double rounding, ~1e-16
/// relative of the terms), so |oracle - naive| <= 2^-23 |naive| + 1e-9 rms.
/// BF16 outputs must be the naive value rounded to BF16 except where the
/// naive value sits within that tolerance of a BF16 rounding boundary
/// (counted, and required to be rare).
inline void compareWithNaive(const std::vector<float> &output,
                             const std::vector<uint16_t> &outputBf16,
                             const std::vector<double> &expected) {
  REQUIRE(output.size() == expected.size());
  REQUIRE(outputBf16.size() == expected.size());
  double sumSquares = 0;
  for (double value : expected)
    sumSquares += value * value;
  double rms = expected.empty() ? 0.0 : std::sqrt(sumSquares / expected.size());
  size_t bf16Mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    double tolerance = 0x1p-23 * std::fabs(expected[i]) + 1e-9 * rms;
    INFO("element " << i << " oracle " << output[i] << " naive " << expected[i]);
    REQUIRE(std::fabs(output[i] - expected[i]) <= tolerance);
    if (outputBf16[i] != encodeBf16(expected[i])) {
      ++bf16Mismatches;
      REQUIRE(std::fabs(decodeBf16(outputBf16[i]) - expected[i]) <=
              0x1p-8 * std::fabs(expected[i]) + tolerance);
    }
  }
  CHECK(bf16Mismatches <= expected.size() / 1000);
}

} // namespace testdata

#endif
