//===- ScaledMfma.cpp - scaled MFMA arithmetic from the lane table --------===//

#include "moec/Emulator/ScaledMfma.h"

#include "moec/reference/Formats.h"

#include <cstddef>
#include <vector>

using std::size_t;

namespace moec::emu {
namespace {

/// Decoded element value of element `e` of lane `lane`.
double elementValue(const MfmaOperand &op, int lane, int e) {
  const uint8_t *regs = op.bytes + size_t(lane) * op.laneStride;
  if (op.format == mfma::OperandFormat::Fp8)
    return ref::decodeFp8E4M3(regs[e]);
  return ref::decodeE2M1(ref::unpackE2M1(regs, e));
}

/// Rebuilds one operand as a dim x K tile of decoded elements and a
/// dim x (K / 32) tile of scale values, each entry written by the one lane
/// the layout table names as its owner.
void gatherOperand(mfma::Shape shape, const MfmaOperand &op,
                   std::vector<double> &values, std::vector<double> &scales) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  const int blocks = info.k / 32;
  values.assign(size_t(info.dim) * info.k, 0.0);
  scales.assign(size_t(info.dim) * blocks, 0.0);
  for (int lane = 0; lane < 64; ++lane) {
    const int row = mfma::operandRow(shape, lane);
    for (int e = 0; e < 32; ++e) {
      const int k = mfma::operandK(shape, op.format, lane, e);
      values[size_t(row) * info.k + k] = elementValue(op, lane, e);
    }
    scales[size_t(row) * blocks + mfma::scaleBlock(shape, lane)] =
        ref::decodeE8M0(op.scales[lane]);
  }
}

} // namespace

void scaledMfma(mfma::Shape shape, const MfmaOperand &a, const MfmaOperand &b,
                const float *c, float *d) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  const int blocks = info.k / 32;
  std::vector<double> aValues, aScales, bValues, bScales;
  gatherOperand(shape, a, aValues, aScales);
  gatherOperand(shape, b, bValues, bScales);
  // result[m][n] before C; computed once, then scattered per lane.
  std::vector<double> product(size_t(info.dim) * info.dim, 0.0);
  for (int m = 0; m < info.dim; ++m)
    for (int n = 0; n < info.dim; ++n) {
      double total = 0.0;
      for (int blk = 0; blk < blocks; ++blk) {
        double blockSum = 0.0;
        const double *av = &aValues[size_t(m) * info.k + blk * 32];
        const double *bv = &bValues[size_t(n) * info.k + blk * 32];
        for (int i = 0; i < 32; ++i)
          blockSum += av[i] * bv[i];
        total += blockSum * aScales[size_t(m) * blocks + blk] *
                 bScales[size_t(n) * blocks + blk];
      }
      product[size_t(m) * info.dim + n] = total;
    }
  for (int lane = 0; lane < 64; ++lane)
    for (int acc = 0; acc < info.accPerLane; ++acc) {
      const int m = mfma::accRow(shape, lane, acc);
      const int n = mfma::accCol(shape, lane);
      const size_t slot = size_t(lane) * info.accPerLane + acc;
      d[slot] = static_cast<float>(product[size_t(m) * info.dim + n] +
                                   static_cast<double>(c[slot]));
    }
}

} // namespace moec::emu
