// The seeded generator: determinism, slices equal to the whole, padding,
// realistic bounded values, routing options.

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Quantize.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <set>

using namespace moec::ref;

TEST_CASE("generated weights: slices equal the whole, seeds differ", "[generate]") {
  GeneratedMxfp4Weights weights(3, 13, 4, 96, 128, -5);
  std::vector<uint8_t> packed, scales;
  materializeWeights(weights, packed, scales);
  REQUIRE(packed.size() == 4u * 96 * 64);
  REQUIRE(scales.size() == 4u * 96 * 4);
  WeightScratch scratch;
  ExpertRows slice = weights.expertRows(2, 37, 5, scratch);
  for (int64_t i = 0; i < 5 * 64; ++i)
    REQUIRE(slice.elements[i] == packed[(2 * 96 + 37) * 64 + i]);
  for (int64_t i = 0; i < 5 * 4; ++i)
    REQUIRE(slice.scales[i] == scales[(2 * 96 + 37) * 4 + i]);
  GeneratedMxfp4Weights other(4, 13, 4, 96, 128, -5);
  std::vector<uint8_t> otherPacked, otherScales;
  materializeWeights(other, otherPacked, otherScales);
  CHECK(otherPacked != packed);
  // Never all zero; every E2M1 code appears; scales within s +- 1.
  std::set<int> codes;
  for (int64_t i = 0; i < 4 * 96 * 128; ++i)
    codes.insert(unpackE2M1(packed.data(), i));
  CHECK(codes.size() == 16);
  for (uint8_t scale : scales)
    REQUIRE((scale >= 127 - 6 && scale <= 127 - 4));
}

TEST_CASE("generated weights: TP padding rows and columns are zero", "[generate]") {
  GluConfig glu{16, 0};
  const int64_t intermediate = 64, valid = 48, hidden = 64;
  std::vector<bool> padded = paddedW13Rows(glu, intermediate, valid);
  int64_t paddedCount = 0;
  for (bool p : padded)
    paddedCount += p;
  CHECK(paddedCount == 2 * (intermediate - valid));
  CHECK(padded[gateRowOf(glu, intermediate, 50)]);
  CHECK(padded[upRowOf(glu, intermediate, 63)]);
  CHECK_FALSE(padded[upRowOf(glu, intermediate, 47)]);
  GeneratedMxfp4Weights w13(5, 13, 2, 2 * intermediate, hidden, -4, padded);
  GeneratedMxfp4Weights w2(5, 2, 2, hidden, intermediate, -4, {}, valid);
  std::vector<uint8_t> packed, scales;
  materializeWeights(w13, packed, scales);
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t row = 0; row < 2 * intermediate; ++row) {
      bool anyNonZero = false;
      for (int64_t k = 0; k < hidden; ++k)
        anyNonZero |= (unpackE2M1(packed.data(), (e * 2 * intermediate + row) * hidden + k) & 7) != 0;
      REQUIRE(anyNonZero == !padded[row]);
    }
  materializeWeights(w2, packed, scales);
  for (int64_t row = 0; row < 2 * hidden; ++row)
    for (int64_t k = valid; k < intermediate; ++k)
      REQUIRE(unpackE2M1(packed.data(), row * intermediate + k) == 0);
}

TEST_CASE("generated batches: bounded values, distinct experts, options", "[generate]") {
  const MoeShape shape{256, 64, 16, 4};
  TokenBatch batch = generateBatch(9, 0, 50, shape, RoutingOptions{});
  TokenBatch again = generateBatch(9, 0, 50, shape, RoutingOptions{});
  CHECK(batch.hiddenBf16 == again.hiddenBf16);
  CHECK(batch.topkIds == again.topkIds);
  CHECK(generateBatch(9, 1, 50, shape, RoutingOptions{}).hiddenBf16 != batch.hiddenBf16);
  double sumSquares = 0;
  for (uint16_t bits : batch.hiddenBf16) {
    double value = decodeBf16(bits);
    REQUIRE(std::fabs(value) <= 8.0);
    sumSquares += value * value;
  }
  double rms = std::sqrt(sumSquares / batch.hiddenBf16.size());
  CHECK(rms > 0.5);
  CHECK(rms < 2.0);
  for (int64_t t = 0; t < batch.tokens; ++t) {
    std::set<int32_t> ids;
    float total = 0;
    for (int64_t k = 0; k < shape.topk; ++k) {
      int32_t id = batch.topkIds[t * shape.topk + k];
      REQUIRE((id >= 0 && id < shape.experts));
      ids.insert(id);
      REQUIRE(batch.topkWeights[t * shape.topk + k] > 0.0f);
      total += batch.topkWeights[t * shape.topk + k];
    }
    REQUIRE(ids.size() == size_t(shape.topk));
    REQUIRE(std::fabs(total - 1.0f) < 1e-5f);
  }
  RoutingOptions hot;
  hot.ep = 4;
  hot.hotRank = 3;
  for (int32_t id : generateBatch(9, 0, 50, shape, hot).topkIds)
    REQUIRE((id >= 12 && id < 16));
  RoutingOptions invalid;
  invalid.invalidFraction = 0.5;
  int64_t invalidCount = 0;
  TokenBatch mixed = generateBatch(9, 0, 200, shape, invalid);
  for (int32_t id : mixed.topkIds)
    invalidCount += !isValidExpert(id, shape.experts);
  CHECK(invalidCount > 300);
  CHECK(invalidCount < 500);
}

TEST_CASE("generated FP8 expert: quantised with the activation recipe", "[generate]") {
  std::vector<uint8_t> codes, scales;
  generateFp8Expert(6, 1, 8, 128, codes, scales);
  REQUIRE(codes.size() == 8u * 128);
  REQUIRE(scales.size() == 8u * 4);
  for (int64_t block = 0; block < 8 * 4; ++block) {
    int maxMagnitude = 0;
    for (int i = 0; i < 32; ++i)
      maxMagnitude = std::max(maxMagnitude, codes[block * 32 + i] & 0x7F);
    // The recipe scales every block's maximum into (224, 448]; rounding to
    // E4M3 can bring it down to 224 itself.
    REQUIRE(decodeFp8E4M3(static_cast<uint8_t>(maxMagnitude)) >= 224.0);
    REQUIRE(maxMagnitude != 0x7F);
  }
}
