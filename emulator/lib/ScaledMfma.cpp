//===- ScaledMfma.cpp - scaled MFMA arithmetic from the lane table --------===//

#include "moec/Emulator/ScaledMfma.h"

#include "moec/reference/Formats.h"

#include <cmath>
#include <cstring>
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
  double fp8[256];
  bool fp8Nan[256];
  double fp4[16];
  double e8m0[256];
  Tables() {
    for (int c = 0; c < 256; ++c) {
      const double v = ref::decodeFp8E4M3(static_cast<uint8_t>(c));
      fp8Nan[c] = std::isnan(v);
      fp8[c] = fp8Nan[c] ? 0.0 : std::ldexp(v, 9);
      e8m0[c] = ref::decodeE8M0(static_cast<uint8_t>(c));
    }
    for (int c = 0; c < 16; ++c)
      fp4[c] = ref::decodeE2M1(static_cast<uint8_t>(c)) * 2.0;
  }
};

const Tables &tables() {
  static const Tables t;
  return t;
}

/// Where each lane's element e lands in the dim x K tile (row * K + k), and
/// the (row, block) its scale covers, for one shape and format: computed
/// once from the layout table.
struct OperandPlacement {
  int16_t slot[64][32];
  int16_t scaleSlot[64];
};

const OperandPlacement &placement(mfma::Shape shape, mfma::OperandFormat format) {
  static const auto table = [] {
    std::vector<OperandPlacement> all(4);
    for (int s = 0; s < 2; ++s)
      for (int f = 0; f < 2; ++f) {
        const auto shape = s ? mfma::Shape::M32N32K64 : mfma::Shape::M16N16K128;
        const auto format =
            f ? mfma::OperandFormat::Fp4 : mfma::OperandFormat::Fp8;
        const mfma::ShapeInfo info = mfma::shapeInfo(shape);
        OperandPlacement &p = all[size_t(s * 2 + f)];
        for (int lane = 0; lane < 64; ++lane) {
          const int row = mfma::operandRow(shape, lane);
          for (int e = 0; e < 32; ++e)
            p.slot[lane][e] = static_cast<int16_t>(
                row * info.k + mfma::operandK(shape, format, lane, e));
          p.scaleSlot[lane] = static_cast<int16_t>(
              row * (info.k / 32) + mfma::scaleBlock(shape, lane));
        }
      }
    return all;
  }();
  return table[size_t((shape == mfma::Shape::M32N32K64 ? 2 : 0) +
                      (format == mfma::OperandFormat::Fp4 ? 1 : 0))];
}

/// One operand rebuilt as a dim x K tile of integer elements held in
/// doubles (value = integer * 2^-shift; every block sum of products stays
/// below 2^53, so it is exact in any order), a NaN flag per (row, K block),
/// and the scale value per (row, K block); each entry written by the one
/// lane the layout table names as its owner.
struct IntegerTile {
  double values[32 * 128];
  uint8_t nanBlock[32 * 4];
  double scales[32 * 4];
  bool anyNan = false;
  int shift = 0;
};

void gatherOperand(mfma::Shape shape, const MfmaOperand &op, IntegerTile &tile) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  const int blocks = info.k / 32;
  const Tables &t = tables();
  const bool fp8 = op.format == mfma::OperandFormat::Fp8;
  const OperandPlacement &place = placement(shape, op.format);
  tile.shift = fp8 ? 9 : 1;
  tile.anyNan = false;
  std::memset(tile.nanBlock, 0, size_t(info.dim) * blocks);
  for (int lane = 0; lane < 64; ++lane) {
    const uint8_t *regs = op.bytes + size_t(lane) * op.laneStride;
    const int16_t *slot = place.slot[lane];
    if (fp8) {
      for (int e = 0; e < 32; ++e) {
        tile.values[slot[e]] = t.fp8[regs[e]];
        if (t.fp8Nan[regs[e]]) {
          tile.nanBlock[(slot[e] / info.k) * blocks + (slot[e] % info.k) / 32] = 1;
          tile.anyNan = true;
        }
      }
    } else {
      for (int e = 0; e < 32; ++e)
        tile.values[slot[e]] = t.fp4[(regs[e / 2] >> ((e & 1) * 4)) & 0xF];
    }
    tile.scales[place.scaleSlot[lane]] = t.e8m0[op.scales[lane]];
  }
}

/// The exact sum of 32 products of integer-valued doubles.
inline double blockDot(const double *a, const double *b) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int i = 0; i < 32; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  return (s0 + s1) + (s2 + s3);
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
  const bool anyNan = at.anyNan || bt.anyNan;
  double product[32 * 32];
  for (int m = 0; m < info.dim; ++m)
    for (int n = 0; n < info.dim; ++n) {
      double total = 0.0;
      for (int blk = 0; blk < blocks; ++blk) {
        // The block's 32 products summed exactly (integers), in any order.
        double blockSum;
        if (anyNan && (at.nanBlock[m * blocks + blk] ||
                       bt.nanBlock[n * blocks + blk]))
          blockSum = std::numeric_limits<double>::quiet_NaN();
        else
          blockSum = blockDot(&at.values[m * info.k + blk * 32],
                              &bt.values[n * info.k + blk * 32]) *
                     unit;
        total += blockSum * at.scales[m * blocks + blk] *
                 bt.scales[n * blocks + blk];
      }
      product[m * info.dim + n] = total;
    }
  for (int lane = 0; lane < 64; ++lane)
    for (int acc = 0; acc < info.accPerLane; ++acc) {
      const int m = mfma::accRow(shape, lane, acc);
      const int n = mfma::accCol(shape, lane);
      const size_t slot = size_t(lane) * info.accPerLane + acc;
      d[slot] = static_cast<float>(product[m * info.dim + n] +
                                   static_cast<double>(c[slot]));
    }
}

} // namespace moec::emu
