//===- ScaledMfma.h - one scaled MFMA over a wave's registers ---*- C++ -*-===//
///
/// \file
/// The arithmetic of v_mfma_scale_f32_{16x16x128,32x32x64}_f8f6f4 (and of
/// v_mfma_f32_{16x16x32,32x32x16}_bf16) over the registers of all 64 lanes
/// of a wave. The A (M x K) and B (K x N) tiles and
/// their E8M0 scales are rebuilt from the lane-layout table in
/// moec/target/mfma_layout.h, the same table the codegen emits from. Plain
/// C++: no MLIR.
///
/// Arithmetic (the emulator's documented choice; gfx950's internal adder
/// tree is not public): for every output element and every 32-element K
/// block, the 32 products of decoded elements are summed exactly (FP8 x FP4
/// and FP8 x FP8 products and their block sums are exact in double), the
/// block sum is multiplied by both scales (powers of two: exact), the block
/// results are added in double in increasing block order, C is added last,
/// and the total is rounded once to FP32 (nearest even).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_SCALEDMFMA_H
#define MOEC_EMULATOR_SCALEDMFMA_H

#include "moec/target/mfma_layout.h"

#include <cstdint>

namespace moec::emu {

/// One source operand of a scaled MFMA as the 64 lanes hold it.
struct MfmaOperand {
  mfma::OperandFormat format = mfma::OperandFormat::Fp8;
  /// Lane l's register bytes start at bytes + l * laneStride. FP8: byte e is
  /// element e (32 bytes). FP4: element e is in byte e / 2, even e in the
  /// low nibble (16 bytes).
  const uint8_t *bytes = nullptr;
  unsigned laneStride = 32;
  /// The E8M0 scale byte each lane supplies (64 bytes, after op_sel).
  const uint8_t *scales = nullptr;
};

/// D = A x B + C for one wave. With a BF16 shape (mfma::isBf16Shape) the
/// operands are BF16 (8 elements, 16 bytes a lane) and the scales are
/// ignored: each output element is the sum in double of its K products
/// (each exact in double) in increasing K order, then C, rounded once to
/// FP32 (nearest even); NaN and infinities propagate as in IEEE arithmetic. `c` and `d` are [64][accPerLane] FP32 in
/// lane-major order (d may alias c). Rows of the result follow source A,
/// columns source B (mfma::accRow / accCol).
void scaledMfma(mfma::Shape shape, const MfmaOperand &a, const MfmaOperand &b,
                const float *c, float *d);

} // namespace moec::emu

#endif // MOEC_EMULATOR_SCALEDMFMA_H
