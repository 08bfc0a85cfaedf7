//===- Generate.cpp - seeded inputs, weights and routing ------------------===//

#include "moec/reference/Generate.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"

#include <algorithm>
#include <cmath>

namespace moec::ref {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// E2M1 code for a random byte: bit 7 is the sign, bits 6:0 pick the
/// magnitude with counts 18, 26, 24, 20, 16, 12, 8, 4 of 128 for 0, .5, 1,
/// 1.5, 2, 3, 4, 6 (a table, because this runs for billions of elements).
/// `pairs` maps 16 random bits straight to a packed byte (low byte -> even
/// element, high byte -> odd element), one lookup per byte.
struct CodeTable {
  uint8_t codes[256];
  uint8_t pairs[65536];
  CodeTable() {
    static const uint8_t kCumulative[8] = {18, 44, 68, 88, 104, 116, 124, 128};
    for (int byte = 0; byte < 256; ++byte) {
      uint8_t magnitude = 0;
      while ((byte & 0x7F) >= kCumulative[magnitude])
        ++magnitude;
      codes[byte] = static_cast<uint8_t>((byte & 0x80 ? 0x8 : 0) | magnitude);
    }
    for (int bits = 0; bits < 65536; ++bits)
      pairs[bits] = packE2M1Pair(codes[bits & 0xFF], codes[bits >> 8]);
  }
};

const CodeTable &codeTable() {
  static const CodeTable table;
  return table;
}

} // namespace

uint64_t mixBits(uint64_t value) {
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

CounterRandom::CounterRandom(uint64_t seed, uint64_t stream)
    : key_(mixBits(seed ^ mixBits(stream + 1))) {}

uint64_t CounterRandom::bits(uint64_t index) const {
  return mixBits(key_ + (index + 1) * kGolden);
}

double CounterRandom::uniform(uint64_t index) const {
  return static_cast<double>(bits(index) >> 11) * 0x1.0p-53;
}

double CounterRandom::normal(uint64_t index) const {
  double u1 = uniform(2 * index);
  double u2 = uniform(2 * index + 1);
  double radius = std::sqrt(-2.0 * std::log(1.0 - u1)); // 1 - u1 in (0, 1]
  return radius * std::cos(6.283185307179586 * u2);
}

const std::vector<ShapePreset> &shapePresets() {
  static const std::vector<ShapePreset> presets = {
      {"flash", {5120, 2304, 384, 6}, 2304,
       "DeepSeek V4.1 Flash MegaMoE (EP2/EP4)"},
      {"flash-tp4", {5120, 640, 384, 6}, 576,
       "Flash backbone at TP4: I 576 padded to 640"},
      {"flash-draft-tp4", {5120, 640, 128, 3}, 576,
       "Flash draft model at TP4: E 128 top-3, I 576 padded to 640"},
      {"pro-fhmoe", {7168, 512, 384, 6}, 512,
       "DeepSeek V4 Pro TP8 FHMoE: 384 routed + 1 shared (E 385, top-7)"},
      {"small", {256, 128, 8, 2}, 128, "small test shape"},
      {"small-ep", {128, 64, 16, 4}, 64, "small test shape for EP 2/4"},
  };
  return presets;
}

const ShapePreset *findShapePreset(const std::string &name) {
  for (const ShapePreset &preset : shapePresets())
    if (preset.name == name)
      return &preset;
  return nullptr;
}

TokenBatch generateBatch(uint64_t seed, uint64_t stream, int64_t tokens,
                         const MoeShape &shape, const RoutingOptions &routing) {
  TokenBatch batch;
  batch.tokens = tokens;
  CounterRandom hiddenRandom(seed, stream * 16 + 1);
  CounterRandom tokenRandom(seed, stream * 16 + 2);
  CounterRandom routeRandom(seed, stream * 16 + 3);
  batch.hiddenBf16.resize(tokens * shape.hidden);
  for (int64_t token = 0; token < tokens; ++token) {
    double factor = 0.5 + 1.5 * tokenRandom.uniform(token);
    for (int64_t i = 0; i < shape.hidden; ++i) {
      int64_t index = token * shape.hidden + i;
      double value = std::clamp(factor * hiddenRandom.normal(index), -8.0, 8.0);
      batch.hiddenBf16[index] = encodeBf16(value);
    }
  }

  int64_t first = 0, eligible = shape.experts;
  if (routing.ep > 0) {
    eligible = shape.experts / routing.ep;
    first = routing.hotRank * eligible;
  }
  batch.topkIds.resize(tokens * shape.topk);
  batch.topkWeights.resize(tokens * shape.topk);
  uint64_t draw = 0;
  for (int64_t token = 0; token < tokens; ++token) {
    int32_t *ids = batch.topkIds.data() + token * shape.topk;
    for (int64_t k = 0; k < shape.topk; ++k) {
      int32_t expert;
      bool repeat;
      int attempts = 0;
      do {
        expert = static_cast<int32_t>(first + routeRandom.bits(draw++) % eligible);
        repeat = std::find(ids, ids + k, expert) != ids + k;
      } while (repeat && shape.topk <= eligible && ++attempts < 1000);
      ids[k] = expert;
    }
    double logits[64], total = 0.0;
    int64_t slots = std::min<int64_t>(shape.topk, 64);
    for (int64_t k = 0; k < slots; ++k) {
      logits[k] = std::exp(routeRandom.normal(draw++));
      total += logits[k];
    }
    for (int64_t k = 0; k < shape.topk; ++k)
      batch.topkWeights[token * shape.topk + k] =
          static_cast<float>(k < slots ? logits[k] / total : 0.0);
    if (routing.invalidFraction > 0.0)
      for (int64_t k = 0; k < shape.topk; ++k)
        if (routeRandom.uniform(draw++) < routing.invalidFraction)
          ids[k] = (routeRandom.bits(draw++) & 1)
                       ? -1
                       : static_cast<int32_t>(shape.experts +
                                              routeRandom.bits(draw++) % 7);
  }
  return batch;
}

int defaultScaleExponent(int64_t depth) {
  return static_cast<int>(
      std::lround(-std::log2(2.6 * std::sqrt(static_cast<double>(depth)))));
}

GeneratedMxfp4Weights::GeneratedMxfp4Weights(uint64_t seed, uint64_t tensorTag,
                                             int64_t numExperts, int64_t rows,
                                             int64_t depth, int scaleExponent,
                                             std::vector<bool> zeroRows,
                                             int64_t validDepth)
    : random_(seed, 0x5EED0000ull + tensorTag), numExperts_(numExperts),
      rows_(rows), depth_(depth), scaleExponent_(scaleExponent),
      zeroRows_(std::move(zeroRows)),
      validDepth_(validDepth < 0 ? depth : validDepth) {}

ExpertRows GeneratedMxfp4Weights::expertRows(int64_t expert, int64_t rowBegin,
                                             int64_t rowCount,
                                             WeightScratch &scratch) const {
  const int64_t rowBytes = depth_ / 2;
  const int64_t blocks = depth_ / kBlockSize;
  const CodeTable &table = codeTable();
  scratch.elements.resize(rowCount * rowBytes);
  scratch.scales.resize(rowCount * blocks);
  for (int64_t n = 0; n < rowCount; ++n) {
    int64_t row = rowBegin + n;
    uint64_t rowIndex = static_cast<uint64_t>(expert * rows_ + row);
    uint8_t *elements = scratch.elements.data() + n * rowBytes;
    uint8_t *scales = scratch.scales.data() + n * blocks;
    bool zero = !zeroRows_.empty() && zeroRows_[row];
    // One 64-bit draw gives the 8 random bytes of 4 packed pairs; scales
    // use a separate index range (the upper half of the counter space).
    // rowBytes = K / 2 is a multiple of 16, so the groups of 4 are whole.
    for (int64_t byte = 0; byte < rowBytes; byte += 4) {
      uint64_t bits = random_.bits(rowIndex * (rowBytes / 4 + 1) + byte / 4);
      for (int64_t j = 0; j < 4; ++j)
        elements[byte + j] = table.pairs[static_cast<uint16_t>(bits >> (16 * j))];
    }
    // Padding (zero rows, columns past validDepth) is cleared afterwards so
    // the hot loop above stays branch-free.
    if (zero)
      std::fill(elements, elements + rowBytes, uint8_t(0));
    for (int64_t k = validDepth_; k < depth_; ++k)
      elements[k / 2] &= (k % 2) ? 0x0F : 0xF0;
    for (int64_t block = 0; block < blocks; ++block) {
      uint64_t bits =
          random_.bits((uint64_t(1) << 62) + rowIndex * blocks + block);
      int exponent = scaleExponent_ + static_cast<int>(bits % 3) - 1;
      scales[block] = static_cast<uint8_t>(std::clamp(exponent + 127, 0, 254));
    }
  }
  return {WeightFormat::Mxfp4, scratch.elements.data(), scratch.scales.data()};
}

std::vector<bool> paddedW13Rows(const GluConfig &glu, int64_t intermediate,
                                int64_t validIntermediate) {
  std::vector<bool> padded(2 * intermediate, false);
  for (int64_t j = validIntermediate; j < intermediate; ++j) {
    padded[gateRowOf(glu, intermediate, j)] = true;
    padded[upRowOf(glu, intermediate, j)] = true;
  }
  return padded;
}

void generateFp8Expert(uint64_t seed, uint64_t tensorTag, int64_t rows,
                       int64_t depth, std::vector<uint8_t> &codes,
                       std::vector<uint8_t> &scales) {
  CounterRandom random(seed, 0xF8000000ull + tensorTag);
  codes.assign(rows * depth, 0);
  scales.assign(rows * (depth / kBlockSize), 0);
  std::vector<double> row(depth);
  double sigma = 1.0 / std::sqrt(static_cast<double>(depth));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < depth; ++k)
      row[k] = sigma * random.normal(static_cast<uint64_t>(r * depth + k));
    quantizeFp8Row(row.data(), depth, codes.data() + r * depth,
                   scales.data() + r * (depth / kBlockSize));
  }
}

void materializeWeights(const WeightSource &source,
                        std::vector<uint8_t> &elements,
                        std::vector<uint8_t> &scales) {
  const int64_t rows = source.rows();
  const int64_t depth = source.depth();
  WeightScratch scratch;
  ExpertRows probe = source.expertRows(0, 0, 1, scratch);
  const int64_t rowBytes = weightRowBytes(probe.format, depth);
  const int64_t blocks = depth / kBlockSize;
  elements.resize(source.numExperts() * rows * rowBytes);
  scales.resize(source.numExperts() * rows * blocks);
  for (int64_t expert = 0; expert < source.numExperts(); ++expert) {
    ExpertRows block = source.expertRows(expert, 0, rows, scratch);
    std::copy_n(block.elements, rows * rowBytes,
                elements.begin() + expert * rows * rowBytes);
    std::copy_n(block.scales, rows * blocks,
                scales.begin() + expert * rows * blocks);
  }
}

} // namespace moec::ref
