//===- Tolerance.cpp - per-element bounds of a kernel's layer output ------===//
//
// docs/numerics.md ("The final output") derives every term used here.
//
//===----------------------------------------------------------------------===//
#include "moec/reference/Tolerance.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Parallel.h"
#include "moec/reference/Quantize.h"

#include <algorithm>
#include <cmath>

namespace moec::ref {
namespace {

/// FP32 unit roundoff, and BF16's (half an ulp relative to the value).
constexpr double kFp32Unit = 0x1p-24;
constexpr double kBf16Unit = 0x1p-8;

/// One FP8 E4M3 step at magnitude `value` under block scale `scale`: the
/// distance to the next code, 2^(e - 3) of the scale, subnormal below 2^-6.
double fp8Step(double value, double scale) {
  const double scaled = value / scale;
  const int exponent = scaled > 0 ? std::max(std::ilogb(scaled), -6) : -6;
  return std::ldexp(scale, exponent - 3);
}

/// One E2M1 step at magnitude `value` under block scale `scale`: 0.5 below
/// 2, 1 below 4, else 2 (which also covers saturating [6, 7) to 6).
double fp4Step(double value, double scale) {
  const double scaled = value / scale;
  return scale * (scaled < 2.0 ? 0.5 : scaled < 4.0 ? 1.0 : 2.0);
}

/// One BF16 step at magnitude `value` (the spacing of BF16 there; BF16
/// subnormals below 2^-126).
double bf16Step(double value) {
  const int exponent = value > 0 ? std::max(std::ilogb(value), -126) : -126;
  return std::ldexp(1.0, exponent - 7);
}

/// The scale code, element code and step of `format`'s quantiser. BF16
/// (A16W4) has no scale: code 127 (1.0) for every block.
uint8_t scaleCodeOf(ActivationFormat format, double amax) {
  if (format == ActivationFormat::Bf16)
    return 127;
  return format == ActivationFormat::Mxfp4 ? activationFp4ScaleCode(amax)
                                           : activationScaleCode(amax);
}
uint32_t elementCodeOf(ActivationFormat format, double scaled) {
  if (format == ActivationFormat::Bf16)
    return encodeBf16(scaled);
  return format == ActivationFormat::Mxfp4 ? encodeE2M1(scaled)
                                           : encodeFp8E4M3(scaled);
}
double stepOf(ActivationFormat format, double value, double scale) {
  if (format == ActivationFormat::Bf16)
    return bf16Step(value);
  return format == ActivationFormat::Mxfp4 ? fp4Step(value, scale)
                                           : fp8Step(value, scale);
}

/// Element (row, k) of one expert's dequantised weights.
double weightAt(const ExpertRows &rows, int64_t depth, int64_t row, int64_t k) {
  const double scale =
      decodeE8M0(rows.scales[row * (depth / kBlockSize) + k / kBlockSize]);
  const uint8_t *elements = rows.elements + row * weightRowBytes(rows.format, depth);
  if (rows.format == WeightFormat::Mxfp4) {
    const uint8_t pair = elements[k / 2];
    return decodeE2M1(k % 2 ? uint8_t(pair >> 4) : uint8_t(pair & 0xF)) * scale;
  }
  return decodeFp8E4M3(elements[k]) * scale;
}

} // namespace

void intermediateDeviation(const double *act, const double *bound,
                           double *deviation, ActivationFormat format) {
  // The kernel's block maximum lies in [lo, hi]; its scale is one of the
  // scales of that range.
  double lo = 0.0, hi = 0.0;
  for (int64_t i = 0; i < kBlockSize; ++i) {
    lo = std::max(lo, std::max(std::fabs(act[i]) - bound[i], 0.0));
    hi = std::max(hi, std::fabs(act[i]) + bound[i]);
  }
  const uint8_t loScale = scaleCodeOf(format, lo);
  const uint8_t hiScale = scaleCodeOf(format, hi);
  const double scale = decodeE8M0(loScale), largest = decodeE8M0(hiScale);
  for (int64_t i = 0; i < kBlockSize; ++i) {
    // Rounding is monotone, so equal codes at both ends of the interval
    // mean the kernel's code is the oracle's.
    const bool sameCode =
        loScale == hiScale &&
        elementCodeOf(format, (act[i] - bound[i]) / scale) ==
            elementCodeOf(format, (act[i] + bound[i]) / scale);
    // Otherwise both values are within half a step of the activations they
    // round, at scales no larger than `largest`.
    deviation[i] = sameCode ? 0.0
                            : bound[i] + stepOf(format,
                                                std::fabs(act[i]) + bound[i],
                                                largest);
  }
}

Status w2RowTolerance(const double *activation, const double *activationBound,
                      const std::vector<double> &intermediateNorms,
                      const WeightSource &w2, const SortedRoutes &sorted,
                      const float *bias, const double *downRows, double *out,
                      int numThreads, ActivationFormat format) {
  const int64_t hidden = w2.rows(), intermediate = w2.depth();
  if (intermediate % kBlockSize != 0)
    return Status::error("W2 tolerance: I = " + std::to_string(intermediate) +
                         " must be a multiple of 32");
  const std::vector<int32_t> listed = listedRoutes(sorted);
  const std::vector<int32_t> experts = listedExperts(sorted);
  if (intermediateNorms.size() != listed.size())
    return Status::error("W2 tolerance: " +
                         std::to_string(intermediateNorms.size()) +
                         " intermediate norms for " +
                         std::to_string(listed.size()) + " listed routes");
  std::vector<int32_t> used(experts.begin(), experts.end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::vector<std::vector<double>> norms(size_t(w2.numExperts()));
  parallelFor(int64_t(used.size()), numThreads, [&](int, int64_t i) {
    norms[size_t(used[size_t(i)])] = weightRowNorms(w2, used[size_t(i)]);
  });
  // The kernel sums at most I / 32 FP32 partial sums (one per scaled-MFMA
  // block), as W13Outputs::activationErrorBound assumes for W13.
  const double steps = double(intermediate / kBlockSize);
  parallelFor(int64_t(listed.size()), numThreads, [&](int, int64_t item) {
    const int64_t route = listed[size_t(item)];
    const int32_t expert = experts[size_t(item)];
    const double *act = activation + route * intermediate;
    const double *bound = activationBound + route * intermediate;
    std::vector<double> deviation(static_cast<size_t>(intermediate));
    for (int64_t b = 0; b < intermediate; b += kBlockSize)
      intermediateDeviation(act + b, bound + b, deviation.data() + b, format);
    double deviationSquares = 0.0;
    std::vector<int64_t> moved;
    for (int64_t j = 0; j < intermediate; ++j)
      if (deviation[size_t(j)] > 0) {
        deviationSquares += deviation[size_t(j)] * deviation[size_t(j)];
        moved.push_back(j);
      }
    // Cauchy-Schwarz over the kernel's own intermediate row, whose norm is
    // at most the oracle's plus the deviations'.
    const double rowNorm =
        intermediateNorms[size_t(item)] + std::sqrt(deviationSquares);
    WeightScratch scratch;
    ExpertRows rows;
    if (!moved.empty())
      rows = w2.expertRows(expert, 0, hidden, scratch);
    const std::vector<double> &weightNorms = norms[size_t(expert)];
    for (int64_t h = 0; h < hidden; ++h) {
      double tolerance =
          steps * kFp32Unit * rowNorm * weightNorms[size_t(h)];
      for (int64_t j : moved)
        tolerance += std::fabs(weightAt(rows, intermediate, h, j)) *
                     deviation[size_t(j)];
      const double down = downRows[route * hidden + h];
      if (bias) // one more FP32 rounding, of the biased sum
        tolerance += kFp32Unit * (std::fabs(down) + tolerance);
      out[route * hidden + h] = tolerance;
    }
  });
  return Status();
}

void CombineTolerance::addRoute(double weight, double row, double rowTolerance) {
  const double w = std::fabs(weight);
  const double reach = std::fabs(row) + rowTolerance;
  // The kernel's row is off by up to rowTolerance, then rounded to BF16
  // (before or after the weight multiplies it).
  routesError_ += w * (rowTolerance + kBf16Unit * reach);
  magnitude_ += w * reach * (1.0 + kBf16Unit);
  ++routes_;
}

void CombineTolerance::addDequantisedRoute(double value, double deviation) {
  routesError_ += deviation;
  magnitude_ += std::fabs(value) + deviation;
  ++routes_;
}

double CombineTolerance::finish(double sum) const {
  if (routes_ == 0) // no valid route: the kernel writes exactly +0
    return 0.0;
  // FP32 products and a sum of routes_ terms in any order, then the rounding
  // of the kernel's sum to BF16 and of the oracle's to FP32; 2^-133 covers
  // a BF16 subnormal's absolute rounding.
  const double error = routesError_ + double(routes_ + 1) * kFp32Unit * magnitude_;
  return error + kBf16Unit * (std::fabs(sum) + error) +
         kFp32Unit * std::fabs(sum) + 0x1p-133;
}

} // namespace moec::ref
