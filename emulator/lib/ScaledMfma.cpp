//===- ScaledMfma.cpp - scaled MFMA arithmetic from the lane table --------===//

#include "moec/Emulator/ScaledMfma.h"

#include "moec/reference/Formats.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

using std::size_t;

namespace moec::emu {
namespace {

/// Decoded formats as exact integers: every finite E4M3FN value is a
/// multiple of 2^-9 (its smallest subnormal), every E2M1 value of 2^-1. The
/// tables come from the reference decoders, once.
struct Tables {
  int32_t fp8[256];
  bool fp8Nan[256];
  int32_t fp4[16];
  double e8m0[256];
  Tables() {
    for (int c = 0; c < 256; ++c) {
      const double v = ref::decodeFp8E4M3(static_cast<uint8_t>(c));
      fp8Nan[c] = std::isnan(v);
      fp8[c] = fp8Nan[c] ? 0 : static_cast<int32_t>(std::ldexp(v, 9));
      e8m0[c] = ref::decodeE8M0(static_cast<uint8_t>(c));
    }
    for (int c = 0; c < 16; ++c)
      fp4[c] = static_cast<int32_t>(ref::decodeE2M1(static_cast<uint8_t>(c)) * 2.0);
  }
};

const Tables &tables() {
  static const Tables t;
  return t;
}

/// One operand rebuilt as a dim x K tile of integer elements (value =
/// integer * 2^-shift), a NaN flag per (row, K block), and the scale value
/// per (row, K block); each entry written by the one lane the layout table
/// names as its owner.
struct IntegerTile {
  std::vector<int32_t> values;
  std::vector<uint8_t> nanBlock;
  std::vector<double> scales;
  int shift = 0;
};

void gatherOperand(mfma::Shape shape, const MfmaOperand &op, IntegerTile &tile) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  const int blocks = info.k / 32;
  const Tables &t = tables();
  const bool fp8 = op.format == mfma::OperandFormat::Fp8;
  tile.shift = fp8 ? 9 : 1;
  tile.values.assign(size_t(info.dim) * info.k, 0);
  tile.nanBlock.assign(size_t(info.dim) * blocks, 0);
  tile.scales.assign(size_t(info.dim) * blocks, 0.0);
  for (int lane = 0; lane < 64; ++lane) {
    const int row = mfma::operandRow(shape, lane);
    const uint8_t *regs = op.bytes + size_t(lane) * op.laneStride;
    for (int e = 0; e < 32; ++e) {
      const int k = mfma::operandK(shape, op.format, lane, e);
      int32_t value;
      if (fp8) {
        value = t.fp8[regs[e]];
        if (t.fp8Nan[regs[e]])
          tile.nanBlock[size_t(row) * blocks + k / 32] = 1;
      } else {
        value = t.fp4[ref::unpackE2M1(regs, e)];
      }
      tile.values[size_t(row) * info.k + k] = value;
    }
    tile.scales[size_t(row) * blocks + mfma::scaleBlock(shape, lane)] =
        t.e8m0[op.scales[lane]];
  }
}

} // namespace

void scaledMfma(mfma::Shape shape, const MfmaOperand &a, const MfmaOperand &b,
                const float *c, float *d) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  const int blocks = info.k / 32;
  thread_local IntegerTile at, bt;
  gatherOperand(shape, a, at);
  gatherOperand(shape, b, bt);
  const double unit = std::ldexp(1.0, -(at.shift + bt.shift));
  // FP8 x FP8 products reach 2^35: accumulate those in 64 bits.
  const bool wide = at.shift == 9 && bt.shift == 9;
  thread_local std::vector<double> product;
  product.assign(size_t(info.dim) * info.dim, 0.0);
  for (int m = 0; m < info.dim; ++m)
    for (int n = 0; n < info.dim; ++n) {
      double total = 0.0;
      for (int blk = 0; blk < blocks; ++blk) {
        const int32_t *av = &at.values[size_t(m) * info.k + blk * 32];
        const int32_t *bv = &bt.values[size_t(n) * info.k + blk * 32];
        // The block's 32 products summed exactly (integers), in any order.
        double blockSum;
        if (at.nanBlock[size_t(m) * blocks + blk] ||
            bt.nanBlock[size_t(n) * blocks + blk]) {
          blockSum = std::numeric_limits<double>::quiet_NaN();
        } else if (wide) {
          int64_t sum = 0;
          for (int i = 0; i < 32; ++i)
            sum += int64_t(av[i]) * bv[i];
          blockSum = double(sum) * unit;
        } else {
          int32_t sum = 0;
          for (int i = 0; i < 32; ++i)
            sum += av[i] * bv[i];
          blockSum = double(sum) * unit;
        }
        total += blockSum * at.scales[size_t(m) * blocks + blk] *
                 bt.scales[size_t(n) * blocks + blk];
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
