// W13Outputs::activationErrorBound: how far an FP32-accumulated W13 may land
// from the oracle's double activation. The test accumulates the GEMM in FP32
// itself, one rounding per 32-element block (the most an FP32 accumulator of
// scaled MFMAs can round), and checks that every activation stays within the
// bound, and that the bound stays below an FP8 step for most elements, so
// the kernels' element checks keep their strength.
#include "moec/reference/Formats.h"
#include "moec/reference/Routing.h"
#include "moec/reference/Stages.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace moec::ref;

TEST_CASE("the W13 accumulation bound holds for an FP32-accumulated GEMM",
          "[stages][bound]") {
  const int64_t tokens = 48, topk = 2, experts = 4, hidden = 5120, inter = 64;
  const int64_t twoI = 2 * inter, blocks = hidden / 32;
  std::mt19937 random(7);
  // Activations and weights as a layer has them: normal values, FP8 E4M3
  // tokens and E2M1 weights, with block scales that vary (2^-3 to 2^3 and
  // 2^-7 to 2^-1) so that the partial sums need more than FP32's 24 bits
  // and the outputs range over 1 to 100 (the clamp at 10 both bites and
  // not).
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> aExponent(124, 130), bExponent(120, 126);
  std::vector<uint8_t> aCodes(size_t(tokens * hidden)),
      aScales(size_t(tokens * blocks));
  for (uint8_t &c : aCodes)
    c = encodeFp8E4M3(normal(random));
  for (uint8_t &e : aScales)
    e = uint8_t(aExponent(random));
  std::vector<uint8_t> bPacked(size_t(experts * twoI * hidden / 2)),
      bScales(size_t(experts * twoI * blocks));
  for (uint8_t &e : bScales)
    e = uint8_t(bExponent(random));
  for (uint8_t &p : bPacked)
    p = uint8_t(encodeE2M1(2 * normal(random)) |
                (encodeE2M1(2 * normal(random)) << 4));
  std::vector<int32_t> topkIds(size_t(tokens * topk));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t k = 0; k < topk; ++k)
      topkIds[size_t(t * topk + k)] = int32_t((t + k) % experts);
  SortedRoutes sorted;
  REQUIRE(buildSortedRoutes(topkIds.data(), tokens, topk, experts, 16, sorted));

  for (double clamp : {0.0, 10.0}) {
    GluConfig glu;
    glu.interleave = 16;
    glu.clampLimit = clamp;
    const size_t elements = size_t(tokens * topk * inter);
    std::vector<double> act(elements), bound(elements, -1.0);
    W13Outputs outputs;
    outputs.activation = act.data();
    outputs.activationErrorBound = bound.data();
    REQUIRE(runW13Stage(aCodes.data(), aScales.data(), tokens, topk,
                        bPacked.data(), bScales.data(), experts, hidden, inter,
                        sorted, glu, outputs));

    auto aValue = [&](int64_t t, int64_t k) {
      return decodeFp8E4M3(aCodes[size_t(t * hidden + k)]) *
             decodeE8M0(aScales[size_t(t * blocks + k / 32)]);
    };
    auto bValue = [&](int64_t e, int64_t row, int64_t k) {
      const uint8_t pair = bPacked[size_t((e * twoI + row) * hidden / 2 + k / 2)];
      return decodeE2M1(k % 2 ? pair >> 4 : pair & 0xF) *
             decodeE8M0(bScales[size_t((e * twoI + row) * blocks + k / 32)]);
    };
    // FP32 accumulation of exact 32-element partial sums, as a kernel may.
    auto fp32Dot = [&](int64_t t, int64_t e, int64_t row) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        double partial = 0.0;
        for (int64_t k = b * 32; k < b * 32 + 32; ++k)
          partial += aValue(t, k) * bValue(e, row, k);
        acc = static_cast<float>(double(acc) + partial);
      }
      return double(acc);
    };
    int64_t checked = 0, tight = 0;
    std::vector<double> ratios;
    double worstOfRow = 0.0; // largest bound / max |act| of its route
    double worstUse = 0.0;
    for (int64_t route = 0; route < tokens * topk; ++route) {
      const int64_t t = route / topk, e = topkIds[size_t(route)];
      double rowMax = 0.0;
      for (int64_t j = 0; j < inter; ++j)
        rowMax = std::max(rowMax, std::fabs(act[size_t(route * inter + j)]));
      for (int64_t j = 0; j < inter; ++j)
        worstOfRow = std::max(worstOfRow,
                              bound[size_t(route * inter + j)] / rowMax);
      for (int64_t j = 0; j < inter; ++j) {
        const int64_t gRow = (j / 16) * 32 + j % 16, uRow = gRow + 16;
        const double fp32Act = gatedActivation(fp32Dot(t, e, gRow),
                                               fp32Dot(t, e, uRow), clamp);
        const size_t i = size_t(route * inter + j);
        REQUIRE(bound[i] >= 0.0);
        const double error = std::fabs(fp32Act - act[i]);
        INFO("route " << route << " column " << j << ": |fp32 - exact| "
                      << error << ", bound " << bound[i]);
        CHECK(error <= bound[i]);
        worstUse = std::max(worstUse, bound[i] > 0 ? error / bound[i] : 0.0);
        ++checked;
        // An FP8 E4M3 step is 2^-3 of the value (2^-4 above a power of
        // two): most bounds must stay well below a quarter of it.
        tight += bound[i] <= std::fabs(act[i]) * 0x1p-6;
        ratios.push_back(bound[i] / std::max(std::fabs(act[i]), 1e-300));
      }
    }
    std::sort(ratios.begin(), ratios.end());
    INFO("clamp " << clamp << ": " << tight << " of " << checked
                  << " bounds below 2^-6 |act|; bound / |act| median "
                  << ratios[ratios.size() / 2] << ", p90 "
                  << ratios[ratios.size() * 9 / 10] << "; worst error/bound "
                  << worstUse << "; largest bound / row max " << worstOfRow);
    CHECK(checked == tokens * topk * inter);
    // Tight enough to keep an element check meaningful: the median bound
    // below an FP8 E4M3 step (2^-3 of the value) and none above 2^-5 of
    // its route's largest activation.
    CHECK(ratios[ratios.size() / 2] < 0x1p-3);
    CHECK(worstOfRow < 0x1p-5);
    // The bound is not loose beyond use: real errors reach a visible part.
    CHECK(worstUse > 1e-4);
  }
}
