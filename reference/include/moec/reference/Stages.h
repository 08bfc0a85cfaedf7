//===- Stages.h - W13 and W2 grouped-GEMM stages on device layouts -*- C++ -*-===//
//
// The two GEMM stages every MoE family shares, operating on the buffers the
// kernels read and write (see docs/reference.md, "Stages"):
//
//   W13: for each entry r of the sorted route list, h = A[r / routesPerARow]
//        x W13[expert]^T ([2I]) (+ the expert's optional gate/up bias), then
//        the gated activation -> [I], then (in quantisation-faithful use) FP8
//        1x32 quantisation of that row.
//   W2:  for each entry r, y = A[r] x W2[expert]^T ([H]) (+ the expert's
//        optional bias).
//
// Accumulation (both stages): A is dequantised exactly to double, B's element
// values are decoded exactly; for each 32-element K block the products are
// summed in double in increasing k, the block sum is multiplied by B's block
// scale (a power of two, exact) and added to a double accumulator in
// increasing block order. With FP8 x MXFP4 operands every block sum is exact,
// so only the cross-block additions round; the implementation then forms the
// block sums in int32 (FP8 values are multiples of 2^-9, E2M1 of 2^-1),
// which gives the same doubles bit for bit and is faster. Results do not
// depend on the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_STAGES_H
#define MOEC_REFERENCE_STAGES_H

#include "moec/reference/Quantize.h"
#include "moec/reference/Routing.h"
#include "moec/reference/Status.h"

#include <cstdint>
#include <vector>

namespace moec::ref {

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

/// Element format of an expert's weights.
enum class WeightFormat {
  /// E2M1 pairs, [N, K / 2] bytes, element 2j in the low nibble.
  Mxfp4,
  /// FP8 E4M3FN, [N, K] bytes.
  Fp8E4M3,
};

/// Bytes of one weight row of `depth` elements in `format`.
inline int64_t weightRowBytes(WeightFormat format, int64_t depth) {
  return format == WeightFormat::Mxfp4 ? depth / 2 : depth;
}

/// A run of consecutive weight rows of one expert: elements row-major with
/// weightRowBytes() per row, scales row-major with depth / 32 bytes per row.
struct ExpertRows {
  WeightFormat format = WeightFormat::Mxfp4;
  const uint8_t *elements = nullptr;
  const uint8_t *scales = nullptr;
};

/// Storage a WeightSource may fill when its rows are not resident.
struct WeightScratch {
  std::vector<uint8_t> elements;
  std::vector<uint8_t> scales;
};

/// Read access to the weights of `numExperts()` experts, each [rows(), depth()]
/// with one E8M0 scale per 32 elements along depth (K). Implementations must
/// be safe to call from several threads at once with distinct scratch.
class WeightSource {
public:
  virtual ~WeightSource() = default;
  virtual int64_t numExperts() const = 0;
  /// N: output rows per expert (2I for W13, H for W2).
  virtual int64_t rows() const = 0;
  /// K: the contraction depth (H for W13, I for W2).
  virtual int64_t depth() const = 0;
  /// Rows [rowBegin, rowBegin + rowCount) of `expert`; the pointers stay
  /// valid until `scratch` is modified or destroyed.
  virtual ExpertRows expertRows(int64_t expert, int64_t rowBegin,
                                int64_t rowCount,
                                WeightScratch &scratch) const = 0;
};

/// Weights resident in the device layout: elements [E, N, rowBytes] and
/// scales [E, N, K / 32], contiguous, all experts in one format.
class DenseWeights final : public WeightSource {
public:
  DenseWeights(WeightFormat format, const uint8_t *elements,
               const uint8_t *scales, int64_t numExperts, int64_t rows,
               int64_t depth)
      : format_(format), elements_(elements), scales_(scales),
        numExperts_(numExperts), rows_(rows), depth_(depth) {}
  int64_t numExperts() const override { return numExperts_; }
  int64_t rows() const override { return rows_; }
  int64_t depth() const override { return depth_; }
  ExpertRows expertRows(int64_t expert, int64_t rowBegin, int64_t rowCount,
                        WeightScratch &scratch) const override;

private:
  WeightFormat format_;
  const uint8_t *elements_;
  const uint8_t *scales_;
  int64_t numExperts_, rows_, depth_;
};

/// `routed` experts 0..E-1 followed by the single expert of `appended` as
/// expert E (FHMoE's shared expert). Both must have equal rows and depth.
class AppendedExpertWeights final : public WeightSource {
public:
  AppendedExpertWeights(const WeightSource &routed, const WeightSource &appended)
      : routed_(routed), appended_(appended) {}
  int64_t numExperts() const override { return routed_.numExperts() + 1; }
  int64_t rows() const override { return routed_.rows(); }
  int64_t depth() const override { return routed_.depth(); }
  ExpertRows expertRows(int64_t expert, int64_t rowBegin, int64_t rowCount,
                        WeightScratch &scratch) const override;

private:
  const WeightSource &routed_;
  const WeightSource &appended_;
};

//===----------------------------------------------------------------------===//
// Activations (the A operand)
//===----------------------------------------------------------------------===//

/// Rows of the A operand in one of the layouts the oracle accepts.
struct ActivationRows {
  enum class Kind {
    /// FP8 E4M3FN codes [rows, K] + E8M0 scales [rows, K / 32].
    Fp8,
    /// MXFP4: E2M1 pairs [rows, K / 2] (element 2j in the low nibble) +
    /// E8M0 scales [rows, K / 32].
    Mxfp4,
    /// BF16 bits [rows, K] (exact mode input).
    Bf16,
    /// Double values [rows, K] (exact mode intermediate).
    Float64,
  };
  Kind kind = Kind::Fp8;
  int64_t rows = 0;
  int64_t depth = 0;
  const uint8_t *codes = nullptr;
  const uint8_t *scales = nullptr;
  const uint16_t *bf16 = nullptr;
  const double *values = nullptr;

  static ActivationRows fp8(const uint8_t *codes, const uint8_t *scales,
                            int64_t rows, int64_t depth);
  static ActivationRows mxfp4(const uint8_t *packed, const uint8_t *scales,
                              int64_t rows, int64_t depth);
  /// fp8 or mxfp4 rows, by `format`.
  static ActivationRows quantized(ActivationFormat format, const uint8_t *codes,
                                  const uint8_t *scales, int64_t rows,
                                  int64_t depth);
  static ActivationRows bfloat16(const uint16_t *bits, int64_t rows,
                                 int64_t depth);
  static ActivationRows float64(const double *values, int64_t rows,
                                int64_t depth);
  /// Exact double values of row `row` into out[0, depth).
  void dequantizeRow(int64_t row, double *out) const;
};

//===----------------------------------------------------------------------===//
// Gated activation between the stages
//===----------------------------------------------------------------------===//

/// Where gate and up rows sit in W13 [2I, H] and how they combine.
struct GluConfig {
  /// Interleave granularity G of W13's rows. 0 (or G == I): gate rows
  /// [0, I), then up rows [I, 2I) (MegaMoE checkpoint layout). Otherwise
  /// blocks of G gate rows then G up rows: logical gate row j is physical row
  /// (j / G) * 2G + j % G and up row j is that + G. G must divide I; G = 1
  /// alternates gate/up row by row.
  int64_t interleave = 0;
  /// Clamp limit L of the clamped SwiGLU; 0 disables the clamp (plain SiLU).
  double clampLimit = 0.0;
  /// GPT-OSS's SwiGLU (AITER's ActivationType.Swiglu) instead of SiLU.
  bool gptOssSwiglu = false;
  /// Optional per-expert FP32 gate/up bias [E, 2I] (AITER's bias1), in
  /// logical order whatever the interleave: gate column j at [e, j], up
  /// column j at [e, I + j]. Added to the GEMM result before the clamp and
  /// the activation. Null: no bias.
  const float *bias = nullptr;
  /// Kimi K3's SiTUv2 (AITER's ActivationType.Situv2) instead of SiLU:
  /// situV2Activation with these betas.
  bool situV2 = false;
  double situBeta = 4.0;
  double situLinearBeta = 25.0;
};

/// Physical W13 row of logical gate row j (up row: gateRow + interleave, or
/// + I when not interleaved).
int64_t gateRowOf(const GluConfig &glu, int64_t intermediate, int64_t j);
/// Physical W13 row of logical up row j.
int64_t upRowOf(const GluConfig &glu, int64_t intermediate, int64_t j);

/// silu(g') * u' with g' = min(g, L), u' = clamp(u, -L, L) when L > 0 and
/// silu(x) = x / (1 + exp(-x)), all in double. With `gptOssSwiglu`
/// (GPT-OSS, AITER's ActivationType.Swiglu): g' * sigmoid(1.702 g') *
/// (u' + 1), the same clamp.
double gatedActivation(double gate, double up, double clampLimit,
                       bool gptOssSwiglu = false);

/// SiTUv2 (AITER's ActivationType.Situv2, aiter/fused_moe.py `situv2`):
/// B tanh(g' / B) sigmoid(g') * LB tanh(u' / LB), with g', u' clamped as in
/// gatedActivation when L > 0 (B = beta, LB = linearBeta), in double.
double situV2Activation(double gate, double up, double clampLimit, double beta,
                        double linearBeta);

/// The activation `glu` names (SiLU, GPT-OSS SwiGLU or SiTUv2).
double gatedActivation(const GluConfig &glu, double gate, double up);

//===----------------------------------------------------------------------===//
// Stage functions
//===----------------------------------------------------------------------===//

/// Optional outputs of the W13 stage; null pointers are not written. Rows
/// are indexed by route id; rows of routes absent from the list (invalid
/// routes, padding) are left untouched.
struct W13Outputs {
  /// [numRoutes, 2I] FP32: the GEMM result plus the bias (GluConfig::bias),
  /// the values the activation reads, in W13's physical row order.
  float *preActivation = nullptr;
  /// [numRoutes, I] double: after the gated activation, before quantisation.
  double *activation = nullptr;
  /// [numRoutes, activationRowBytes(intermediateFormat, I)] codes +
  /// [numRoutes, I / 32] E8M0 scales: the activation quantised per 1x32 in
  /// `intermediateFormat` (Quantize.h), as the W13 kernel writes the
  /// intermediate.
  uint8_t *intermediateCodes = nullptr;
  uint8_t *intermediateScales = nullptr;
  ActivationFormat intermediateFormat = ActivationFormat::Fp8E4M3;
  /// [numRoutes, I] double: a bound on how far an implementation that
  /// accumulates the GEMM in FP32 may land from `activation` before it
  /// quantises. The GEMM's FP32 sum of at most depth / 32 partial sums errs
  /// by at most (depth / 32) u ||a|| ||w|| (u = 2^-24, Cauchy-Schwarz for
  /// the sum of |a_k w_k|), plus one rounding of the bias; the bound is the
  /// largest change of the activation over the corners of that box, plus
  /// 2^-19 |activation| for its evaluation in FP32.
  double *activationErrorBound = nullptr;
};

/// W13 stage on general operands: A row for route r is r / routesPerARow
/// (topk when A holds one row per token, 1 when A holds one row per route);
/// w13 is [E, 2I, H]; `sorted` indexes routes and experts of w13.
Status runW13Stage(const ActivationRows &a, int64_t routesPerARow,
                   const WeightSource &w13, const SortedRoutes &sorted,
                   const GluConfig &glu, const W13Outputs &outputs,
                   int numThreads = 0);

/// W13 stage on device-layout buffers: A FP8 codes [numTokens, H] + E8M0
/// scales [numTokens, H / 32] (one row per token; route r reads row r / topk),
/// B MXFP4 packed [E, 2I, H / 2] + scales [E, 2I, H / 32].
Status runW13Stage(const uint8_t *aCodes, const uint8_t *aScales,
                   int64_t numTokens, int64_t topk, const uint8_t *bPacked,
                   const uint8_t *bScales, int64_t numExperts, int64_t hidden,
                   int64_t intermediate, const SortedRoutes &sorted,
                   const GluConfig &glu, const W13Outputs &outputs,
                   int numThreads = 0);

/// W2 stage on general operands: out [numRoutes, H] double, row r = A[r] x
/// W2[expert]^T for every listed route; other rows untouched. `bias`, when
/// given, is a per-expert FP32 [E, H] bias (AITER's bias2) added to each
/// route's row, before the routing weight.
Status runW2Stage(const ActivationRows &a, const WeightSource &w2,
                  const SortedRoutes &sorted, double *out, int numThreads = 0,
                  const float *bias = nullptr);

/// W2 stage on device-layout buffers: A FP8 codes [numRoutes, I] + E8M0
/// scales [numRoutes, I / 32], B MXFP4 packed [E, H, I / 2] + scales
/// [E, H, I / 32]; out FP32 [numRoutes, H] (each double result rounded once
/// to float), rows of routes not in the list (padding, invalid) untouched.
Status runW2Stage(const uint8_t *aCodes, const uint8_t *aScales,
                  const uint8_t *bPacked, const uint8_t *bScales,
                  int64_t numExperts, int64_t hidden, int64_t intermediate,
                  const SortedRoutes &sorted, float *out, int numThreads = 0);

/// The routes `sorted` lists (padding dropped), in list order.
std::vector<int32_t> listedRoutes(const SortedRoutes &sorted);
/// The expert of each listed route, in listedRoutes order.
std::vector<int32_t> listedExperts(const SortedRoutes &sorted);
/// Euclidean norm of each of `expert`'s weight rows (dequantised).
std::vector<double> weightRowNorms(const WeightSource &weights, int32_t expert);

/// Weighted combine: out[t] = sum over k = 0..topk-1 with a valid expert id
/// of topkWeights[t, k] * routeRows[t * topk + k], in double, in increasing
/// k; tokens without a valid route get exactly +0. out is [numTokens, H].
void combineRoutes(const double *routeRows, const int32_t *topkIds,
                   const float *topkWeights, int64_t numTokens, int64_t topk,
                   int64_t numExperts, int64_t hidden, double *out);

} // namespace moec::ref

#endif // MOEC_REFERENCE_STAGES_H
