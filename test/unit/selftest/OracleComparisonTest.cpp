// compareWithOracle: the self-test's verdict on a layer's output, checked
// with outputs made from the oracle's own (so the oracle, not this test,
// supplies every expected value), and with the outputs of planted faults
// (the oracle run over altered weights or another activation).

#include "moec/Selftest/Cases.h"
#include "moec/Selftest/Oracle.h"
#include "SelftestTestSupport.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Routing.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>

using namespace moec;
using namespace moec::selftest;

namespace {

/// A small table's weights from `seed`, and the oracle over them.
struct SmallOracle {
  harness::TableFacts facts;
  SelftestWeights weights;
  harness::HostLayerWeights host;
  OracleCase oracle;
  SmallOracle(bool fused, uint64_t seed, uint32_t ep)
      : facts(test::smallFacts(fused, 256, 128, 4)) {
    generateWeights(seed, facts, weights, host);
    oracle.facts = &facts;
    oracle.weights = &weights;
    oracle.ep = ep;
  }
};

/// The oracle's output as the kernels write it (BF16).
std::vector<uint16_t> bf16Of(const std::vector<float> &values) {
  std::vector<uint16_t> bits;
  for (float value : values)
    bits.push_back(ref::encodeBf16(value));
  return bits;
}

} // namespace

TEST_CASE("the oracle's own output passes; zero, unwritten and leaked rows fail",
          "[selftest][oracle]") {
  const SmallOracle small(/*fused=*/true, 3, 1);
  const harness::TableFacts &facts = small.facts;
  const OracleCase &oracle = small.oracle;
  CHECK(small.host.experts == 4);
  CHECK_FALSE(small.host.w13.empty());
  const uint32_t M = 8, H = facts.problem.hidden;
  const std::vector<ref::TokenBatch> batches =
      caseBatches(facts, 1, {M, "random"}, 11);

  // Anything first, to learn the oracle's output.
  std::vector<std::vector<uint16_t>> got(1, std::vector<uint16_t>(M * H, 0));
  OracleComparison zero;
  REQUIRE(compareWithOracle(oracle, batches, got, zero).ok());
  REQUIRE(zero.oracleOutputs.size() == 1);
  REQUIRE(zero.oracleOutputs[0].size() == size_t(M * H));
  CHECK_FALSE(zero.pass);
  CHECK(zero.distance.relL2 == Approx(1.0));

  got[0] = bf16Of(zero.oracleOutputs[0]);
  OracleComparison same;
  REQUIRE(compareWithOracle(oracle, batches, got, same).ok());
  CHECK(same.pass);
  CHECK(same.distance.relL2 < kLayerRelL2Bound);
  CHECK(same.zeroRowsWrong == 0);
  CHECK(same.unwritten == 0);

  SECTION("an element left as the poison is unwritten") {
    got[0][5] = 0xFFFF;
    OracleComparison poisoned;
    REQUIRE(compareWithOracle(oracle, batches, got, poisoned).ok());
    CHECK(poisoned.unwritten == 1);
    CHECK_FALSE(poisoned.pass);
  }
  SECTION("a token without a valid route must come out exactly zero") {
    // Token 3 has no valid route (caseBatches).
    for (int64_t k = 0; k < facts.problem.topK; ++k)
      REQUIRE_FALSE(ref::isValidExpert(
          batches[0].topkIds[size_t(3 * facts.problem.topK + k)],
          facts.problem.experts));
    got[0][3 * H + 1] = ref::encodeBf16(1.0);
    OracleComparison leaked;
    REQUIRE(compareWithOracle(oracle, batches, got, leaked).ok());
    CHECK(leaked.zeroRowsWrong == 1);
    CHECK_FALSE(leaked.pass);
  }
}

TEST_CASE("unfused ranks' partial outputs are summed before the comparison",
          "[selftest][oracle]") {
  const uint32_t M = 8, ep = 2;
  const SmallOracle small(/*fused=*/false, 5, ep);
  const harness::TableFacts &facts = small.facts;
  const OracleCase &oracle = small.oracle;
  const uint32_t H = facts.problem.hidden;
  const std::vector<ref::TokenBatch> batches =
      caseBatches(facts, ep, {M, "random"}, 13);
  std::vector<std::vector<uint16_t>> got(ep, std::vector<uint16_t>(M * H, 0));
  OracleComparison first;
  REQUIRE(compareWithOracle(oracle, batches, got, first).ok());
  // One oracle run for the one batch both ranks serve.
  REQUIRE(first.oracleOutputs.size() == 1);
  // The whole output on rank 0 and zeros on rank 1 sum to the oracle's.
  got[0] = bf16Of(first.oracleOutputs[0]);
  OracleComparison summed;
  REQUIRE(compareWithOracle(oracle, batches, got, summed).ok());
  CHECK(summed.pass);
  // Both ranks claiming the whole output is twice the oracle's.
  got[1] = got[0];
  OracleComparison doubled;
  REQUIRE(compareWithOracle(oracle, batches, got, doubled).ok());
  CHECK_FALSE(doubled.pass);
  CHECK(doubled.distance.relL2 == Approx(1.0).epsilon(0.01));
}

namespace {

/// `inner`'s weights with every expert's rows and scales passed through
/// `alter`: what a kernel with a planted fault computes with, as the oracle
/// sees it.
class AlteredWeights final : public ref::WeightSource {
public:
  using Alter = std::function<void(int64_t expert, std::vector<uint8_t> &elements,
                                   std::vector<uint8_t> &scales)>;
  AlteredWeights(const ref::WeightSource &inner, Alter alter)
      : inner_(inner), alter_(std::move(alter)) {}
  int64_t numExperts() const override { return inner_.numExperts(); }
  int64_t rows() const override { return inner_.rows(); }
  int64_t depth() const override { return inner_.depth(); }
  ref::ExpertRows expertRows(int64_t expert, int64_t rowBegin, int64_t rowCount,
                             ref::WeightScratch &scratch) const override {
    ref::WeightScratch whole;
    const ref::ExpertRows all = inner_.expertRows(expert, 0, rows(), whole);
    const int64_t rowBytes = ref::weightRowBytes(all.format, depth());
    const int64_t scaleBytes = depth() / 32;
    std::vector<uint8_t> elements(all.elements, all.elements + rows() * rowBytes);
    std::vector<uint8_t> scales(all.scales, all.scales + rows() * scaleBytes);
    alter_(expert, elements, scales);
    scratch.elements.assign(elements.begin() + rowBegin * rowBytes,
                            elements.begin() + (rowBegin + rowCount) * rowBytes);
    scratch.scales.assign(scales.begin() + rowBegin * scaleBytes,
                          scales.begin() + (rowBegin + rowCount) * scaleBytes);
    return {all.format, scratch.elements.data(), scratch.scales.data()};
  }

private:
  const ref::WeightSource &inner_;
  Alter alter_;
};

/// The layer output, as BF16 bits, of the oracle run with `config` over
/// `w13` and `w2`: a faulty kernel's output.
std::vector<uint16_t> layerOutput(const ref::TpMoeConfig &config,
                                  const ref::WeightSource &w13,
                                  const ref::WeightSource &w2,
                                  const ref::TokenBatch &batch) {
  ref::StageResults results;
  REQUIRE(ref::runTpMoe(config, w13, w2, batch, results).ok());
  return bf16Of(results.output);
}

} // namespace

TEST_CASE("planted faults fail the self-test's verdict", "[selftest][oracle]") {
  SmallOracle small(/*fused=*/true, 7, 1);
  const harness::TableFacts &facts = small.facts;
  const uint32_t M = 16, H = facts.problem.hidden, I = facts.problem.intermediate;
  std::vector<ref::TokenBatch> batches = caseBatches(facts, 1, {M, "random"}, 17);
  // Tokens exactly representable in FP8 1x32: the kernels' input
  // quantisation is then exact, and the oracle's exact mode differs from
  // its quantisation-faithful one only in the W13 intermediate.
  ref::TokenBatch &batch = batches[0];
  for (uint32_t t = 0; t < M; ++t) {
    std::vector<double> row(H), fp8(H);
    std::vector<uint8_t> codes(H), scales(H / 32);
    for (uint32_t h = 0; h < H; ++h)
      row[h] = ref::decodeBf16(batch.hiddenBf16[t * H + h]);
    ref::quantizeFp8Row(row.data(), H, codes.data(), scales.data());
    ref::dequantizeFp8Row(codes.data(), scales.data(), H, fp8.data());
    for (uint32_t h = 0; h < H; ++h)
      batch.hiddenBf16[t * H + h] = ref::encodeBf16(fp8[h]);
  }
  ref::TpMoeConfig config;
  config.shape = {H, I, facts.problem.experts, facts.problem.topK};
  config.mTile = 16;
  config.gateUpInterleave = facts.interleave;
  const ref::WeightSource &w13 = *small.weights.w13, &w2 = *small.weights.w2;

  auto verdict = [&](const OracleCase &oracle, std::vector<uint16_t> output) {
    OracleComparison comparison;
    REQUIRE(compareWithOracle(oracle, batches, {std::move(output)}, comparison).ok());
    INFO("rel L2 " << comparison.distance.relL2 << ", " << comparison.overBound
                   << " elements over their bound, " << comparison.distance.nonFinite
                   << " non-finite");
    return comparison;
  };
  // The correct kernel passes: the fault-free control of every case below.
  const OracleComparison correct =
      verdict(small.oracle, layerOutput(config, w13, w2, batch));
  REQUIRE(correct.pass);

  SECTION("a NaN (0x7FC0) in one valid row") {
    std::vector<uint16_t> output = layerOutput(config, w13, w2, batch);
    output[0 * H + 5] = 0x7FC0; // token 0 has valid routes (caseBatches)
    const OracleComparison c = verdict(small.oracle, output);
    CHECK(c.distance.nonFinite == 1);
    CHECK_FALSE(c.pass);
  }
  SECTION("the FP8 quantisation of the intermediate skipped") {
    ref::TpMoeConfig unquantised = config;
    unquantised.mode = ref::OracleMode::Exact;
    const OracleComparison c =
        verdict(small.oracle, layerOutput(unquantised, w13, w2, batch));
    CHECK(c.overBound > 0);
    CHECK(c.distance.relL2 > kLayerRelL2Bound);
    CHECK_FALSE(c.pass);
  }
  SECTION("SiLU where the table says GPT-OSS SwiGLU") {
    OracleCase gptOss = small.oracle;
    gptOss.gptOssSwiglu = true;
    const OracleComparison c = verdict(gptOss, layerOutput(config, w13, w2, batch));
    CHECK(c.overBound > 0);
    CHECK_FALSE(c.pass);
  }
  SECTION("gate and up swapped") {
    // Gate rows then up rows (interleave 0): row r trades places with r +- I.
    REQUIRE(facts.interleave == 0);
    const AlteredWeights swapped(w13, [&](int64_t, std::vector<uint8_t> &elements,
                                          std::vector<uint8_t> &scales) {
      const size_t half = elements.size() / 2, scaleHalf = scales.size() / 2;
      std::rotate(elements.begin(), elements.begin() + half, elements.end());
      std::rotate(scales.begin(), scales.begin() + scaleHalf, scales.end());
    });
    const OracleComparison c =
        verdict(small.oracle, layerOutput(config, swapped, w2, batch));
    CHECK(c.overBound > 0);
    CHECK_FALSE(c.pass);
  }
  SECTION("one expert's W2 scales off by one exponent") {
    const AlteredWeights scaled(w2, [](int64_t expert, std::vector<uint8_t> &,
                                       std::vector<uint8_t> &scales) {
      if (expert == 1)
        for (uint8_t &scale : scales)
          ++scale;
    });
    const OracleComparison c =
        verdict(small.oracle, layerOutput(config, w13, scaled, batch));
    CHECK(c.overBound > 0);
    CHECK_FALSE(c.pass);
  }
}
