//===- Generate.h - seeded inputs, weights and routing ----------*- C++ -*-===//
//
// Deterministic test data at real and small shapes. Every value is a pure
// function of (seed, stream, index) through a counter-based generator, so an
// expert's weights are the same whether the whole tensor is materialised or
// only the experts a batch routes to (which is how the real Flash shape runs
// in seconds: 384 experts of [4608, 5120] are never all generated).
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_GENERATE_H
#define MOEC_REFERENCE_GENERATE_H

#include "moec/reference/Families.h"
#include "moec/reference/Stages.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::ref {

/// The SplitMix64 output function (Steele, Lea, Flood 2014): a bijective
/// 64-bit mix.
uint64_t mixBits(uint64_t value);

/// Counter-based random numbers: bits(i) = mix(key + (i + 1) * 0x9E3779B97F4A7C15)
/// with key = mix(seed ^ mix(stream + 1)), i.e. the SplitMix64 sequence of
/// the key. Streams with different tags are independent for testing purposes.
class CounterRandom {
public:
  CounterRandom(uint64_t seed, uint64_t stream);
  uint64_t bits(uint64_t index) const;
  /// Uniform in [0, 1), 53 random bits.
  double uniform(uint64_t index) const;
  /// Standard normal (Box-Muller over uniforms 2 * index and 2 * index + 1).
  double normal(uint64_t index) const;

private:
  uint64_t key_;
};

/// A named layer shape.
struct ShapePreset {
  std::string name;
  MoeShape shape;
  /// Intermediate columns that hold data; the rest is zero padding (TP4
  /// Flash: 576 of 640).
  int64_t validIntermediate;
  std::string description;
};

/// flash (H 5120, I 2304, E 384, top-6), flash-tp4 (I 640 = 576 padded),
/// flash-draft-tp4 (E 128, top-3), pro-fhmoe (H 7168, I 512, E 384 routed +
/// shared, top-6 routed + shared = 385 / 7), and small test shapes.
const std::vector<ShapePreset> &shapePresets();
/// The preset called `name`, or null.
const ShapePreset *findShapePreset(const std::string &name);

/// Which experts generated routing picks.
struct RoutingOptions {
  /// 0: any expert. Otherwise only experts of rank `hotRank` under EP `ep`
  /// (hot-rank routing: every token to one rank).
  int64_t ep = 0;
  int64_t hotRank = 0;
  /// Probability that a slot is made invalid (half -1, half an id >= E).
  double invalidFraction = 0.0;
};

/// Tokens [tokens, H] of BF16 values ~ N(0, 1) times a per-token factor in
/// [0.5, 2], clipped to +-8; routing: topk distinct experts per token
/// (repeats only if fewer experts are eligible than topk), weights a softmax
/// of N(0, 1) logits over the token's slots. `stream` separates ranks.
TokenBatch generateBatch(uint64_t seed, uint64_t stream, int64_t tokens,
                         const MoeShape &shape, const RoutingOptions &routing);

/// Default E8M0 exponent of generated MXFP4 scales for contraction depth K:
/// round(-log2(2.6 * sqrt(K))), so a dot product of N(0,1) activations with
/// a generated row has magnitude about 1.
int defaultScaleExponent(int64_t depth);

/// MXFP4 weights generated on demand, [E, N, K]. Element codes are drawn
/// from a fixed distribution over the E2M1 magnitudes (more mass near zero,
/// random sign); each block's scale exponent is scaleExponent + {-1, 0, 1}.
/// Rows flagged in zeroRows and columns >= validDepth are zero (padding).
class GeneratedMxfp4Weights final : public WeightSource {
public:
  GeneratedMxfp4Weights(uint64_t seed, uint64_t tensorTag, int64_t numExperts,
                        int64_t rows, int64_t depth, int scaleExponent,
                        std::vector<bool> zeroRows = {}, int64_t validDepth = -1);
  int64_t numExperts() const override { return numExperts_; }
  int64_t rows() const override { return rows_; }
  int64_t depth() const override { return depth_; }
  ExpertRows expertRows(int64_t expert, int64_t rowBegin, int64_t rowCount,
                        WeightScratch &scratch) const override;

private:
  CounterRandom random_;
  int64_t numExperts_, rows_, depth_;
  int scaleExponent_;
  std::vector<bool> zeroRows_;
  int64_t validDepth_;
};

/// W13 rows that are padding when only `validIntermediate` of I columns hold
/// data, under the gate/up layout `glu`.
std::vector<bool> paddedW13Rows(const GluConfig &glu, int64_t intermediate,
                                int64_t validIntermediate);

/// One FP8 E4M3FN expert [rows, depth] (FHMoE's shared expert): N(0, 1) /
/// sqrt(depth) values quantised per 1x32 with the activation recipe.
void generateFp8Expert(uint64_t seed, uint64_t tensorTag, int64_t rows,
                       int64_t depth, std::vector<uint8_t> &codes,
                       std::vector<uint8_t> &scales);

/// Copies every expert of `source` into dense device-layout arrays.
void materializeWeights(const WeightSource &source,
                        std::vector<uint8_t> &elements,
                        std::vector<uint8_t> &scales);

} // namespace moec::ref

#endif // MOEC_REFERENCE_GENERATE_H
