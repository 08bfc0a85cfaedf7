//===- ScaledMfma.cpp - scaled MFMA arithmetic from the lane table --------===//
///
/// \file
/// The operands are rebuilt as tiles of exact integers (A row-major, B
/// K-major so that one A element meets a contiguous row of B), the 32-element
/// block sums are computed as independent chains over the output columns
/// (vector lanes without reassociation; the sums are exact integers in any
/// case), and the block results are scaled and added in double in the
/// documented order (ScaledMfma.h).
///
//===----------------------------------------------------------------------===//

#include "moec/Emulator/ScaledMfma.h"

#include "moec/reference/Formats.h"

#include <cmath>
#include <type_traits>
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

/// Where each lane's element e lands in the tile, row-major (row * K + k)
/// and K-major (k * dim + row), and the (row, block) its scale covers, for
/// one shape and format; and where each accumulator of each lane lies in the
/// dim x dim result. Computed once from the layout table.
struct OperandPlacement {
  int16_t rowMajor[64][32];
  int16_t kMajor[64][32];
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
          for (int e = 0; e < 32; ++e) {
            const int k = mfma::operandK(shape, format, lane, e);
            p.rowMajor[lane][e] = static_cast<int16_t>(row * info.k + k);
            p.kMajor[lane][e] = static_cast<int16_t>(k * info.dim + row);
          }
          p.scaleSlot[lane] = static_cast<int16_t>(
              row * (info.k / 32) + mfma::scaleBlock(shape, lane));
        }
      }
    return all;
  }();
  return table[size_t((shape == mfma::Shape::M32N32K64 ? 2 : 0) +
                      (format == mfma::OperandFormat::Fp4 ? 1 : 0))];
}

/// Result element (m * dim + n) of accumulator `acc` of lane `lane`, lane
/// major, per shape.
const int16_t *accumulatorSlots(mfma::Shape shape) {
  static const auto table = [] {
    std::vector<std::vector<int16_t>> all(2);
    for (int s = 0; s < 2; ++s) {
      const auto shape = s ? mfma::Shape::M32N32K64 : mfma::Shape::M16N16K128;
      const mfma::ShapeInfo info = mfma::shapeInfo(shape);
      for (int lane = 0; lane < 64; ++lane)
        for (int acc = 0; acc < info.accPerLane; ++acc)
          all[size_t(s)].push_back(static_cast<int16_t>(
              mfma::accRow(shape, lane, acc) * info.dim +
              mfma::accCol(shape, lane)));
    }
    return all;
  }();
  return table[shape == mfma::Shape::M32N32K64 ? 1 : 0].data();
}

/// One operand rebuilt as a tile of integer elements (value = integer *
/// 2^-shift), a NaN flag per (row, K block), and the scale value per (row,
/// K block); each entry written by the one lane the layout table names as
/// its owner. Integers in int32 when the product with the other operand
/// stays exact there (an FP4 side: |FP8| * 2^9 * |FP4| * 2 * 32 < 2^27),
/// else in double (FP8 x FP8: block sums below 2^41, exact in double).
template <typename T> struct IntegerTile {
  alignas(64) T values[32 * 128];
  uint8_t nanBlock[32 * 4];
  double scales[32 * 4];
  bool anyNan = false;
  int shift = 0;
};

template <typename T>
void gatherOperand(mfma::Shape shape, const MfmaOperand &op, bool kMajor,
                   IntegerTile<T> &tile) {
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
    const int16_t *slot = kMajor ? place.kMajor[lane] : place.rowMajor[lane];
    if (fp8) {
      bool nan = false;
      for (int e = 0; e < 32; ++e) {
        tile.values[slot[e]] = static_cast<T>(t.fp8[regs[e]]);
        nan |= t.fp8Nan[regs[e]];
      }
      if (nan) {
        // Rare: find the blocks of the NaN elements.
        const int16_t *rowSlot = place.rowMajor[lane];
        for (int e = 0; e < 32; ++e)
          if (t.fp8Nan[regs[e]]) {
            tile.nanBlock[(rowSlot[e] / info.k) * blocks +
                          (rowSlot[e] % info.k) / 32] = 1;
            tile.anyNan = true;
          }
      }
    } else {
      for (int e = 0; e < 32; e += 2) {
        const uint8_t pair = regs[e / 2];
        tile.values[slot[e]] = static_cast<T>(t.fp4[pair & 0xF]);
        tile.values[slot[e + 1]] = static_cast<T>(t.fp4[pair >> 4]);
      }
    }
    tile.scales[place.scaleSlot[lane]] = t.e8m0[op.scales[lane]];
  }
}

/// The dim x dim products: for every row m and block, the 32-element block
/// sums of all columns n side by side (A row-major, B K-major), then each
/// scaled by both scales and added to its column's total in block order.
template <typename T, int Dim, int K>
__attribute__((always_inline)) inline void
products(const IntegerTile<T> &a, const IntegerTile<T> &b, double unit,
         double *product) {
  // 32-byte vectors of T (GCC vector extensions: one AVX2 register, or two
  // SSE registers in the default build).
  typedef T Vec __attribute__((vector_size(32)));
  constexpr int kPerVec = 32 / sizeof(T);
  constexpr int kVecs = Dim / kPerVec;
  constexpr int blocks = K / 32;
  const bool anyNan = a.anyNan || b.anyNan;
  for (int m = 0; m < Dim; ++m) {
    double total[Dim];
    for (int n = 0; n < Dim; ++n)
      total[n] = 0.0;
    for (int blk = 0; blk < blocks; ++blk) {
      Vec sums[kVecs];
      for (int j = 0; j < kVecs; ++j)
        sums[j] = Vec{};
      const T *aRow = a.values + m * K + blk * 32;
      const T *bCols = b.values + blk * 32 * Dim;
      for (int k = 0; k < 32; ++k) {
        const T value = aRow[k];
        for (int j = 0; j < kVecs; ++j) {
          Vec column;
          std::memcpy(&column, bCols + k * Dim + j * kPerVec, sizeof(Vec));
          sums[j] += value * column;
        }
      }
      T sum[Dim];
      std::memcpy(sum, sums, sizeof(sum));
      const double scaleA = a.scales[m * blocks + blk];
      for (int n = 0; n < Dim; ++n) {
        double blockSum = static_cast<double>(sum[n]) * unit;
        if (anyNan && (a.nanBlock[m * blocks + blk] ||
                       b.nanBlock[n * blocks + blk]))
          blockSum = std::numeric_limits<double>::quiet_NaN();
        total[n] += blockSum * scaleA * b.scales[n * blocks + blk];
      }
    }
    for (int n = 0; n < Dim; ++n)
      product[m * Dim + n] = total[n];
  }
}

// Wider vector lanes where the CPU has them; every operation is the same
// integer or IEEE double operation in the same order in every clone, so the
// results are identical (no FMA: the library builds with -ffp-contract=off).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MOEC_MFMA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MOEC_MFMA_CLONES
#endif

MOEC_MFMA_CLONES
void productsInt16(const IntegerTile<int32_t> &a, const IntegerTile<int32_t> &b,
                   double unit, double *product) {
  products<int32_t, 16, 128>(a, b, unit, product);
}
MOEC_MFMA_CLONES
void productsInt32(const IntegerTile<int32_t> &a, const IntegerTile<int32_t> &b,
                   double unit, double *product) {
  products<int32_t, 32, 64>(a, b, unit, product);
}
MOEC_MFMA_CLONES
void productsDouble16(const IntegerTile<double> &a,
                      const IntegerTile<double> &b, double unit,
                      double *product) {
  products<double, 16, 128>(a, b, unit, product);
}
MOEC_MFMA_CLONES
void productsDouble32(const IntegerTile<double> &a,
                      const IntegerTile<double> &b, double unit,
                      double *product) {
  products<double, 32, 64>(a, b, unit, product);
}

/// The operand bytes a tile was last rebuilt from. A wave's MFMAs of one
/// K step reuse fragments (a W13 decode tile multiplies one activation
/// fragment with its gate and its up fragment in turn), so an operand
/// equal to the last one on its side keeps its tile instead of being
/// gathered again. (Keeping more tiles, found by a hash, cost more than it
/// saved.)
struct OperandKey {
  mfma::Shape shape = mfma::Shape::M16N16K128;
  mfma::OperandFormat format = mfma::OperandFormat::Fp8;
  bool valid = false;
  uint8_t bytes[64 * 32];
  uint8_t scales[64];

  /// Whether `op` is the operand this key holds; if not, it becomes it.
  bool sameAs(mfma::Shape s, const MfmaOperand &op) {
    const unsigned used = op.format == mfma::OperandFormat::Fp8 ? 32 : 16;
    bool same = valid && shape == s && format == op.format &&
                std::memcmp(scales, op.scales, 64) == 0;
    for (int lane = 0; same && lane < 64; ++lane)
      same = std::memcmp(bytes + lane * used,
                         op.bytes + size_t(lane) * op.laneStride, used) == 0;
    if (same)
      return true;
    shape = s;
    format = op.format;
    valid = true;
    std::memcpy(scales, op.scales, 64);
    for (int lane = 0; lane < 64; ++lane)
      std::memcpy(bytes + lane * used, op.bytes + size_t(lane) * op.laneStride,
                  used);
    return false;
  }
};

template <typename T>
void computeProducts(mfma::Shape shape, const MfmaOperand &a,
                     const MfmaOperand &b, double *product) {
  thread_local IntegerTile<T> at, bt;
  thread_local OperandKey aKey, bKey;
  if (!aKey.sameAs(shape, a))
    gatherOperand(shape, a, /*kMajor=*/false, at);
  if (!bKey.sameAs(shape, b))
    gatherOperand(shape, b, /*kMajor=*/true, bt);
  // 2^-(shift_a + shift_b), exactly (shifts are 1 or 9).
  const double unit = 1.0 / double(uint64_t(1) << (at.shift + bt.shift));
  const bool is16 = shape == mfma::Shape::M16N16K128;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (is16)
      productsInt16(at, bt, unit, product);
    else
      productsInt32(at, bt, unit, product);
  } else {
    if (is16)
      productsDouble16(at, bt, unit, product);
    else
      productsDouble32(at, bt, unit, product);
  }
}

} // namespace

/// The BF16 MFMA (ScaledMfma.h): A [dim][k] and B [k][dim] rebuilt from the
/// lane table, plain double dot products.
void bf16Mfma(mfma::Shape shape, const MfmaOperand &a, const MfmaOperand &b,
              const float *c, float *d) {
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  auto decode = [](const uint8_t *bytes) {
    const uint32_t bits = uint32_t(bytes[0] | (bytes[1] << 8)) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return static_cast<double>(value);
  };
  double aTile[32 * 32], bTile[32 * 32];
  for (int lane = 0; lane < 64; ++lane) {
    const int row = mfma::operandRow(shape, lane);
    for (int e = 0; e < mfma::kBf16ElementsPerLane; ++e) {
      const int k = mfma::operandK(shape, mfma::OperandFormat::Bf16, lane, e);
      aTile[row * info.k + k] =
          decode(a.bytes + size_t(lane) * a.laneStride + 2 * e);
      bTile[k * info.dim + row] =
          decode(b.bytes + size_t(lane) * b.laneStride + 2 * e);
    }
  }
  for (int lane = 0; lane < 64; ++lane) {
    const int col = mfma::accCol(shape, lane);
    for (int acc = 0; acc < info.accPerLane; ++acc) {
      const int row = mfma::accRow(shape, lane, acc);
      double sum = 0.0;
      for (int k = 0; k < info.k; ++k)
        sum += aTile[row * info.k + k] * bTile[k * info.dim + col];
      const int slot = lane * info.accPerLane + acc;
      d[slot] = static_cast<float>(sum + static_cast<double>(c[slot]));
    }
  }
}

void scaledMfma(mfma::Shape shape, const MfmaOperand &a, const MfmaOperand &b,
                const float *c, float *d) {
  if (mfma::isBf16Shape(shape)) {
    bf16Mfma(shape, a, b, c, d);
    return;
  }
  const mfma::ShapeInfo info = mfma::shapeInfo(shape);
  double product[32 * 32];
  if (a.format == mfma::OperandFormat::Fp8 &&
      b.format == mfma::OperandFormat::Fp8)
    computeProducts<double>(shape, a, b, product);
  else
    computeProducts<int32_t>(shape, a, b, product);
  const int16_t *slots = accumulatorSlots(shape);
  for (int slot = 0, n = 64 * info.accPerLane; slot < n; ++slot)
    d[slot] = static_cast<float>(product[slots[slot]] +
                                 static_cast<double>(c[slot]));
}

} // namespace moec::emu
