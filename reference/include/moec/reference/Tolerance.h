//===- Tolerance.h - per-element bounds of a kernel's layer output -*- C++ -*-===//
//
// How far a correct kernel's output may land from the quantisation-faithful
// oracle, element by element. The oracle sums in double; a kernel sums in
// FP32 in its own order, evaluates the activation in FP32, may quantise an
// intermediate element whose activation sits next to an FP8 rounding
// boundary to the neighbouring code, rounds each route's W2 row and the
// layer's output to BF16. docs/numerics.md ("The final output") derives each
// term; a kernel that skips a quantisation step, swaps gate and up or uses
// another activation lands far outside it.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_TOLERANCE_H
#define MOEC_REFERENCE_TOLERANCE_H

#include "moec/reference/Routing.h"
#include "moec/reference/Stages.h"
#include "moec/reference/Status.h"

#include <cstdint>
#include <vector>

namespace moec::ref {

/// The largest relative L2 distance between a kernel's BF16 layer output and
/// the oracle's: 2^-7, twice BF16's unit roundoff 2^-8. Rounding the output
/// once to BF16 alone gives about 2^-8 / sqrt(3) = 2.3e-3 (measured 1.6e-3
/// to 2.4e-3 on every shipped configuration); skipping the FP8 quantisation
/// of the intermediate gives about 2.6e-2 (docs/numerics.md).
constexpr double kLayerOutputRelL2Bound = 0x1p-7;

/// For each activation of one 32-element block, how far the value a kernel
/// quantises it to may be from the oracle's dequantised value in `format`,
/// given `bound[i]`, how far the kernel's FP32 activation may be from
/// `act[i]` (W13Outputs::activationErrorBound). Zero where no rounding
/// boundary of the format and no scale boundary lies within the bound, so
/// the kernel's code must equal the oracle's; otherwise the bound plus one
/// step of the format at the larger possible scale.
void intermediateDeviation(const double *act, const double *bound,
                           double *deviation,
                           ActivationFormat format = ActivationFormat::Fp8E4M3);

/// For each listed route of `sorted` and each of the H outputs of W2, how far
/// a kernel's W2 row (before the routing weight, before rounding to BF16) may
/// be from the oracle's `downRows`. `activation` and `activationBound` are
/// W13's [rows, I] outputs; `intermediateNorms` the Euclidean norm of each
/// route's dequantised intermediate row, quantised in `format`. `out` is
/// [rows, H]; rows of routes not listed are left untouched.
Status w2RowTolerance(const double *activation, const double *activationBound,
                      const std::vector<double> &intermediateNorms,
                      const WeightSource &w2, const SortedRoutes &sorted,
                      const float *bias, const double *downRows, double *out,
                      int numThreads = 0,
                      ActivationFormat format = ActivationFormat::Fp8E4M3);

/// Accumulates the bound of one combined output element over its routes,
/// in any order, then gives the bound against the oracle's FP32 output.
class CombineTolerance {
public:
  /// One valid route: its routing weight, the oracle's W2 row value and that
  /// value's bound (w2RowTolerance).
  void addRoute(double weight, double row, double rowTolerance);
  /// One valid route of the FP8 peer payload: the oracle's dequantised
  /// weighted value and how far the kernel's may be from it
  /// (intermediateDeviation of the weighted row's block); the kernel adds
  /// the dequantised value exactly, so no product or BF16 rounding.
  void addDequantisedRoute(double value, double deviation);
  /// The bound for the kernel's BF16 output against the oracle's FP32
  /// rounding of `sum`, the oracle's double sum of the routes.
  double finish(double sum) const;

private:
  double routesError_ = 0.0;
  double magnitude_ = 0.0;
  int64_t routes_ = 0;
};

} // namespace moec::ref

#endif // MOEC_REFERENCE_TOLERANCE_H
