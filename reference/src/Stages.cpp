//===- Stages.cpp - W13 and W2 grouped-GEMM stages ------------------------===//

#include "moec/reference/Stages.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Parallel.h"
#include "moec/reference/Quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

namespace moec::ref {

ExpertRows DenseWeights::expertRows(int64_t expert, int64_t rowBegin,
                                    int64_t /*rowCount*/,
                                    WeightScratch & /*scratch*/) const {
  int64_t row = expert * rows_ + rowBegin;
  return {format_, elements_ + row * weightRowBytes(format_, depth_),
          scales_ + row * (depth_ / kBlockSize)};
}

ExpertRows AppendedExpertWeights::expertRows(int64_t expert, int64_t rowBegin,
                                             int64_t rowCount,
                                             WeightScratch &scratch) const {
  if (expert < routed_.numExperts())
    return routed_.expertRows(expert, rowBegin, rowCount, scratch);
  return appended_.expertRows(0, rowBegin, rowCount, scratch);
}

namespace {
/// Values of the 256 E4M3FN codes.
const double *fp8DecodeTable() {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> values{};
    for (int code = 0; code < 256; ++code)
      values[code] = decodeFp8E4M3(static_cast<uint8_t>(code));
    return values;
  }();
  return table.data();
}
} // namespace

ActivationRows ActivationRows::fp8(const uint8_t *codes, const uint8_t *scales,
                                   int64_t rows, int64_t depth) {
  ActivationRows a;
  a.kind = Kind::Fp8;
  a.codes = codes;
  a.scales = scales;
  a.rows = rows;
  a.depth = depth;
  return a;
}

ActivationRows ActivationRows::mxfp4(const uint8_t *packed,
                                     const uint8_t *scales, int64_t rows,
                                     int64_t depth) {
  ActivationRows a = fp8(packed, scales, rows, depth);
  a.kind = Kind::Mxfp4;
  return a;
}

ActivationRows ActivationRows::quantized(ActivationFormat format,
                                         const uint8_t *codes,
                                         const uint8_t *scales, int64_t rows,
                                         int64_t depth) {
  // BF16 codes are the rows' little-endian bits (the oracle runs on
  // little-endian hosts only, as the kernels' buffers do).
  if (format == ActivationFormat::Bf16)
    return bfloat16(reinterpret_cast<const uint16_t *>(codes), rows, depth);
  return format == ActivationFormat::Mxfp4 ? mxfp4(codes, scales, rows, depth)
                                           : fp8(codes, scales, rows, depth);
}

ActivationRows ActivationRows::bfloat16(const uint16_t *bits, int64_t rows,
                                        int64_t depth) {
  ActivationRows a;
  a.kind = Kind::Bf16;
  a.bf16 = bits;
  a.rows = rows;
  a.depth = depth;
  return a;
}

ActivationRows ActivationRows::float64(const double *values, int64_t rows,
                                       int64_t depth) {
  ActivationRows a;
  a.kind = Kind::Float64;
  a.values = values;
  a.rows = rows;
  a.depth = depth;
  return a;
}

void ActivationRows::dequantizeRow(int64_t row, double *out) const {
  switch (kind) {
  case Kind::Fp8: {
    // Table lookups: this runs for every route and weight-row chunk.
    const double *fp8 = fp8DecodeTable();
    const uint8_t *rowCodes = codes + row * depth;
    const uint8_t *rowScales = scales + row * (depth / kBlockSize);
    for (int64_t i = 0; i < depth; ++i)
      out[i] = fp8[rowCodes[i]] * decodeE8M0(rowScales[i / kBlockSize]);
    return;
  }
  case Kind::Mxfp4:
    dequantizeMxfp4Row(codes + row * (depth / 2),
                       scales + row * (depth / kBlockSize), depth, out);
    return;
  case Kind::Bf16:
    for (int64_t i = 0; i < depth; ++i)
      out[i] = decodeBf16(bf16[row * depth + i]);
    return;
  case Kind::Float64:
    std::copy(values + row * depth, values + (row + 1) * depth, out);
    return;
  }
}

int64_t gateRowOf(const GluConfig &glu, int64_t intermediate, int64_t j) {
  if (glu.interleave <= 0 || glu.interleave >= intermediate)
    return j;
  int64_t g = glu.interleave;
  return (j / g) * 2 * g + j % g;
}

int64_t upRowOf(const GluConfig &glu, int64_t intermediate, int64_t j) {
  if (glu.interleave <= 0 || glu.interleave >= intermediate)
    return intermediate + j;
  return gateRowOf(glu, intermediate, j) + glu.interleave;
}

double gatedActivation(double gate, double up, double clampLimit,
                       bool gptOssSwiglu) {
  if (clampLimit > 0.0) {
    gate = std::min(gate, clampLimit);
    up = std::clamp(up, -clampLimit, clampLimit);
  }
  if (gptOssSwiglu) // GPT-OSS: alpha 1.702 and the up projection plus one.
    return gate / (1.0 + std::exp(-1.702 * gate)) * (up + 1.0);
  return gate / (1.0 + std::exp(-gate)) * up;
}

double situV2Activation(double gate, double up, double clampLimit, double beta,
                        double linearBeta) {
  if (clampLimit > 0.0) {
    gate = std::min(gate, clampLimit);
    up = std::clamp(up, -clampLimit, clampLimit);
  }
  const double sigmoid = 1.0 / (1.0 + std::exp(-gate));
  return beta * std::tanh(gate / beta) * sigmoid * linearBeta *
         std::tanh(up / linearBeta);
}

double gatedActivation(const GluConfig &glu, double gate, double up) {
  if (glu.situV2)
    return situV2Activation(gate, up, glu.clampLimit, glu.situBeta,
                            glu.situLinearBeta);
  return gatedActivation(gate, up, glu.clampLimit, glu.gptOssSwiglu);
}

namespace {

/// Decoded values of every E2M1 code and every E4M3FN code.
struct DecodeTables {
  std::array<double, 16> e2m1;
  std::array<double, 256> fp8;
  std::array<double, 256> e8m0;
  DecodeTables() {
    for (int code = 0; code < 16; ++code)
      e2m1[code] = decodeE2M1(static_cast<uint8_t>(code));
    for (int code = 0; code < 256; ++code)
      fp8[code] = decodeFp8E4M3(static_cast<uint8_t>(code));
    for (int code = 0; code < 256; ++code)
      e8m0[code] = decodeE8M0(static_cast<uint8_t>(code));
  }
};

const DecodeTables &decodeTables() {
  static const DecodeTables tables;
  return tables;
}

/// Routes of one expert, gathered from consecutive tiles of the list.
/// `slots` are the routes' positions among all listed (non-padding) entries,
/// the row index of the compact GEMM output.
struct ExpertSegment {
  int32_t expert;
  std::vector<int32_t> routes;
  std::vector<int64_t> slots;
};

std::vector<ExpertSegment> segmentsOf(const SortedRoutes &sorted) {
  std::vector<ExpertSegment> segments;
  int64_t slot = 0;
  for (int64_t tile = 0; tile < sorted.numTiles(); ++tile) {
    int32_t expert = sorted.tileExperts[tile];
    if (segments.empty() || segments.back().expert != expert)
      segments.push_back({expert, {}, {}});
    for (int64_t i = 0; i < sorted.mTile; ++i) {
      int32_t route = sorted.routeIds[tile * sorted.mTile + i];
      if (!sorted.isPadding(route)) {
        segments.back().routes.push_back(route);
        segments.back().slots.push_back(slot++);
      }
    }
  }
  return segments;
}

/// Weight rows handled by one work item.
constexpr int64_t kRowsPerItem = 64;
/// Weight rows whose dot products run side by side.
constexpr int64_t kRowGroup = 8;

/// kRowGroup dot products of `a` with the rows of a group whose values are
/// stored interleaved (element k of row j at b[k * kRowGroup + j]) and whose
/// scales are [kRowGroup, blocks]. Each row's sum follows the documented
/// order (exact-order sum inside each 32-element block, times the block
/// scale, blocks added in order); the rows are independent chains, which
/// lets the compiler use vector lanes without reassociating anything.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
// Wider vector lanes where the CPU has them; the arithmetic per lane is the
// same IEEE double operations in the same order, so every clone gives
// identical results (no FMA: the library builds with -ffp-contract=off).
__attribute__((target_clones("avx2", "default")))
#endif
void dotGroup(const double *a, const double *b, const double *scales,
              int64_t blocks, double *out) {
  double accumulators[kRowGroup] = {};
  for (int64_t block = 0; block < blocks; ++block) {
    double sums[kRowGroup] = {};
    const int64_t base = block * kBlockSize;
    for (int64_t i = base; i < base + kBlockSize; ++i) {
      const double value = a[i];
      const double *column = b + i * kRowGroup;
      for (int64_t j = 0; j < kRowGroup; ++j)
        sums[j] += value * column[j];
    }
    for (int64_t j = 0; j < kRowGroup; ++j)
      accumulators[j] += sums[j] * scales[j * blocks + block];
  }
  for (int64_t j = 0; j < kRowGroup; ++j)
    out[j] = accumulators[j];
}

/// Per-thread buffers of the GEMM.
struct GemmScratch {
  WeightScratch weights;
  std::vector<double> aRows;
  std::vector<double> bValues;
  std::vector<double> bScales;
  // Integer path (FP8 A x MXFP4 B).
  std::vector<int32_t> aIntegers;
  std::vector<double> aFactors;
  std::vector<double> accumulators;
};

/// One work item: rows [rowBegin, rowBegin + rowCount) of a segment's expert.
struct GemmItem {
  const ExpertSegment *segment;
  int64_t rowBegin;
  int64_t rowCount;
  ExpertRows b;
};

/// The general path: A and B decoded to double, dotGroup over groups of
/// kRowGroup rows (independent chains, each in the documented order; a short
/// last group is padded with zero rows whose results are dropped).
void doubleItem(const ActivationRows &a, int64_t routesPerARow,
                const GemmItem &work, int64_t depth, int64_t rows,
                GemmScratch &local, double *out) {
  const DecodeTables &tables = decodeTables();
  const ExpertSegment &segment = *work.segment;
  const int64_t count = static_cast<int64_t>(segment.routes.size());
  const int64_t blocks = depth / kBlockSize;
  local.aRows.resize(count * depth);
  for (int64_t m = 0; m < count; ++m)
    a.dequantizeRow(segment.routes[m] / routesPerARow,
                    local.aRows.data() + m * depth);
  const ExpertRows &b = work.b;
  const int64_t rowBytes = weightRowBytes(b.format, depth);
  local.bValues.resize(kRowGroup * depth);
  local.bScales.resize(kRowGroup * blocks);
  for (int64_t n0 = 0; n0 < work.rowCount; n0 += kRowGroup) {
    const int64_t group = std::min(kRowGroup, work.rowCount - n0);
    double *values = local.bValues.data();
    for (int64_t j = 0; j < kRowGroup; ++j) {
      if (j >= group) {
        for (int64_t k = 0; k < depth; ++k)
          values[k * kRowGroup + j] = 0.0;
        for (int64_t block = 0; block < blocks; ++block)
          local.bScales[j * blocks + block] = 0.0;
        continue;
      }
      const uint8_t *elements = b.elements + (n0 + j) * rowBytes;
      if (b.format == WeightFormat::Mxfp4) {
        for (int64_t k = 0; k < depth; k += 2) {
          uint8_t pair = elements[k / 2];
          values[k * kRowGroup + j] = tables.e2m1[pair & 0xF];
          values[(k + 1) * kRowGroup + j] = tables.e2m1[pair >> 4];
        }
      } else {
        for (int64_t k = 0; k < depth; ++k)
          values[k * kRowGroup + j] = tables.fp8[elements[k]];
      }
      for (int64_t block = 0; block < blocks; ++block)
        local.bScales[j * blocks + block] =
            tables.e8m0[b.scales[(n0 + j) * blocks + block]];
    }
    for (int64_t m = 0; m < count; ++m) {
      double results[kRowGroup];
      dotGroup(local.aRows.data() + m * depth, values, local.bScales.data(),
               blocks, results);
      double *target = out + segment.slots[m] * rows + work.rowBegin + n0;
      for (int64_t j = 0; j < group; ++j)
        target[j] = results[j];
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
/// Integer sums of one 32-element block of `a` with kRowGroup rows stored
/// interleaved (element i of row j at b[i * kRowGroup + j]).
void integerBlockSums(const int32_t *a, const int32_t *b, int32_t *sums) {
  for (int64_t j = 0; j < kRowGroup; ++j)
    sums[j] = 0;
  for (int64_t i = 0; i < kBlockSize; ++i) {
    const int32_t value = a[i];
    for (int64_t j = 0; j < kRowGroup; ++j)
      sums[j] += value * b[i * kRowGroup + j];
  }
}

/// FP8 A x MXFP4 B, bit-identical to doubleItem and faster. Every FP8 value
/// is an integer multiple of 2^-9 (|v| * 2^9 <= 229376) and every E2M1 value
/// one of 2^-1 (|v| * 2 <= 12), so a 32-element block sum is
/// 2^-10 * (an int32 below 2^27) * scaleA, exactly the value the double path
/// computes (its sums are exact too, see Stages.h). A block whose A scale is
/// 0xFF or that holds an FP8 NaN code gets a NaN factor, as in double.
void integerItem(const ActivationRows &a, int64_t routesPerARow,
                 const GemmItem &work, int64_t depth, int64_t rows,
                 GemmScratch &local, double *out) {
  static const struct IntegerTables {
    int32_t fp8[256];
    bool fp8IsNaN[256];
    int32_t e2m1[16];
    IntegerTables() {
      for (int code = 0; code < 256; ++code) {
        double value = decodeFp8E4M3(static_cast<uint8_t>(code));
        fp8IsNaN[code] = std::isnan(value);
        fp8[code] = fp8IsNaN[code] ? 0 : static_cast<int32_t>(std::ldexp(value, 9));
      }
      for (int code = 0; code < 16; ++code)
        e2m1[code] = static_cast<int32_t>(decodeE2M1(static_cast<uint8_t>(code)) * 2);
    }
  } tables;
  const DecodeTables &doubles = decodeTables();
  const ExpertSegment &segment = *work.segment;
  const int64_t count = static_cast<int64_t>(segment.routes.size());
  const int64_t blocks = depth / kBlockSize;
  local.aIntegers.resize(count * depth);
  local.aFactors.resize(count * blocks);
  for (int64_t m = 0; m < count; ++m) {
    int64_t row = segment.routes[m] / routesPerARow;
    const uint8_t *codes = a.codes + row * depth;
    const uint8_t *scales = a.scales + row * blocks;
    for (int64_t block = 0; block < blocks; ++block) {
      bool nan = false;
      for (int64_t i = block * kBlockSize; i < (block + 1) * kBlockSize; ++i) {
        local.aIntegers[m * depth + i] = tables.fp8[codes[i]];
        nan |= tables.fp8IsNaN[codes[i]];
      }
      double factor = std::ldexp(doubles.e8m0[scales[block]], -10);
      local.aFactors[m * blocks + block] =
          nan ? std::numeric_limits<double>::quiet_NaN() : factor;
    }
  }
  // Rows in groups of kRowGroup; B is decoded one 32-element block at a
  // time into a small interleaved tile that stays in L1, and each block's
  // integer sums are folded into per-(route, row) accumulators in block
  // order, the documented order.
  const ExpertRows &b = work.b;
  const int64_t rowBytes = depth / 2;
  local.accumulators.resize(count * kRowGroup);
  for (int64_t n0 = 0; n0 < work.rowCount; n0 += kRowGroup) {
    const int64_t group = std::min(kRowGroup, work.rowCount - n0);
    std::fill(local.accumulators.begin(), local.accumulators.end(), 0.0);
    for (int64_t block = 0; block < blocks; ++block) {
      int32_t tile[kBlockSize * kRowGroup];
      double blockScales[kRowGroup];
      for (int64_t j = 0; j < kRowGroup; ++j) {
        if (j >= group) {
          for (int64_t i = 0; i < kBlockSize; ++i)
            tile[i * kRowGroup + j] = 0;
          blockScales[j] = 0.0;
          continue;
        }
        const uint8_t *bytes =
            b.elements + (n0 + j) * rowBytes + block * (kBlockSize / 2);
        for (int64_t i = 0; i < kBlockSize / 2; ++i) {
          tile[(2 * i) * kRowGroup + j] = tables.e2m1[bytes[i] & 0xF];
          tile[(2 * i + 1) * kRowGroup + j] = tables.e2m1[bytes[i] >> 4];
        }
        blockScales[j] = doubles.e8m0[b.scales[(n0 + j) * blocks + block]];
      }
      for (int64_t m = 0; m < count; ++m) {
        int32_t sums[kRowGroup];
        integerBlockSums(local.aIntegers.data() + m * depth + block * kBlockSize,
                         tile, sums);
        const double factor = local.aFactors[m * blocks + block];
        double *accumulators = local.accumulators.data() + m * kRowGroup;
        for (int64_t j = 0; j < kRowGroup; ++j)
          accumulators[j] += static_cast<double>(sums[j]) * factor * blockScales[j];
      }
    }
    for (int64_t m = 0; m < count; ++m) {
      double *target = out + segment.slots[m] * rows + work.rowBegin + n0;
      for (int64_t j = 0; j < group; ++j)
        target[j] = local.accumulators[m * kRowGroup + j];
    }
  }
}

/// compact[i * weights.rows() + n] = A[route / routesPerARow] . B[expert, n]
/// for the i-th listed route of `sorted` (listedRoutes order), in the
/// accumulation order of Stages.h. Only listed rows are stored, so a sparse
/// receive buffer costs no memory here.
Status groupedGemm(const ActivationRows &a, int64_t routesPerARow,
                   const WeightSource &weights, const SortedRoutes &sorted,
                   std::vector<double> &compact, int numThreads,
                   const char *stage) {
  const int64_t depth = weights.depth();
  const int64_t rows = weights.rows();
  std::string prefix = std::string(stage) + ": ";
  if (depth <= 0 || depth % kBlockSize != 0)
    return Status::error(prefix + "K = " + std::to_string(depth) +
                         " must be a positive multiple of 32");
  if (a.depth != depth)
    return Status::error(prefix + "A has K = " + std::to_string(a.depth) +
                         " but the weights have K = " + std::to_string(depth));
  if (routesPerARow <= 0)
    return Status::error(prefix + "routes per A row must be positive");
  if (Status status = validateSortedRoutes(sorted, weights.numExperts()); !status)
    return Status::error(prefix + status.message());
  for (int32_t route : sorted.routeIds)
    if (!sorted.isPadding(route) && route / routesPerARow >= a.rows)
      return Status::error(prefix + "route " + std::to_string(route) +
                           " reads A row " +
                           std::to_string(route / routesPerARow) +
                           " but A has " + std::to_string(a.rows) + " rows");

  std::vector<ExpertSegment> segments = segmentsOf(sorted);
  int64_t listedCount = 0;
  for (const ExpertSegment &segment : segments)
    listedCount += static_cast<int64_t>(segment.routes.size());
  compact.assign(static_cast<size_t>(listedCount * rows), 0.0);
  double *out = compact.data();
  const int64_t chunks = (rows + kRowsPerItem - 1) / kRowsPerItem;
  std::vector<GemmScratch> scratch(resolveThreadCount(numThreads));

  parallelFor(
      static_cast<int64_t>(segments.size()) * chunks, numThreads,
      [&](int worker, int64_t item) {
        const ExpertSegment &segment = segments[item / chunks];
        if (segment.routes.empty())
          return;
        int64_t rowBegin = (item % chunks) * kRowsPerItem;
        int64_t rowCount = std::min(kRowsPerItem, rows - rowBegin);
        GemmScratch &local = scratch[worker];
        GemmItem work{&segment, rowBegin, rowCount,
                      weights.expertRows(segment.expert, rowBegin, rowCount,
                                         local.weights)};
        if (a.kind == ActivationRows::Kind::Fp8 &&
            work.b.format == WeightFormat::Mxfp4)
          integerItem(a, routesPerARow, work, depth, rows, local, out);
        else
          doubleItem(a, routesPerARow, work, depth, rows, local, out);
      });
  return Status();
}

/// Largest |gatedActivation - act| over the corners of the box
/// [gate +- dGate] x [up +- dUp].
double activationDeviation(double gate, double up, double dGate, double dUp,
                           double act, const GluConfig &glu) {
  double worst = 0.0;
  for (double sg : {-1.0, 1.0})
    for (double su : {-1.0, 1.0})
      worst = std::max(worst, std::fabs(gatedActivation(glu, gate + sg * dGate,
                                                        up + su * dUp) -
                                        act));
  return worst;
}

} // namespace

/// The listed (non-padding) route ids in list order.
std::vector<int32_t> listedRoutes(const SortedRoutes &sorted) {
  std::vector<int32_t> listed;
  for (int32_t route : sorted.routeIds)
    if (!sorted.isPadding(route))
      listed.push_back(route);
  return listed;
}

/// The expert of each listed route, in listedRoutes order.
std::vector<int32_t> listedExperts(const SortedRoutes &sorted) {
  std::vector<int32_t> experts;
  for (size_t i = 0; i < sorted.routeIds.size(); ++i)
    if (!sorted.isPadding(sorted.routeIds[i]))
      experts.push_back(sorted.tileExperts[i / sorted.mTile]);
  return experts;
}

/// Euclidean norm of each of `expert`'s weight rows (dequantised).
std::vector<double> weightRowNorms(const WeightSource &weights, int32_t expert) {
  const int64_t rows = weights.rows(), depth = weights.depth();
  WeightScratch scratch;
  const ExpertRows block = weights.expertRows(expert, 0, rows, scratch);
  const int64_t rowBytes = weightRowBytes(block.format, depth);
  std::vector<double> norms(static_cast<size_t>(rows)), row(static_cast<size_t>(depth));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *elements = block.elements + r * rowBytes;
    const uint8_t *scales = block.scales + r * (depth / kBlockSize);
    if (block.format == WeightFormat::Mxfp4)
      dequantizeMxfp4Row(elements, scales, depth, row.data());
    else
      dequantizeFp8Row(elements, scales, depth, row.data());
    double sum = 0.0;
    for (double value : row)
      sum += value * value;
    norms[static_cast<size_t>(r)] = std::sqrt(sum);
  }
  return norms;
}

Status runW13Stage(const ActivationRows &a, int64_t routesPerARow,
                   const WeightSource &w13, const SortedRoutes &sorted,
                   const GluConfig &glu, const W13Outputs &outputs,
                   int numThreads) {
  const int64_t twoI = w13.rows();
  if (twoI <= 0 || twoI % 2 != 0)
    return Status::error("W13 stage: W13 rows (2I) = " + std::to_string(twoI) +
                         " must be positive and even");
  const int64_t intermediate = twoI / 2;
  if (glu.interleave > 0 && glu.interleave < intermediate &&
      intermediate % glu.interleave != 0)
    return Status::error("W13 stage: gate/up interleave " +
                         std::to_string(glu.interleave) + " does not divide I = " +
                         std::to_string(intermediate));
  if (!outputs.intermediateCodes != !outputs.intermediateScales)
    return Status::error("W13 stage: intermediate codes and scales must be "
                         "requested together");
  if (outputs.intermediateCodes && intermediate % kBlockSize != 0)
    return Status::error("W13 stage: I = " + std::to_string(intermediate) +
                         " must be a multiple of 32 to quantise the intermediate");
  std::vector<double> preActivation; // [listed, 2I]
  if (Status status = groupedGemm(a, routesPerARow, w13, sorted, preActivation,
                                  numThreads, "W13 stage");
      !status)
    return status;

  std::vector<int32_t> listed = listedRoutes(sorted);
  std::vector<int32_t> experts;
  if (glu.bias || outputs.activationErrorBound)
    experts = listedExperts(sorted);
  // For the error bound: the norms of each listed route's A row and of the
  // weight rows of every expert in use.
  const int64_t depth = w13.depth();
  std::vector<double> aNorms;
  std::vector<std::vector<double>> wNorms;
  if (outputs.activationErrorBound) {
    aNorms.resize(listed.size());
    parallelFor(static_cast<int64_t>(listed.size()), numThreads,
                [&](int, int64_t item) {
                  std::vector<double> row(static_cast<size_t>(depth));
                  a.dequantizeRow(listed[item] / routesPerARow, row.data());
                  double sum = 0.0;
                  for (double v : row)
                    sum += v * v;
                  aNorms[static_cast<size_t>(item)] = std::sqrt(sum);
                });
    wNorms.resize(static_cast<size_t>(w13.numExperts()));
    std::vector<int32_t> used(experts.begin(), experts.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    parallelFor(static_cast<int64_t>(used.size()), numThreads,
                [&](int, int64_t i) {
                  wNorms[static_cast<size_t>(used[i])] =
                      weightRowNorms(w13, used[i]);
                });
  }
  // FP32 unit roundoff and the partial sums an FP32 accumulator adds (one
  // per 32-element block at most: every scaled MFMA covers whole blocks).
  const double unit = 0x1p-24, steps = double(depth / kBlockSize);
  parallelFor(static_cast<int64_t>(listed.size()), numThreads,
              [&](int, int64_t item) {
                int64_t route = listed[item];
                const double *h = preActivation.data() + item * twoI;
                // AITER adds bias1 to the FP32 accumulators before the clamp;
                // without a bias h is used as is (adding +0 would turn a -0
                // into +0).
                std::vector<double> biased;
                if (glu.bias) {
                  const float *bias = glu.bias + experts[item] * twoI;
                  biased.assign(h, h + twoI);
                  for (int64_t j = 0; j < intermediate; ++j) {
                    biased[gateRowOf(glu, intermediate, j)] += bias[j];
                    biased[upRowOf(glu, intermediate, j)] += bias[intermediate + j];
                  }
                  h = biased.data();
                }
                if (outputs.preActivation)
                  for (int64_t n = 0; n < twoI; ++n)
                    outputs.preActivation[route * twoI + n] = roundToFloat(h[n]);
                std::vector<double> act(intermediate);
                for (int64_t j = 0; j < intermediate; ++j)
                  act[j] = gatedActivation(glu,
                                           h[gateRowOf(glu, intermediate, j)],
                                           h[upRowOf(glu, intermediate, j)]);
                if (outputs.activation)
                  std::copy(act.begin(), act.end(),
                            outputs.activation + route * intermediate);
                if (outputs.activationErrorBound) {
                  const std::vector<double> &norms =
                      wNorms[static_cast<size_t>(experts[item])];
                  const double aNorm = aNorms[static_cast<size_t>(item)];
                  for (int64_t j = 0; j < intermediate; ++j) {
                    const int64_t gRow = gateRowOf(glu, intermediate, j);
                    const int64_t uRow = upRowOf(glu, intermediate, j);
                    const double g = h[gRow], u = h[uRow];
                    const double dGate = steps * unit * aNorm * norms[gRow] +
                                         (glu.bias ? unit * std::fabs(g) : 0.0);
                    const double dUp = steps * unit * aNorm * norms[uRow] +
                                       (glu.bias ? unit * std::fabs(u) : 0.0);
                    outputs.activationErrorBound[route * intermediate + j] =
                        activationDeviation(g, u, dGate, dUp, act[j], glu) +
                        0x1p-19 * std::fabs(act[j]);
                  }
                }
                if (outputs.intermediateCodes && outputs.intermediateScales)
                  quantizeActivationRow(
                      outputs.intermediateFormat, act.data(), intermediate,
                      outputs.intermediateCodes +
                          route * activationRowBytes(outputs.intermediateFormat,
                                                     intermediate),
                      outputs.intermediateScales +
                          route * (intermediate / kBlockSize));
              });
  return Status();
}

Status runW13Stage(const uint8_t *aCodes, const uint8_t *aScales,
                   int64_t numTokens, int64_t topk, const uint8_t *bPacked,
                   const uint8_t *bScales, int64_t numExperts, int64_t hidden,
                   int64_t intermediate, const SortedRoutes &sorted,
                   const GluConfig &glu, const W13Outputs &outputs,
                   int numThreads) {
  if (hidden % kBlockSize != 0 || hidden <= 0)
    return Status::error("W13 stage: H = " + std::to_string(hidden) +
                         " must be a positive multiple of 32");
  if (topk <= 0 || sorted.numRoutes != numTokens * topk)
    return Status::error("W13 stage: sorted routes cover " +
                         std::to_string(sorted.numRoutes) + " routes, expected " +
                         std::to_string(numTokens) + " tokens x topk " +
                         std::to_string(topk));
  DenseWeights weights(WeightFormat::Mxfp4, bPacked, bScales, numExperts,
                       2 * intermediate, hidden);
  return runW13Stage(ActivationRows::fp8(aCodes, aScales, numTokens, hidden),
                     topk, weights, sorted, glu, outputs, numThreads);
}

Status runW2Stage(const ActivationRows &a, const WeightSource &w2,
                  const SortedRoutes &sorted, double *out, int numThreads,
                  const float *bias) {
  std::vector<double> compact;
  if (Status status = groupedGemm(a, 1, w2, sorted, compact, numThreads, "W2 stage");
      !status)
    return status;
  const int64_t hidden = w2.rows();
  std::vector<int32_t> listed = listedRoutes(sorted);
  std::vector<int32_t> experts;
  if (bias)
    experts = listedExperts(sorted);
  for (size_t i = 0; i < listed.size(); ++i) {
    double *row = out + static_cast<int64_t>(listed[i]) * hidden;
    std::copy_n(compact.data() + i * hidden, hidden, row);
    if (bias) {
      const float *expertBias = bias + experts[i] * hidden;
      for (int64_t n = 0; n < hidden; ++n)
        row[n] += expertBias[n];
    }
  }
  return Status();
}

Status runW2Stage(const uint8_t *aCodes, const uint8_t *aScales,
                  const uint8_t *bPacked, const uint8_t *bScales,
                  int64_t numExperts, int64_t hidden, int64_t intermediate,
                  const SortedRoutes &sorted, float *out, int numThreads) {
  if (intermediate % kBlockSize != 0 || intermediate <= 0)
    return Status::error("W2 stage: I = " + std::to_string(intermediate) +
                         " must be a positive multiple of 32");
  DenseWeights weights(WeightFormat::Mxfp4, bPacked, bScales, numExperts,
                       hidden, intermediate);
  std::vector<double> compact;
  if (Status status = groupedGemm(
          ActivationRows::fp8(aCodes, aScales, sorted.numRoutes, intermediate), 1,
          weights, sorted, compact, numThreads, "W2 stage");
      !status)
    return status;
  std::vector<int32_t> listed = listedRoutes(sorted);
  for (size_t i = 0; i < listed.size(); ++i)
    for (int64_t n = 0; n < hidden; ++n)
      out[static_cast<int64_t>(listed[i]) * hidden + n] =
          roundToFloat(compact[i * hidden + n]);
  return Status();
}

void combineRoutes(const double *routeRows, const int32_t *topkIds,
                   const float *topkWeights, int64_t numTokens, int64_t topk,
                   int64_t numExperts, int64_t hidden, double *out) {
  for (int64_t token = 0; token < numTokens; ++token) {
    double *row = out + token * hidden;
    std::fill(row, row + hidden, 0.0);
    for (int64_t k = 0; k < topk; ++k) {
      int64_t route = token * topk + k;
      if (!isValidExpert(topkIds[route], numExperts))
        continue;
      double weight = topkWeights[route];
      const double *source = routeRows + route * hidden;
      for (int64_t n = 0; n < hidden; ++n)
        row[n] += weight * source[n];
    }
  }
}

} // namespace moec::ref
