// A second, naive formulation of the MoE layer, written independently of the
// oracle: straight loops per token and per top-k slot, fully dequantised
// weight matrices, one plain dot product over all of K, no sorting, no
// dispatch, no tiles. Only the format decoders/encoders of Formats.h are
// shared (they are tested exhaustively on their own).
#ifndef MOEC_TEST_REFERENCE_NAIVE_ORACLE_H
#define MOEC_TEST_REFERENCE_NAIVE_ORACLE_H

#include <cstdint>
#include <vector>

namespace naive {

/// One expert matrix [rows, depth], fully dequantised.
struct Matrix {
  int64_t rows = 0, depth = 0;
  std::vector<double> values;
  double at(int64_t row, int64_t k) const { return values[row * depth + k]; }
};

/// Dequantises expert `expert` of a packed MXFP4 tensor [E, rows, depth/2].
Matrix fromMxfp4(const std::vector<uint8_t> &packed,
                 const std::vector<uint8_t> &scales, int64_t expert,
                 int64_t rows, int64_t depth);
/// Dequantises an FP8 matrix [rows, depth] with [rows, depth/32] scales.
Matrix fromFp8(const std::vector<uint8_t> &codes,
               const std::vector<uint8_t> &scales, int64_t rows, int64_t depth);

/// Quantise-then-dequantise a vector with the DeepSeek V4 1x32 FP8 recipe,
/// written from the recipe text: scale = smallest power of two s with
/// 448 * s >= max(amax, 1e-4), then RNE(x / s) to E4M3FN.
std::vector<double> fakeQuantFp8(const std::vector<double> &values);

/// Quantise-then-dequantise a vector with AITER's MXFP4 activation rule,
/// written from its text: round amax's FP32 bits up at 0x200000 (keep the
/// exponent), scale = 2^(floor(log2) - 2) with the exponent in [-127, 127],
/// then the nearest E2M1 value of x / scale (ties: even mantissa), at most 6.
std::vector<double> fakeQuantFp4(const std::vector<double> &values);

struct Layer {
  int64_t hidden = 0, intermediate = 0;
  /// Gate/up interleave G (0 = gate rows then up rows) and clamp (0 = off).
  int64_t interleave = 0;
  double clampLimit = 0.0;
  /// Whether input and intermediate are quantised (quantisation-faithful),
  /// each to FP8 or, with the flags below, to MXFP4 (A4W4).
  bool quantize = false;
  bool fp4Input = false, fp4Intermediate = false;
  /// GPT-OSS's gate * sigmoid(1.702 gate) * (up + 1) instead of SiLU.
  bool gptOssSwiglu = false;
  /// One entry per expert id (FHMoE: the shared expert last).
  std::vector<Matrix> w13, w2;
  /// Optional per-expert biases (empty: none): w13Bias[e] holds I gate then
  /// I up values, added before the clamp; w2Bias[e] holds H values, added to
  /// the expert's output before the routing weight.
  std::vector<std::vector<double>> w13Bias, w2Bias;
};

/// out[t] = sum over slots with a valid expert of weight * W2(act(W13 x)),
/// in double. hidden: BF16 bits [tokens, H].
std::vector<double> runLayer(const Layer &layer,
                             const std::vector<uint16_t> &hidden,
                             const std::vector<int32_t> &ids,
                             const std::vector<float> &weights, int64_t tokens,
                             int64_t topk);

/// The unweighted W2 output of one token through one expert.
std::vector<double> expertOutput(const Layer &layer, const std::vector<double> &x,
                                 int64_t expert);

} // namespace naive

#endif
