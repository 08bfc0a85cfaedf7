//===- mfma_layout.h - lane layouts of gfx950 scaled MFMA -------*- C++ -*-===//
///
/// \file
/// Which lane holds which matrix element for v_mfma_scale_f32_16x16x128_f8f6f4
/// and v_mfma_scale_f32_32x32x64_f8f6f4, and for the unscaled BF16 MFMAs
/// v_mfma_f32_16x16x32_bf16 and v_mfma_f32_32x32x16_bf16 (A16W4). This table
/// is the only description of these layouts in moec: codegen derives its LDS
/// fragment loads and epilogue stores from it, and the emulator rebuilds the
/// A, B and C tiles from it, so the two cannot drift apart.
///
/// Sources (docs/targets.md): composable_kernel
/// test/mx_mfma_op/mx_mfma_op.hpp register tables (checked there with random
/// per-block scales), Triton's ScaledBlockedToScaledMFMAF8F6F4 (kWidth 16),
/// FlyDSL mega_moe gemm_util.py ("fp8 32-per-lane = 16@K + 16@K+64"). BF16:
/// composable_kernel xdlops_gemm.hpp (mfma_f32_16x16x32bf16: 4 input blocks
/// of k_per_blk 8, K-reducing; mfma_f32_32x32x16bf16: 2 blocks of 8), the
/// AMD Matrix Instruction Calculator, AITER's a16w4 kernel (v8bf16 per lane
/// per K32 step). The C layout of each BF16 shape is that of the scaled shape
/// with the same M = N.
///
/// Plain C++17, part of the chip facts (moec_target).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_TARGET_MFMA_LAYOUT_H
#define MOEC_TARGET_MFMA_LAYOUT_H

#include <array>
#include <cstdint>

namespace moec::mfma {

/// The two scaled MFMA shapes of gfx950, then its two BF16 MFMA shapes.
enum class Shape { M16N16K128, M32N32K64, M16N16K32Bf16, M32N32K16Bf16 };

/// Operand element formats this table describes. BF16 only with the BF16
/// shapes, FP8 and FP4 only with the scaled ones.
enum class OperandFormat { Fp8, Fp4, Bf16 };

struct ShapeInfo {
  /// M = N of the instruction: lanes [0, dim) hold rows 0..dim-1 of group 0.
  int dim;
  /// Reduction depth K of one instruction.
  int k;
  /// Lane groups: 64 / dim. Group g of a lane is lane / dim.
  int groups;
  /// FP32 accumulator values per lane (dim * dim / 64).
  int accPerLane;
};

constexpr ShapeInfo shapeInfo(Shape shape) {
  switch (shape) {
  case Shape::M16N16K128: return ShapeInfo{16, 128, 4, 4};
  case Shape::M32N32K64: return ShapeInfo{32, 64, 2, 16};
  case Shape::M16N16K32Bf16: return ShapeInfo{16, 32, 4, 4};
  case Shape::M32N32K16Bf16: return ShapeInfo{32, 16, 2, 16};
  }
  return ShapeInfo{16, 128, 4, 4};
}

/// Whether `shape` is a BF16 (unscaled) MFMA.
constexpr bool isBf16Shape(Shape shape) {
  return shape == Shape::M16N16K32Bf16 || shape == Shape::M32N32K16Bf16;
}

/// The BF16 MFMA with the M = N of scaled shape `scaled`: A16W4 stages run
/// it where their tile's mfma knob names the scaled shape.
constexpr Shape bf16ShapeOf(Shape scaled) {
  return scaled == Shape::M16N16K128 ? Shape::M16N16K32Bf16
                                     : Shape::M32N32K16Bf16;
}

/// BF16 elements a lane supplies per operand of a BF16 MFMA (one dwordx4).
constexpr int kBf16ElementsPerLane = 8;

/// A run of consecutive operand elements in a lane's register that covers
/// consecutive K: elements [firstElement, firstElement + length) of lane group
/// g hold k = kBase + kPerGroup * g + (element - firstElement).
struct KRun {
  int firstElement;
  int length;
  int kBase;
  int kPerGroup;
};

/// The runs of one operand: FP8 is interleaved in two 16-byte chunks (the
/// second half of K starts at K/2), FP4 is one contiguous 32-element run,
/// BF16 one contiguous 8-element run (lane group g holds k = 8 g .. 8 g + 7).
struct OperandLayout {
  int runCount;
  std::array<KRun, 2> runs;
};

constexpr OperandLayout operandLayout(Shape shape, OperandFormat format) {
  const int k = shapeInfo(shape).k;
  if (format == OperandFormat::Bf16)
    return {1, {KRun{0, kBf16ElementsPerLane, 0, kBf16ElementsPerLane},
                KRun{0, 0, 0, 0}}};
  if (format == OperandFormat::Fp8)
    return {2, {KRun{0, 16, 0, 16}, KRun{16, 16, k / 2, 16}}};
  return {1, {KRun{0, 32, 0, 32}, KRun{0, 0, 0, 0}}};
}

/// Row of the A source (or column of the B source) a lane supplies.
constexpr int operandRow(Shape shape, int lane) {
  return lane % shapeInfo(shape).dim;
}

/// Lane group (0..groups-1) of a lane.
constexpr int laneGroup(Shape shape, int lane) {
  return lane / shapeInfo(shape).dim;
}

/// K index of element `element` (0..31; 0..7 for BF16) of a lane's operand.
constexpr int operandK(Shape shape, OperandFormat format, int lane,
                       int element) {
  const OperandLayout layout = operandLayout(shape, format);
  const int g = laneGroup(shape, lane);
  for (int i = 0; i < layout.runCount; ++i) {
    const KRun &run = layout.runs[i];
    if (element >= run.firstElement && element < run.firstElement + run.length)
      return run.kBase + run.kPerGroup * g + (element - run.firstElement);
  }
  return -1;
}

/// The 32-element scale block whose E8M0 scale a lane supplies: the lane's
/// row/column is operandRow(), the block covers k in [32 * b, 32 * b + 32).
/// For FP8 this block is not the lane's own bytes (see docs).
constexpr int scaleBlock(Shape shape, int lane) { return laneGroup(shape, lane); }

/// Row (index into the A source's M) of accumulator value `acc` of a lane.
constexpr int accRow(Shape shape, int lane, int acc) {
  const ShapeInfo info = shapeInfo(shape);
  return (acc / 4) * (4 * info.groups) + 4 * laneGroup(shape, lane) + acc % 4;
}

/// Column (index into the B source's N) of any accumulator value of a lane.
constexpr int accCol(Shape shape, int lane) { return lane % shapeInfo(shape).dim; }

} // namespace moec::mfma

#endif // MOEC_TARGET_MFMA_LAYOUT_H
