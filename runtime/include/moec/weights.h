//===- weights.h - host-side weight preparation -----------------*- C++ -*-===//
//
// Turns the weights an engine holds (checkpoint layout, or already prepared
// for AITER's MoE kernels) into the exact layout moec's kernels read
// (docs/families.md, "Weight layouts"; docs/weight-preparation.md describes
// every transform and its source). Plain C++17 on the host, multithreaded
// with std::thread; outputs are host buffers the engine copies to the device.
//
// Every input tensor is described by its shape and dtype; a tensor that does
// not match is refused with a one-line message naming it and the expected
// shape.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_WEIGHTS_H
#define MOEC_WEIGHTS_H

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace moec::rt {

/// A host tensor as the engine describes it. dtype names follow PyTorch:
/// "uint8", "float4_e2m1fn_x2", "float8_e4m3fn", "float8_e8m0fnu",
/// "float32", "bfloat16", "int32".
struct TensorRef {
  const void *data = nullptr;
  uint32_t ndim = 0;
  std::array<int64_t, 4> shape{};
  std::string_view dtype;
};

/// What one layer's kernels read: H, the padded TP-local I, the routed
/// experts of this rank, the gate/up interleave G of W13 (0: gate rows then
/// up rows) and whether an FHMoE FP8 shared expert is bound too.
struct WeightLayout {
  uint32_t hidden = 0;
  uint32_t intermediate = 0;
  uint32_t experts = 0;
  uint32_t gateUpInterleave = 0;
  bool sharedExpert = false;
};

/// Bytes of each prepared tensor (0 for the shared ones without a shared
/// expert).
struct WeightSizes {
  uint64_t w13 = 0, w13Scale = 0, w2 = 0, w2Scale = 0;
  uint64_t sharedW13 = 0, sharedW13Scale = 0, sharedW2 = 0, sharedW2Scale = 0;
};

/// Where routed MXFP4 expert weights come from.
enum class WeightSource {
  /// W13 [E, 2I', H/2] gate rows then up rows + [E, 2I', H/32]; W2
  /// [E, H, I'/2] + [E, H, I'/32]; I' <= I (padded with zeros).
  Checkpoint,
  /// AITER's a8w4 preparation (FP8 activations, like moec):
  /// shuffle_weight_a16w4(w, 16, gate_up) for W13 (gate/up interleaved by
  /// 16) and W2, shuffle_scale_a16w4 / e8m0_shuffle for the scales.
  Aiter,
  /// AITER's a16w4 preparation (BF16 activations): the same weight and
  /// scale shuffles with W13's gate and up rows not interleaved.
  AiterA16W4,
  /// AITER's CK preshuffle: shuffle_weight(w, (16, 16)) for W13 and W2,
  /// e8m0_shuffle for the scales, gate/up not interleaved.
  AiterPreshuffle16x16,
};

/// Routed expert inputs. With `up` (and `upScale`) set, `w13` / `w13Scale`
/// hold only the gate rows [E, I', ...] and `up` the up rows (checkpoint
/// source only).
struct ExpertWeightInputs {
  TensorRef w13, w13Scale, up, upScale, w2, w2Scale;
};

/// Host buffers of WeightSizes' sizes.
struct PreparedWeights {
  void *w13 = nullptr, *w13Scale = nullptr, *w2 = nullptr, *w2Scale = nullptr;
};

/// FHMoE shared expert inputs: FP8 E4M3FN W13 [2I', H] (gate rows then up
/// rows) and W2 [H, I'], each with E8M0 1x32 scales ([rows, cols/32]) or
/// DeepSeek's FP32 128x128 block scales ([ceil(rows/128), ceil(cols/128)],
/// value = code x scale). With `up` set, `w13` holds the gate rows [I', H].
struct SharedExpertInputs {
  TensorRef w13, w13Scale, up, upScale, w2, w2Scale;
};

/// What converting block scales to 1x32 E8M0 changed (all zero when every
/// input came with 1x32 scales).
struct ConversionReport {
  /// Elements converted from block scales.
  uint64_t convertedElements = 0;
  /// Of those, elements whose requantised value differs from the
  /// dequantised input.
  uint64_t inexactElements = 0;
  /// Block scales that are not a power of two.
  uint64_t nonPowerOfTwoBlockScales = 0;
  /// Largest |requantised - input| / max|input of its 1x32 block|.
  double maxRelativeError = 0.0;
};

/// Checks a layout (H and I multiples of 32, experts >= 1, G dividing I).
bool checkWeightLayout(const WeightLayout &layout, std::string &error);

/// Bytes of every prepared tensor of `layout`.
WeightSizes weightSizes(const WeightLayout &layout);

/// Writes the routed experts' W13, W2 and scales in the kernels' layout.
/// threads 0: every hardware thread.
bool prepareExpertWeights(const WeightLayout &layout, WeightSource source,
                          const ExpertWeightInputs &inputs,
                          const PreparedWeights &out, unsigned threads,
                          std::string &error);

/// Writes the FHMoE shared expert's FP8 W13, W2 and 1x32 E8M0 scales.
/// `report` (may be null) receives what a block-scale conversion changed.
bool prepareSharedExpert(const WeightLayout &layout,
                         const SharedExpertInputs &inputs,
                         const PreparedWeights &out, unsigned threads,
                         std::string &error,
                         ConversionReport *report = nullptr);

/// The activation recipe of docs/numerics.md on one row of k values (k a
/// multiple of 32): per 32 elements scale 2^ceil(log2(max(amax, 1e-4) /
/// 448)), biased exponent clamped to [1, 254], codes E4M3FN round to nearest
/// even; a block with NaN or Inf gets scale 0xFF and NaN codes.
void quantizeFp8Row1x32(const double *values, int64_t k, uint8_t *codes,
                        uint8_t *scales);

/// E4M3FN code of x (round to nearest even, saturating at +-448).
uint8_t encodeFp8E4M3(double x);
/// Value of an E4M3FN code (NaN for S.1111.111).
double decodeFp8E4M3(uint8_t code);

} // namespace moec::rt

#endif // MOEC_WEIGHTS_H
