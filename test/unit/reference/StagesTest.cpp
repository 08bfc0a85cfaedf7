// The W13 and W2 stage functions on device-layout buffers, against naive
// per-route loops; untouched padding rows; error reporting.

#include "NaiveOracle.h"
#include "TestData.h"

#include "moec/reference/Quantize.h"
#include "moec/reference/Stages.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

using namespace moec::ref;
using testdata::DenseLayer;

namespace {

/// FP8 rows [rows, depth] quantised from N(0, sigma) values.
void randomFp8Rows(std::mt19937_64 &rng, int64_t rows, int64_t depth,
                   double sigma, std::vector<uint8_t> &codes,
                   std::vector<uint8_t> &scales) {
  std::normal_distribution<double> normal(0.0, sigma);
  codes.resize(rows * depth);
  scales.resize(rows * depth / 32);
  std::vector<double> row(depth);
  for (int64_t r = 0; r < rows; ++r) {
    for (double &value : row)
      value = normal(rng);
    quantizeFp8Row(row.data(), depth, codes.data() + r * depth,
                   scales.data() + r * depth / 32);
  }
}

std::vector<int32_t> randomIds(std::mt19937_64 &rng, int64_t count, int64_t experts) {
  std::vector<int32_t> ids(count);
  for (int32_t &id : ids)
    id = static_cast<int32_t>(rng() % (experts + 2)) - 1; // includes -1 and E
  return ids;
}

} // namespace

TEST_CASE("W2 stage on device buffers matches naive per-route dot products",
          "[stages]") {
  std::mt19937_64 rng(41);
  const MoeShape shape{96, 64, 6, 3};
  DenseLayer layer(shape, GluConfig{}, 41);
  const int64_t tokens = 11, routes = tokens * shape.topk;
  std::vector<int32_t> ids = randomIds(rng, routes, shape.experts);
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), tokens, shape.topk, shape.experts, 4, sorted).ok());
  std::vector<uint8_t> aCodes, aScales;
  randomFp8Rows(rng, routes, shape.intermediate, 1.0, aCodes, aScales);
  const float untouched = 12345.0f;
  std::vector<float> out(routes * shape.hidden, untouched);
  REQUIRE(runW2Stage(aCodes.data(), aScales.data(), layer.w2Packed.data(),
                     layer.w2Scales.data(), shape.experts, shape.hidden,
                     shape.intermediate, sorted, out.data(), 2)
              .ok());
  naive::Matrix a = naive::fromFp8(aCodes, aScales, routes, shape.intermediate);
  for (int64_t r = 0; r < routes; ++r) {
    bool valid = ids[r] >= 0 && ids[r] < shape.experts;
    for (int64_t n = 0; n < shape.hidden; ++n) {
      if (!valid) {
        REQUIRE(out[r * shape.hidden + n] == untouched);
        continue;
      }
      double expected = 0;
      for (int64_t j = 0; j < shape.intermediate; ++j)
        expected += a.at(r, j) * layer.naiveLayer.w2[ids[r]].at(n, j);
      // FP8 x MXFP4 products and their sums are exact in double here, so
      // the only rounding is the final one to float.
      REQUIRE(out[r * shape.hidden + n] == static_cast<float>(expected));
    }
  }
}

TEST_CASE("W13 stage on device buffers: gather by token, activation, FP8 intermediate",
          "[stages]") {
  std::mt19937_64 rng(42);
  const MoeShape shape{128, 64, 5, 2};
  for (int64_t interleave : {0, 1, 16}) {
    for (double limit : {0.0, 1.5}) {
      GluConfig glu{interleave, limit};
      DenseLayer layer(shape, glu, 42 + interleave, /*scaleOffset=*/1);
      const int64_t tokens = 9, routes = tokens * shape.topk;
      std::vector<int32_t> ids = randomIds(rng, routes, shape.experts);
      SortedRoutes sorted;
      REQUIRE(buildSortedRoutes(ids.data(), tokens, shape.topk, shape.experts, 3, sorted).ok());
      std::vector<uint8_t> aCodes, aScales;
      randomFp8Rows(rng, tokens, shape.hidden, 1.0, aCodes, aScales);
      std::vector<double> activation(routes * shape.intermediate, -7.0);
      std::vector<uint8_t> codes(routes * shape.intermediate, 0xEE);
      std::vector<uint8_t> scales(routes * shape.intermediate / 32, 0xEE);
      std::vector<float> preActivation(routes * 2 * shape.intermediate, -7.0f);
      W13Outputs outputs;
      outputs.preActivation = preActivation.data();
      outputs.activation = activation.data();
      outputs.intermediateCodes = codes.data();
      outputs.intermediateScales = scales.data();
      REQUIRE(runW13Stage(aCodes.data(), aScales.data(), tokens, shape.topk,
                          layer.w13Packed.data(), layer.w13Scales.data(),
                          shape.experts, shape.hidden, shape.intermediate,
                          sorted, glu, outputs, 2)
                  .ok());
      naive::Matrix a = naive::fromFp8(aCodes, aScales, tokens, shape.hidden);
      int clamped = 0;
      for (int64_t r = 0; r < routes; ++r) {
        bool valid = ids[r] >= 0 && ids[r] < shape.experts;
        if (!valid) {
          REQUIRE(activation[r * shape.intermediate] == -7.0);
          REQUIRE(codes[r * shape.intermediate] == 0xEE);
          continue;
        }
        const naive::Matrix &w = layer.naiveLayer.w13[ids[r]];
        std::vector<double> h(2 * shape.intermediate, 0.0);
        for (int64_t n = 0; n < 2 * shape.intermediate; ++n)
          for (int64_t k = 0; k < shape.hidden; ++k)
            h[n] += a.at(r / shape.topk, k) * w.at(n, k);
        for (int64_t n = 0; n < 2 * shape.intermediate; ++n)
          REQUIRE(preActivation[r * 2 * shape.intermediate + n] == static_cast<float>(h[n]));
        std::vector<double> act(shape.intermediate);
        for (int64_t j = 0; j < shape.intermediate; ++j) {
          int64_t g = interleave, gateRow, upRow;
          if (g == 0) {
            gateRow = j;
            upRow = shape.intermediate + j;
          } else {
            gateRow = (j / g) * 2 * g + j % g;
            upRow = gateRow + g;
          }
          double gate = h[gateRow], up = h[upRow];
          if (limit > 0) {
            clamped += gate > limit || std::fabs(up) > limit;
            gate = std::min(gate, limit);
            up = std::max(-limit, std::min(up, limit));
          }
          act[j] = gate / (1 + std::exp(-gate)) * up;
          REQUIRE(activation[r * shape.intermediate + j] == act[j]);
        }
        std::vector<double> quantized = naive::fakeQuantFp8(act);
        std::vector<double> dequantized(shape.intermediate);
        dequantizeFp8Row(codes.data() + r * shape.intermediate,
                         scales.data() + r * shape.intermediate / 32,
                         shape.intermediate, dequantized.data());
        REQUIRE(dequantized == quantized);
      }
      if (limit > 0)
        CHECK(clamped > 0); // the clamp really was exercised
    }
  }
}

TEST_CASE("SiTUv2 at points with closed-form values", "[stages][situv2]") {
  // g = 2 ln 3: tanh(g / 4) = 1/2 and sigmoid(g) = 9/10, so the gate half is
  // 4 * 1/2 * 9/10 = 1.8. u = 25 atanh(0.6) = 12.5 ln 4: 25 * 0.6 = 15.
  const double g = 2.0 * std::log(3.0), u = 12.5 * std::log(4.0);
  CHECK(situV2Activation(g, u, 0.0, 4.0, 25.0) == Approx(27.0).epsilon(1e-13));
  CHECK(situV2Activation(g, -u, 0.0, 4.0, 25.0) ==
        Approx(-27.0).epsilon(1e-13));
  // A clamp L = 25 atanh(0.2) = 12.5 ln 1.5 leaves g (below L) and takes u
  // (above L) to L: 1.8 * 25 * 0.2 = 9; -100 goes to -L.
  const double limit = 12.5 * std::log(1.5);
  CHECK(situV2Activation(g, u, limit, 4.0, 25.0) == Approx(9.0).epsilon(1e-13));
  CHECK(situV2Activation(g, -100.0, limit, 4.0, 25.0) ==
        Approx(-9.0).epsilon(1e-13));
  // The gate clamp is upper only: a very negative g gives (almost) 0.
  CHECK(std::fabs(situV2Activation(-60.0, u, limit, 4.0, 25.0)) < 1e-20);
  // B = LB = 1: tanh(ln 3) = 4/5, sigmoid(ln 3) = 3/4: 0.6 * tanh(u).
  CHECK(situV2Activation(std::log(3.0), std::log(3.0), 0.0, 1.0, 1.0) ==
        Approx(0.6 * 0.8).epsilon(1e-13));
  // Through GluConfig: situV2 picks it, with the config's betas.
  GluConfig situ;
  situ.situV2 = true;
  CHECK(gatedActivation(situ, g, u) == Approx(27.0).epsilon(1e-13));
  situ.situBeta = situ.situLinearBeta = 1.0;
  CHECK(gatedActivation(situ, std::log(3.0), std::log(3.0)) ==
        Approx(0.48).epsilon(1e-13));
  GluConfig silu;
  CHECK(gatedActivation(silu, g, u) != Approx(27.0).epsilon(1e-3));
}

TEST_CASE("gated activation: clamp and SiLU formulas", "[stages]") {
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  CHECK(gatedActivation(2.0, 3.0, 0.0) == silu(2.0) * 3.0);
  CHECK(gatedActivation(25.0, 30.0, 10.0) == silu(10.0) * 10.0);
  CHECK(gatedActivation(25.0, -30.0, 10.0) == silu(10.0) * -10.0);
  CHECK(gatedActivation(-25.0, 4.0, 10.0) == silu(-25.0) * 4.0); // no lower gate clamp
  CHECK(gatedActivation(25.0, 30.0, 0.0) == silu(25.0) * 30.0);
  CHECK(gatedActivation(0.0, 5.0, 10.0) == 0.0);
  CHECK(gatedActivation(-1000.0, 1.0, 0.0) == 0.0);
  // GPT-OSS's SwiGLU (AITER's ActivationType.Swiglu): alpha 1.702, up + 1,
  // gate clamped above and up on both sides at the limit.
  auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  CHECK(gatedActivation(2.0, 3.0, 7.0, true) ==
        Approx(2.0 * sigmoid(1.702 * 2.0) * 4.0).epsilon(1e-15));
  CHECK(gatedActivation(25.0, 30.0, 7.0, true) ==
        Approx(7.0 * sigmoid(1.702 * 7.0) * 8.0).epsilon(1e-15));
  CHECK(gatedActivation(-3.0, -30.0, 7.0, true) ==
        Approx(-3.0 * sigmoid(-1.702 * 3.0) * -6.0).epsilon(1e-15));
  CHECK(gatedActivation(1.0, -1.0, 7.0, true) == 0.0); // u + 1 = 0
  CHECK(gatedActivation(1.0, 0.0, 7.0, true) != gatedActivation(1.0, 0.0, 7.0));
  GluConfig g16{16, 0};
  CHECK(gateRowOf(g16, 64, 0) == 0);
  CHECK(upRowOf(g16, 64, 0) == 16);
  CHECK(gateRowOf(g16, 64, 17) == 33);
  CHECK(upRowOf(g16, 64, 17) == 49);
  GluConfig concatenated{0, 0};
  CHECK(upRowOf(concatenated, 64, 5) == 69);
  GluConfig rowByRow{1, 0};
  CHECK(gateRowOf(rowByRow, 64, 5) == 10);
  CHECK(upRowOf(rowByRow, 64, 5) == 11);
}

TEST_CASE("W2 stage: all-zero weights give exactly zero rows", "[stages]") {
  std::mt19937_64 rng(43);
  const int64_t experts = 3, hidden = 64, intermediate = 64, tokens = 5, topk = 2;
  std::vector<uint8_t> packed(experts * hidden * intermediate / 2, 0x00);
  // Negative zero codes and large scales must still give +0.
  for (size_t i = 0; i < packed.size(); i += 3)
    packed[i] = 0x88;
  std::vector<uint8_t> scales(experts * hidden * intermediate / 32, 200);
  std::vector<int32_t> ids = randomIds(rng, tokens * topk, experts);
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), tokens, topk, experts, 2, sorted).ok());
  std::vector<uint8_t> aCodes, aScales;
  randomFp8Rows(rng, tokens * topk, intermediate, 3.0, aCodes, aScales);
  std::vector<float> out(tokens * topk * hidden, 1.0f);
  REQUIRE(runW2Stage(aCodes.data(), aScales.data(), packed.data(), scales.data(),
                     experts, hidden, intermediate, sorted, out.data())
              .ok());
  for (int64_t r = 0; r < tokens * topk; ++r)
    if (ids[r] >= 0 && ids[r] < experts)
      for (int64_t n = 0; n < hidden; ++n)
        REQUIRE(testdata::bitsOf(out[r * hidden + n]) == 0u);
}

TEST_CASE("stage functions report bad operands", "[stages]") {
  const int64_t experts = 2, hidden = 64, intermediate = 32;
  std::vector<uint8_t> packed(experts * hidden * intermediate / 2), scales(experts * hidden);
  std::vector<uint8_t> aCodes(4 * intermediate), aScales(4);
  std::vector<float> out(4 * hidden);
  std::vector<int32_t> ids = {0, 1, 1, 0};
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), 4, 1, experts, 2, sorted).ok());
  SortedRoutes bad = sorted;
  bad.tileExperts[0] = 5;
  Status status = runW2Stage(aCodes.data(), aScales.data(), packed.data(),
                             scales.data(), experts, hidden, intermediate, bad,
                             out.data());
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("W2 stage: sorted routes: tile 0 has expert id 5") == 0);
  status = runW2Stage(aCodes.data(), aScales.data(), packed.data(), scales.data(),
                      experts, hidden, 48, sorted, out.data());
  CHECK_FALSE(status.ok());
  W13Outputs outputs;
  status = runW13Stage(aCodes.data(), aScales.data(), 4, 1, packed.data(),
                       scales.data(), experts, 32, 32, sorted, GluConfig{3, 0},
                       outputs);
  REQUIRE_FALSE(status.ok());
  CHECK(status.message().find("interleave 3 does not divide I = 32") != std::string::npos);
  status = runW13Stage(aCodes.data(), aScales.data(), 4, 2, packed.data(),
                       scales.data(), experts, 32, 32, sorted, GluConfig{}, outputs);
  CHECK_FALSE(status.ok()); // route count disagrees with tokens x topk
}

TEST_CASE("FP8 x MXFP4 integer path equals the double path bit for bit",
          "[stages]") {
  // The same A operand once as FP8 codes + scales (integer block sums) and
  // once as its exact double values (double block sums); extreme scales and
  // NaN codes / NaN scales included.
  std::mt19937_64 rng(44);
  const MoeShape shape{64, 96, 5, 2};
  DenseLayer layer(shape, GluConfig{}, 44);
  const int64_t tokens = 13, routes = tokens * shape.topk;
  std::vector<int32_t> ids = randomIds(rng, routes, shape.experts);
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(ids.data(), tokens, shape.topk, shape.experts, 2, sorted).ok());
  std::vector<uint8_t> codes(routes * shape.intermediate), scales(routes * shape.intermediate / 32);
  for (uint8_t &code : codes)
    code = static_cast<uint8_t>(rng());
  for (uint8_t &scale : scales)
    scale = static_cast<uint8_t>(rng() % 4 == 0 ? (rng() % 2 ? 0 : 254) : 100 + rng() % 40);
  scales[3] = 0xFF;
  std::vector<double> values(codes.size());
  for (int64_t r = 0; r < routes; ++r)
    dequantizeFp8Row(codes.data() + r * shape.intermediate,
                     scales.data() + r * shape.intermediate / 32, shape.intermediate,
                     values.data() + r * shape.intermediate);
  std::vector<double> viaIntegers(routes * shape.hidden, 0.0), viaDoubles(routes * shape.hidden, 0.0);
  REQUIRE(runW2Stage(ActivationRows::fp8(codes.data(), scales.data(), routes, shape.intermediate),
                     *layer.w2, sorted, viaIntegers.data(), 3)
              .ok());
  REQUIRE(runW2Stage(ActivationRows::float64(values.data(), routes, shape.intermediate),
                     *layer.w2, sorted, viaDoubles.data(), 1)
              .ok());
  int nanCount = 0;
  for (size_t i = 0; i < viaIntegers.size(); ++i) {
    if (std::isnan(viaDoubles[i])) {
      REQUIRE(std::isnan(viaIntegers[i]));
      ++nanCount;
      continue;
    }
    uint64_t a, b;
    std::memcpy(&a, &viaIntegers[i], 8);
    std::memcpy(&b, &viaDoubles[i], 8);
    REQUIRE(a == b);
  }
  CHECK(nanCount > 0);
}
