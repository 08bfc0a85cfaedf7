//===- weights.cpp - host-side weight preparation ---------------*- C++ -*-===//
//
// docs/weight-preparation.md is the contract: the kernels' layout, the
// checkpoint layout, the inverse of every AITER shuffle (with the AITER file
// and commit it was read from) and the FP8 block-scale conversion.
//
//===----------------------------------------------------------------------===//
#include "moec/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace moec::rt {
namespace {

constexpr int64_t kBlock = 32;
/// E8M0 1.0: the scale byte of padding (zero codes times a finite scale are
/// exactly zero; only 0xFF would make them NaN).
constexpr uint8_t kPaddingScale = 127;
constexpr double kE4M3Max = 448.0;
constexpr double kAmaxFloor = static_cast<double>(1e-4f);

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUp(int64_t a, int64_t b) { return ceilDiv(a, b) * b; }

//===----------------------------------------------------------------------===//
// Tensor checks
//===----------------------------------------------------------------------===//

bool isPackedFp4(std::string_view dtype) {
  return dtype == "uint8" || dtype == "float4_e2m1fn_x2";
}
bool isE8M0(std::string_view dtype) {
  return dtype == "float8_e8m0fnu" || dtype == "uint8";
}
bool isFp8(std::string_view dtype) { return dtype == "float8_e4m3fn"; }
bool isFloat32(std::string_view dtype) { return dtype == "float32"; }

std::string dimsText(const int64_t *dims, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i)
    text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

std::string describe(const TensorRef &tensor) {
  std::string dtype(tensor.dtype.empty() ? "(no dtype)" : tensor.dtype);
  if (tensor.ndim > 4)
    return dtype + " with " + std::to_string(tensor.ndim) + " dimensions";
  return dtype + " " + dimsText(tensor.shape.data(), tensor.ndim);
}

bool hasShape(const TensorRef &tensor, std::initializer_list<int64_t> dims) {
  if (tensor.ndim != dims.size())
    return false;
  size_t i = 0;
  for (int64_t d : dims)
    if (tensor.shape[i++] != d)
      return false;
  return true;
}

/// One-line refusal: "<name>: expected <what> <shape> (<meaning>), got ...".
bool refuse(std::string &error, const char *name, const std::string &expected,
            const TensorRef &got) {
  error = std::string(name) + ": expected " + expected + ", got " + describe(got);
  return false;
}

bool checkData(std::string &error, const char *name, const TensorRef &tensor) {
  if (tensor.data)
    return true;
  error = std::string(name) + ": null data pointer";
  return false;
}

/// Checks dtype (by predicate) and exact shape.
template <typename DtypeOk>
bool expect(std::string &error, const char *name, const TensorRef &tensor,
            DtypeOk dtypeOk, const char *dtypeText,
            std::initializer_list<int64_t> dims, const char *meaning) {
  if (!checkData(error, name, tensor))
    return false;
  if (dtypeOk(tensor.dtype) && hasShape(tensor, dims))
    return true;
  std::vector<int64_t> d(dims);
  return refuse(error, name,
                std::string(dtypeText) + " " + dimsText(d.data(), d.size()) +
                    " (" + meaning + ")",
                tensor);
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// Runs body(begin, end) over [0, count) split into contiguous ranges, one
/// per thread (the calling thread takes the first). False if any range
/// threw (its message in `error`).
template <typename Body>
bool parallelFor(int64_t count, unsigned threads, Body &&body,
                 std::string &error) {
  unsigned n = threads ? threads : std::thread::hardware_concurrency();
  n = std::max(1u, n);
  if (int64_t(n) > count)
    n = unsigned(std::max<int64_t>(1, count));
  std::mutex mutex;
  bool ok = true;
  auto run = [&](int64_t begin, int64_t end) {
    try {
      body(begin, end);
    } catch (const std::exception &e) {
      std::lock_guard<std::mutex> lock(mutex);
      if (ok)
        error = std::string("weight preparation: ") + e.what();
      ok = false;
    }
  };
  const int64_t chunk = ceilDiv(count, n);
  std::vector<std::thread> pool;
  pool.reserve(n);
  for (unsigned t = 1; t < n; ++t) {
    int64_t begin = std::min(count, t * chunk), end = std::min(count, begin + chunk);
    try {
      pool.emplace_back(run, begin, end);
    } catch (...) {
      run(begin, end); // no thread to be had: do it here
    }
  }
  run(0, std::min(count, chunk));
  for (std::thread &thread : pool)
    thread.join();
  return ok;
}

//===----------------------------------------------------------------------===//
// Gate/up row order
//===----------------------------------------------------------------------===//

/// Logical (gate or up, j) of physical W13 row `row` of [2I, ...] with
/// interleave G (0 or G >= I: gate rows [0, I) then up rows [I, 2I); else
/// blocks of G gate rows then G up rows). Inverse of ref::gateRowOf and
/// ref::upRowOf.
void logicalRow(int64_t row, int64_t intermediate, int64_t interleave,
                bool &up, int64_t &j) {
  if (interleave <= 0 || interleave >= intermediate) {
    up = row >= intermediate;
    j = up ? row - intermediate : row;
    return;
  }
  int64_t block = row / (2 * interleave), rest = row % (2 * interleave);
  up = rest >= interleave;
  j = block * interleave + (up ? rest - interleave : rest);
}

//===----------------------------------------------------------------------===//
// AITER shuffles (docs/weight-preparation.md)
//===----------------------------------------------------------------------===//

/// One AITER-shuffled matrix of `experts` x [rows, rowBytes] bytes with
/// its shuffled E8M0 scales ([experts x rows, scaleColsPadded]).
struct ShuffledMatrix {
  const uint8_t *data = nullptr;
  const uint8_t *scale = nullptr;
  int64_t rows = 0, rowBytes = 0, scaleCols = 0, scaleColsPadded = 0;
  /// 16-byte chunks per K tile: 2 for shuffle_weight(w, (16, 16)), 4 for
  /// shuffle_weight_a16w4 (KLane 4 x KPack 16).
  int64_t kChunks = 0;
};

/// Reads pre-shuffle row `row` of expert `expert` (rowBytes bytes) and its
/// scaleCols scale bytes. Weight: tiles of 16 rows x 16 kChunks bytes in
/// (row tile, K tile) order, each stored as [chunk][row][16 bytes]. Scales:
/// global row r = a 32 + p 16 + l, column c = b 8 + q 4 + t, stored at
/// (((((a C/8 + b) 4 + t) 16 + l) 2 + q) 2 + p).
void gatherShuffledRow(const ShuffledMatrix &m, int64_t expert, int64_t row,
                       uint8_t *outRow, uint8_t *outScale) {
  const uint8_t *base = m.data + expert * m.rows * m.rowBytes;
  const int64_t rowTile = row / 16, lane = row % 16;
  const int64_t kTiles = m.rowBytes / (16 * m.kChunks);
  const uint8_t *tileRow = base + rowTile * kTiles * m.kChunks * 256 + lane * 16;
  const int64_t chunks = m.rowBytes / 16;
  for (int64_t c = 0; c < chunks; ++c)
    std::memcpy(outRow + 16 * c, tileRow + c * 256, 16);

  const int64_t r = expert * m.rows + row;
  const int64_t a = r / 32, p = (r / 16) % 2, l = r % 16;
  const uint8_t *scaleBase = m.scale + a * 32 * m.scaleColsPadded;
  for (int64_t c = 0; c < m.scaleCols; ++c) {
    const int64_t b = c / 8, q = (c / 4) % 2, t = c % 4;
    outScale[c] = scaleBase[(((b * 4 + t) * 16 + l) * 2 + q) * 2 + p];
  }
}

/// Accepted shapes of an AITER-shuffled scale: [E, N, Cp], [E N, Cp] or
/// e8m0_shuffle's [roundup(E N, 256), Cp], Cp = roundup(K / 32, 8).
bool expectShuffledScale(std::string &error, const char *name,
                         const TensorRef &tensor, int64_t experts, int64_t rows,
                         int64_t scaleCols, const char *meaning) {
  if (!checkData(error, name, tensor))
    return false;
  const int64_t padded = roundUp(scaleCols, 8);
  const int64_t all = experts * rows;
  if (isE8M0(tensor.dtype) &&
      (hasShape(tensor, {experts, rows, padded}) || hasShape(tensor, {all, padded}) ||
       hasShape(tensor, {roundUp(all, 256), padded})))
    return true;
  int64_t dims[3] = {experts, rows, padded};
  int64_t flat[2] = {all, padded};
  return refuse(error, name,
                "float8_e8m0fnu or uint8 " + dimsText(dims, 3) + " or " +
                    dimsText(flat, 2) + " (" + meaning +
                    ", columns padded to a multiple of 8; rows may be padded "
                    "to a multiple of 256)",
                tensor);
}

//===----------------------------------------------------------------------===//
// FP8 E4M3FN and the activation recipe
//===----------------------------------------------------------------------===//

/// Smallest k with 448 x 2^k >= m (m > 0, finite), exactly.
int ceilLog2Over448(double m) {
  int k = std::ilogb(m) - 8;
  while (std::ldexp(kE4M3Max, k) < m)
    ++k;
  while (std::ldexp(kE4M3Max, k - 1) >= m)
    --k;
  return k;
}

struct Fp8Table {
  double values[256];
  Fp8Table() {
    for (int c = 0; c < 256; ++c)
      values[c] = decodeFp8E4M3(uint8_t(c));
  }
};
const Fp8Table &fp8Table() {
  static const Fp8Table table;
  return table;
}

/// Quantises one block of 32; returns its scale byte.
uint8_t quantizeBlock(const double *values, uint8_t *codes) {
  double amax = 0.0;
  bool finite = true;
  for (int64_t i = 0; i < kBlock; ++i) {
    double magnitude = std::fabs(values[i]);
    if (!std::isfinite(magnitude))
      finite = false;
    else
      amax = std::max(amax, magnitude);
  }
  if (!finite) {
    std::memset(codes, 0x7F, kBlock);
    return 0xFF;
  }
  int code = std::clamp(ceilLog2Over448(std::max(amax, kAmaxFloor)) + 127, 1, 254);
  const int exponent = code - 127;
  for (int64_t i = 0; i < kBlock; ++i)
    codes[i] = encodeFp8E4M3(std::ldexp(values[i], -exponent));
  return uint8_t(code);
}

//===----------------------------------------------------------------------===//
// Shared expert (FP8) sources
//===----------------------------------------------------------------------===//

/// One FP8 matrix of an input: codes [rows, cols] and either E8M0 1x32
/// scales or FP32 128x128 block scales.
struct Fp8Matrix {
  const uint8_t *codes = nullptr;
  const uint8_t *scale = nullptr;  ///< 1x32
  const float *blockScale = nullptr; ///< 128x128
  int64_t rows = 0, cols = 0;
};

bool expectFp8Matrix(std::string &error, const char *name, const char *scaleName,
                     const TensorRef &codes, const TensorRef &scale,
                     int64_t rows, int64_t cols, const char *meaning,
                     Fp8Matrix &out) {
  if (!expect(error, name, codes, isFp8, "float8_e4m3fn", {rows, cols}, meaning))
    return false;
  if (!checkData(error, scaleName, scale))
    return false;
  out.codes = static_cast<const uint8_t *>(codes.data);
  out.rows = rows;
  out.cols = cols;
  if (isFloat32(scale.dtype)) {
    const int64_t br = ceilDiv(rows, 128), bc = ceilDiv(cols, 128);
    if (!hasShape(scale, {br, bc})) {
      int64_t dims[2] = {br, bc};
      return refuse(error, scaleName,
                    "float32 " + dimsText(dims, 2) +
                        " (128x128 block scales of " + name + ")",
                    scale);
    }
    out.blockScale = static_cast<const float *>(scale.data);
    return true;
  }
  if (isE8M0(scale.dtype) && hasShape(scale, {rows, cols / kBlock})) {
    out.scale = static_cast<const uint8_t *>(scale.data);
    return true;
  }
  int64_t dims[2] = {rows, cols / kBlock};
  int64_t blocks[2] = {ceilDiv(rows, 128), ceilDiv(cols, 128)};
  return refuse(error, scaleName,
                "float8_e8m0fnu or uint8 " + dimsText(dims, 2) +
                    " (1x32 scales of " + name + ") or float32 " +
                    dimsText(blocks, 2) + " (128x128 block scales)",
                scale);
}

/// Writes row `row` of `m` into `codes` / `scales` (cols / 32 bytes),
/// converting block scales; accumulates into `report`.
void copyFp8Row(const Fp8Matrix &m, int64_t row, uint8_t *codes,
                uint8_t *scales, std::vector<double> &values,
                ConversionReport &report) {
  const uint8_t *src = m.codes + row * m.cols;
  if (m.scale) {
    std::memcpy(codes, src, size_t(m.cols));
    std::memcpy(scales, m.scale + row * (m.cols / kBlock), size_t(m.cols / kBlock));
    return;
  }
  const Fp8Table &table = fp8Table();
  const float *blockRow = m.blockScale + (row / 128) * ceilDiv(m.cols, 128);
  values.resize(kBlock);
  for (int64_t b = 0; b < m.cols / kBlock; ++b) {
    const double blockScale = blockRow[(b * kBlock) / 128];
    double amax = 0.0;
    for (int64_t i = 0; i < kBlock; ++i) {
      // Exact: a 4-bit significand times a 24-bit one fits a double.
      values[i] = table.values[src[b * kBlock + i]] * blockScale;
      amax = std::max(amax, std::fabs(values[i]));
    }
    uint8_t *blockCodes = codes + b * kBlock;
    scales[b] = quantizeBlock(values.data(), blockCodes);
    if (scales[b] == 0xFF)
      continue;
    const double scale = std::ldexp(1.0, int(scales[b]) - 127);
    for (int64_t i = 0; i < kBlock; ++i) {
      const double requantised = table.values[blockCodes[i]] * scale;
      const double difference = std::fabs(requantised - values[i]);
      if (difference != 0.0) {
        ++report.inexactElements;
        report.maxRelativeError =
            std::max(report.maxRelativeError, amax > 0 ? difference / amax : 0.0);
      }
    }
    report.convertedElements += kBlock;
  }
}

uint64_t nonPowerOfTwo(const Fp8Matrix &m) {
  if (!m.blockScale)
    return 0;
  uint64_t count = 0;
  const int64_t total = ceilDiv(m.rows, 128) * ceilDiv(m.cols, 128);
  for (int64_t i = 0; i < total; ++i) {
    int exponent = 0;
    const double mantissa = std::frexp(double(m.blockScale[i]), &exponent);
    if (mantissa != 0.5)
      ++count;
  }
  return count;
}

} // namespace

//===----------------------------------------------------------------------===//
// Public functions
//===----------------------------------------------------------------------===//

uint8_t encodeFp8E4M3(double x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x))
    return sign | 0x7F;
  const double a = std::fabs(x);
  if (a > kE4M3Max) // (448, 464] rounds to 448; above saturates
    return sign | 0x7E;
  if (a < std::ldexp(1.0, -6)) // subnormal quantum 2^-9; 8 is the smallest normal
    return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  const int exponent = std::ilogb(a);
  const int q = int(std::nearbyint(std::ldexp(a, 3 - exponent))); // [8, 16]
  const int code = ((exponent + 7) << 3) + (q - 8);
  return sign | uint8_t(std::min(code, 0x7E));
}

double decodeFp8E4M3(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 0x7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (e == 0xF && m == 0x7)
    return std::numeric_limits<double>::quiet_NaN();
  if (e == 0)
    return sign * std::ldexp(double(m), -9);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

void quantizeFp8Row1x32(const double *values, int64_t k, uint8_t *codes,
                        uint8_t *scales) {
  for (int64_t b = 0; b < k / kBlock; ++b)
    scales[b] = quantizeBlock(values + b * kBlock, codes + b * kBlock);
}

bool checkWeightLayout(const WeightLayout &layout, std::string &error) {
  const auto bad = [&](const std::string &what) {
    error = "weight layout: " + what;
    return false;
  };
  if (layout.hidden == 0 || layout.hidden % kBlock)
    return bad("hidden " + std::to_string(layout.hidden) +
               " is not a positive multiple of 32");
  if (layout.intermediate == 0 || layout.intermediate % kBlock)
    return bad("intermediate " + std::to_string(layout.intermediate) +
               " is not a positive multiple of 32");
  if (layout.experts == 0)
    return bad("no experts");
  const uint32_t g = layout.gateUpInterleave;
  if (g != 0 && g < layout.intermediate && layout.intermediate % g)
    return bad("gate_up_interleave " + std::to_string(g) +
               " does not divide intermediate " +
               std::to_string(layout.intermediate));
  return true;
}

WeightSizes weightSizes(const WeightLayout &layout) {
  const uint64_t E = layout.experts, H = layout.hidden, I = layout.intermediate;
  WeightSizes sizes;
  sizes.w13 = E * 2 * I * H / 2;
  sizes.w13Scale = E * 2 * I * H / 32;
  sizes.w2 = E * H * I / 2;
  sizes.w2Scale = E * H * I / 32;
  if (layout.sharedExpert) {
    sizes.sharedW13 = 2 * I * H;
    sizes.sharedW13Scale = 2 * I * H / 32;
    sizes.sharedW2 = H * I;
    sizes.sharedW2Scale = H * I / 32;
  }
  return sizes;
}

bool prepareExpertWeights(const WeightLayout &layout, WeightSource source,
                          const ExpertWeightInputs &in,
                          const PreparedWeights &out, unsigned threads,
                          std::string &error) {
  if (!checkWeightLayout(layout, error))
    return false;
  if (!out.w13 || !out.w13Scale || !out.w2 || !out.w2Scale) {
    error = "prepare expert weights: null output buffer";
    return false;
  }
  const int64_t E = layout.experts, H = layout.hidden, I = layout.intermediate;

  // W2 fixes the checkpoint's intermediate I' (<= I, a multiple of 32).
  if (!checkData(error, "w2", in.w2))
    return false;
  const int64_t isrc = in.w2.ndim == 3 ? 2 * in.w2.shape[2] : -1;
  if (!isPackedFp4(in.w2.dtype) || in.w2.ndim != 3 || in.w2.shape[0] != E ||
      in.w2.shape[1] != H || isrc <= 0 || isrc > I || isrc % kBlock) {
    int64_t dims[3] = {E, H, I / 2};
    return refuse(error, "w2",
                  "uint8 " + dimsText(dims, 3) +
                      " ([E, H, I/2] E2M1 pairs; a checkpoint I' < I, a "
                      "multiple of 32, is padded)",
                  in.w2);
  }
  const bool splitGateUp = in.up.data || in.up.ndim;
  const bool aiter = source != WeightSource::Checkpoint;
  if (splitGateUp && aiter) {
    error = "up: separate gate and up tensors are accepted for the checkpoint "
            "source only";
    return false;
  }

  // AITER: the shuffles' divisibility (K tiles of 16 kChunks bytes, row
  // tiles of 16, scale row blocks of 32).
  const int64_t kChunks = source == WeightSource::AiterPreshuffle16x16 ? 2 : 4;
  const bool sourceInterleaved = source == WeightSource::Aiter;
  if (aiter) {
    const int64_t kTile = 16 * kChunks;
    if ((H / 2) % kTile || (isrc / 2) % kTile) {
      error = "w2: the AITER shuffle needs H/2 and I'/2 to be multiples of " +
              std::to_string(kTile) + " bytes (H " + std::to_string(H) +
              ", I' " + std::to_string(isrc) + ")";
      return false;
    }
  }

  const char *w13Meaning = "[E, 2I', H/2] E2M1 pairs, gate rows then up rows";
  if (splitGateUp) {
    if (!expect(error, "w13", in.w13, isPackedFp4, "uint8", {E, isrc, H / 2},
                "[E, I', H/2] gate rows, with up given separately") ||
        !expect(error, "w13_scale", in.w13Scale, isE8M0, "float8_e8m0fnu or uint8",
                {E, isrc, H / kBlock}, "[E, I', H/32] E8M0 of the gate rows") ||
        !expect(error, "up", in.up, isPackedFp4, "uint8", {E, isrc, H / 2},
                "[E, I', H/2] up rows") ||
        !expect(error, "up_scale", in.upScale, isE8M0, "float8_e8m0fnu or uint8",
                {E, isrc, H / kBlock}, "[E, I', H/32] E8M0 of the up rows"))
      return false;
  } else {
    if (!expect(error, "w13", in.w13, isPackedFp4, "uint8", {E, 2 * isrc, H / 2},
                aiter ? "[E, 2I', H/2] as AITER shuffled it" : w13Meaning))
      return false;
    if (aiter) {
      if (!expectShuffledScale(error, "w13_scale", in.w13Scale, E, 2 * isrc,
                               H / kBlock, "AITER-shuffled [E, 2I', H/32] E8M0"))
        return false;
    } else if (!expect(error, "w13_scale", in.w13Scale, isE8M0,
                       "float8_e8m0fnu or uint8", {E, 2 * isrc, H / kBlock},
                       "[E, 2I', H/32] E8M0, gate rows then up rows")) {
      return false;
    }
  }
  if (aiter) {
    if (!expectShuffledScale(error, "w2_scale", in.w2Scale, E, H, isrc / kBlock,
                             "AITER-shuffled [E, H, I'/32] E8M0"))
      return false;
  } else if (!expect(error, "w2_scale", in.w2Scale, isE8M0,
                     "float8_e8m0fnu or uint8", {E, H, isrc / kBlock},
                     "[E, H, I'/32] E8M0")) {
    return false;
  }

  // Sources.
  const auto *w13 = static_cast<const uint8_t *>(in.w13.data);
  const auto *w13Scale = static_cast<const uint8_t *>(in.w13Scale.data);
  const uint8_t *up = splitGateUp ? static_cast<const uint8_t *>(in.up.data) : w13;
  const uint8_t *upScale =
      splitGateUp ? static_cast<const uint8_t *>(in.upScale.data) : w13Scale;
  const int64_t halfRows = splitGateUp ? isrc : 2 * isrc; // rows per expert
  const int64_t upOffset = splitGateUp ? 0 : isrc;
  ShuffledMatrix shuffled13, shuffled2;
  if (aiter) {
    shuffled13 = {w13, w13Scale, 2 * isrc, H / 2, H / kBlock,
                  roundUp(H / kBlock, 8), kChunks};
    shuffled2 = {static_cast<const uint8_t *>(in.w2.data),
                 static_cast<const uint8_t *>(in.w2Scale.data), H, isrc / 2,
                 isrc / kBlock, roundUp(isrc / kBlock, 8), kChunks};
  }

  auto *outW13 = static_cast<uint8_t *>(out.w13);
  auto *outW13Scale = static_cast<uint8_t *>(out.w13Scale);
  auto *outW2 = static_cast<uint8_t *>(out.w2);
  auto *outW2Scale = static_cast<uint8_t *>(out.w2Scale);
  const int64_t G = layout.gateUpInterleave;
  const int64_t w13Rows = E * 2 * I, w2Rows = E * H;
  const int64_t rowBytes13 = H / 2, scales13 = H / kBlock;

  auto w13Row = [&](int64_t index) {
    const int64_t e = index / (2 * I), row = index % (2 * I);
    uint8_t *dst = outW13 + index * rowBytes13;
    uint8_t *dstScale = outW13Scale + index * scales13;
    bool isUp = false;
    int64_t j = 0;
    logicalRow(row, I, G, isUp, j);
    if (j >= isrc) {
      std::memset(dst, 0, size_t(rowBytes13));
      std::memset(dstScale, kPaddingScale, size_t(scales13));
      return;
    }
    if (aiter) {
      const int64_t physical =
          sourceInterleaved ? (j / 16) * 32 + (isUp ? 16 : 0) + j % 16
                            : (isUp ? isrc : 0) + j;
      gatherShuffledRow(shuffled13, e, physical, dst, dstScale);
      return;
    }
    const int64_t srcRow = e * halfRows + (isUp ? upOffset : 0) + j;
    std::memcpy(dst, (isUp ? up : w13) + srcRow * rowBytes13, size_t(rowBytes13));
    std::memcpy(dstScale, (isUp ? upScale : w13Scale) + srcRow * scales13,
                size_t(scales13));
  };
  const auto *w2 = static_cast<const uint8_t *>(in.w2.data);
  const auto *w2Scale = static_cast<const uint8_t *>(in.w2Scale.data);
  auto w2Row = [&](int64_t index) {
    const int64_t e = index / H, row = index % H;
    uint8_t *dst = outW2 + index * (I / 2);
    uint8_t *dstScale = outW2Scale + index * (I / kBlock);
    if (aiter)
      gatherShuffledRow(shuffled2, e, row, dst, dstScale);
    else {
      std::memcpy(dst, w2 + index * (isrc / 2), size_t(isrc / 2));
      std::memcpy(dstScale, w2Scale + index * (isrc / kBlock), size_t(isrc / kBlock));
    }
    std::memset(dst + isrc / 2, 0, size_t((I - isrc) / 2));
    std::memset(dstScale + isrc / kBlock, kPaddingScale, size_t((I - isrc) / kBlock));
  };
  return parallelFor(
      w13Rows + w2Rows, threads,
      [&](int64_t begin, int64_t end) {
        for (int64_t index = begin; index < end; ++index) {
          if (index < w13Rows)
            w13Row(index);
          else
            w2Row(index - w13Rows);
        }
      },
      error);
}

bool prepareSharedExpert(const WeightLayout &layout,
                         const SharedExpertInputs &in,
                         const PreparedWeights &out, unsigned threads,
                         std::string &error, ConversionReport *report) {
  if (!checkWeightLayout(layout, error))
    return false;
  if (!layout.sharedExpert) {
    error = "prepare shared expert: the layout has no shared expert";
    return false;
  }
  if (!out.w13 || !out.w13Scale || !out.w2 || !out.w2Scale) {
    error = "prepare shared expert: null output buffer";
    return false;
  }
  const int64_t H = layout.hidden, I = layout.intermediate;
  if (!checkData(error, "shared_w2", in.w2))
    return false;
  const int64_t isrc = in.w2.ndim == 2 ? in.w2.shape[1] : -1;
  if (!isFp8(in.w2.dtype) || in.w2.ndim != 2 || in.w2.shape[0] != H ||
      isrc <= 0 || isrc > I || isrc % kBlock) {
    int64_t dims[2] = {H, I};
    return refuse(error, "shared_w2",
                  "float8_e4m3fn " + dimsText(dims, 2) +
                      " ([H, I]; a checkpoint I' < I, a multiple of 32, is "
                      "padded)",
                  in.w2);
  }
  Fp8Matrix w2, gate, up;
  if (!expectFp8Matrix(error, "shared_w2", "shared_w2_scale", in.w2, in.w2Scale,
                       H, isrc, "[H, I']", w2))
    return false;
  const bool splitGateUp = in.up.data || in.up.ndim;
  if (splitGateUp) {
    if (!expectFp8Matrix(error, "shared_w13", "shared_w13_scale", in.w13,
                         in.w13Scale, isrc, H, "[I', H] gate rows", gate) ||
        !expectFp8Matrix(error, "shared_up", "shared_up_scale", in.up,
                         in.upScale, isrc, H, "[I', H] up rows", up))
      return false;
  } else {
    if (!expectFp8Matrix(error, "shared_w13", "shared_w13_scale", in.w13,
                         in.w13Scale, 2 * isrc, H,
                         "[2I', H] gate rows then up rows", gate))
      return false;
    up = gate;
  }
  const int64_t upOffset = splitGateUp ? 0 : isrc;

  ConversionReport total;
  total.nonPowerOfTwoBlockScales =
      nonPowerOfTwo(w2) + nonPowerOfTwo(gate) + (splitGateUp ? nonPowerOfTwo(up) : 0);
  std::mutex mutex;
  auto *outW13 = static_cast<uint8_t *>(out.w13);
  auto *outW13Scale = static_cast<uint8_t *>(out.w13Scale);
  auto *outW2 = static_cast<uint8_t *>(out.w2);
  auto *outW2Scale = static_cast<uint8_t *>(out.w2Scale);
  const int64_t G = layout.gateUpInterleave;
  const int64_t w13Rows = 2 * I;
  bool ok = parallelFor(
      w13Rows + H, threads,
      [&](int64_t begin, int64_t end) {
        ConversionReport local;
        std::vector<double> values;
        for (int64_t index = begin; index < end; ++index) {
          if (index < w13Rows) {
            uint8_t *dst = outW13 + index * H;
            uint8_t *dstScale = outW13Scale + index * (H / kBlock);
            bool isUp = false;
            int64_t j = 0;
            logicalRow(index, I, G, isUp, j);
            if (j >= isrc) {
              std::memset(dst, 0, size_t(H));
              std::memset(dstScale, kPaddingScale, size_t(H / kBlock));
            } else if (isUp) {
              copyFp8Row(up, upOffset + j, dst, dstScale, values, local);
            } else {
              copyFp8Row(gate, j, dst, dstScale, values, local);
            }
          } else {
            const int64_t row = index - w13Rows;
            uint8_t *dst = outW2 + row * I;
            uint8_t *dstScale = outW2Scale + row * (I / kBlock);
            copyFp8Row(w2, row, dst, dstScale, values, local);
            std::memset(dst + isrc, 0, size_t(I - isrc));
            std::memset(dstScale + isrc / kBlock, kPaddingScale,
                        size_t((I - isrc) / kBlock));
          }
        }
        std::lock_guard<std::mutex> lock(mutex);
        total.convertedElements += local.convertedElements;
        total.inexactElements += local.inexactElements;
        total.maxRelativeError = std::max(total.maxRelativeError, local.maxRelativeError);
      },
      error);
  if (ok && report)
    *report = total;
  return ok;
}

} // namespace moec::rt
