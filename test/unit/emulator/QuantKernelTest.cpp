//===- QuantKernelTest.cpp - the input quantisation vs the reference ------===//
//
// The moe.quant kernel on the emulator: its FP8 codes and E8M0 scales must
// be bit-identical to ref::quantizeFp8Row on the same BF16 values (computed
// here directly, not through the harness) for token counts that leave the
// last workgroup partly or wholly masked, for num_tokens = 0, and for
// hand-picked blocks at the edges of the recipe: all zero, BF16's largest
// and subnormal values, amax at and just past 448 * 2^e, around the 1e-4
// floor, and FP8 rounding ties.
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/Harness/StageHarness.h"
#include "moec/grid_rule.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace moec;
using namespace moec::emu;

namespace {

constexpr int64_t kHidden = 512;

test::BuiltStage buildQuant(int64_t waves) {
  StageSpec spec;
  spec.stage = moec::abi::Stage::Quant;
  spec.fields = {{"hidden", std::to_string(kHidden)},
                 {"intermediate", "256"},
                 {"experts", "16"},
                 {"top_k", "4"},
                 {"ep", "4"},
                 {"waves", std::to_string(waves)}};
  return test::buildStageOrFail(spec);
}

/// ref::quantizeFp8Row over every token of `bits` ([tokens, H] BF16).
void referenceQuant(const std::vector<uint16_t> &bits, int64_t tokens,
                    std::vector<uint8_t> &codes, std::vector<uint8_t> &scales) {
  codes.assign(size_t(tokens * kHidden), 0);
  scales.assign(size_t(tokens * kHidden / 32), 0);
  std::vector<double> row(kHidden);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h)
      row[size_t(h)] = ref::decodeBf16(bits[size_t(t * kHidden + h)]);
    ref::quantizeFp8Row(row.data(), kHidden, &codes[size_t(t * kHidden)],
                        &scales[size_t(t * kHidden / 32)]);
  }
}

/// Runs the harness on `data` and requires the kernel's bytes to equal
/// ref::quantizeFp8Row's, every one written, nothing past the end.
void requireBitIdentical(const test::BuiltStage &quant, LayerData &data,
                         const DataOptions &options) {
  StageOutcome outcome;
  std::string error;
  const bool ran = mlir::succeeded(
      quant.harness->check(data, 0, options, LaunchConfig(), outcome, error));
  INFO(error);
  REQUIRE(ran);
  INFO(outcome.summary);
  const int64_t tokens = data.batch.tokens;
  std::vector<uint8_t> codes, scales;
  referenceQuant(data.batch.hiddenBf16, tokens, codes, scales);
  const BufferSnapshot &out = outcome.outputs.at("out");
  const BufferSnapshot &outScale = outcome.outputs.at("out_scale");
  REQUIRE(out.bytes.size() >= codes.size());
  REQUIRE(outScale.bytes.size() >= scales.size());
  int64_t codeMismatches = 0, scaleMismatches = 0, unwritten = 0, beyond = 0;
  for (size_t i = 0; i < codes.size(); ++i) {
    codeMismatches += out.bytes[i] != codes[i];
    unwritten += !out.written[i];
  }
  for (size_t i = 0; i < scales.size(); ++i) {
    scaleMismatches += outScale.bytes[i] != scales[i];
    unwritten += !outScale.written[i];
  }
  for (size_t i = codes.size(); i < out.written.size(); ++i)
    beyond += out.written[i] != 0;
  for (size_t i = scales.size(); i < outScale.written.size(); ++i)
    beyond += outScale.written[i] != 0;
  CHECK(codeMismatches == 0);
  CHECK(scaleMismatches == 0);
  CHECK(unwritten == 0);
  CHECK(beyond == 0);
  CHECK(outcome.run.totalFindings() == 0);
  CHECK(outcome.pass);
  // The kernel's rows are what W13 reads next.
  REQUIRE(data.tokens.codes.size() == codes.size());
  CHECK(std::equal(data.tokens.codes.begin(), data.tokens.codes.end(),
                   out.bytes.begin()));
  CHECK(std::equal(data.tokens.scales.begin(), data.tokens.scales.end(),
                   outScale.bytes.begin()));
}

} // namespace

TEST_CASE("quant kernel: codes and scales bit-identical to "
          "ref::quantizeFp8Row, masked tails",
          "[quant]") {
  // 16 blocks per token: with 256 lanes a workgroup covers 16 tokens, so
  // 1, 31 and 33 tokens leave the last workgroup partly masked (33: 16 of
  // its 256 lanes work); with 64 lanes 31 tokens do not fill the last one.
  for (int64_t waves : {1, 4}) {
    const test::BuiltStage quant = buildQuant(waves);
    for (int64_t tokens : {1, 31, 33, 70}) {
      INFO("waves " << waves << ", " << tokens << " tokens");
      DataOptions options;
      options.seed = 40 + uint64_t(tokens);
      options.tokens = tokens;
      LayerData data;
      requireBitIdentical(quant, data, options);
      // The generated tokens are not all zero and hold the edge blocks the
      // harness mixes in (checked where there are enough blocks to hit).
      int64_t zeroBlocks = 0, largeBlocks = 0, nonZero = 0;
      for (int64_t b = 0; b < tokens * kHidden / 32; ++b) {
        double amax = 0.0;
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i)
          amax = std::max(amax, std::fabs(double(ref::decodeBf16(
                                    data.batch.hiddenBf16[size_t(i)]))));
        zeroBlocks += amax == 0.0;
        largeBlocks += amax >= 1024.0;
        nonZero += amax > 0.0;
      }
      CHECK(nonZero > 0);
      if (tokens >= 31) {
        CHECK(zeroBlocks > 0);
        CHECK(largeBlocks > 0);
      }
    }
  }
}

TEST_CASE("quant kernel: the recipe's edge cases, bit for bit", "[quant]") {
  const int64_t tokens = 3;
  std::vector<uint16_t> bits(size_t(tokens * kHidden));
  // Seeded normals everywhere, then one edge case per block of token 0 and
  // 1 (token 2 stays ordinary).
  ref::CounterRandom random(77, 1);
  for (size_t i = 0; i < bits.size(); ++i)
    bits[i] = ref::encodeBf16(random.normal(i));
  auto block = [&](int64_t index, auto value) {
    for (int64_t i = 0; i < 32; ++i)
      bits[size_t(32 * index + i)] = value(i);
  };
  const uint16_t bf16Max = 0x7F7F, bf16MinSubnormal = 0x0001;
  // All zero, and all negative zero: the 1e-4 floor sets the scale.
  block(0, [](int64_t) { return uint16_t(0); });
  block(1, [](int64_t) { return uint16_t(0x8000); });
  // BF16's largest finite magnitudes beside ordinary values.
  block(2, [&](int64_t i) {
    return i == 3 ? bf16Max : i == 9 ? uint16_t(bf16Max | 0x8000)
                                     : ref::encodeBf16(double(i) - 16.0);
  });
  // BF16 subnormals only (FP32 subnormals once widened).
  block(3, [&](int64_t i) {
    return uint16_t((bf16MinSubnormal + i) | (i % 2 ? 0x8000 : 0));
  });
  // amax exactly 448 * 2^3 (no extra step), and just above 1.75 * 2^k
  // (mantissa past 0x600000: one step more).
  block(4, [](int64_t i) {
    return ref::encodeBf16(i == 0 ? 448.0 * 8 : double(i) * 0.37);
  });
  block(5, [](int64_t i) {
    return ref::encodeBf16(i == 0 ? -1.7578125 * 64 : double(i) * 0.37);
  });
  // amax just below and just above the 1e-4 floor.
  block(6, [](int64_t i) { return ref::encodeBf16(i == 5 ? 9.9e-5 : 1e-6); });
  block(7, [](int64_t i) { return ref::encodeBf16(i == 5 ? 1.02e-4 : -3e-5); });
  // Scale 1 (amax 448): FP8 rounding ties between codes, normal and
  // subnormal, in both signs; RNE picks the even code.
  const double ties[] = {448.0,        1.0625,       1.1875,       3.0625,
                         -1.0625,      -2.375,       std::ldexp(1.0, -10),
                         3 * std::ldexp(1.0, -10),   5 * std::ldexp(1.0, -10),
                         -3 * std::ldexp(1.0, -10),  104.0,        -120.0,
                         240.0,        0.0};
  block(8, [&](int64_t i) {
    return ref::encodeBf16(ties[size_t(i) % std::size(ties)]);
  });
  // A block 2^100 larger than the normals, and one 2^-100 smaller.
  block(9, [&](int64_t i) {
    return ref::encodeBf16(random.normal(uint64_t(1000 + i)) *
                           std::ldexp(1.0, 100));
  });
  block(10, [&](int64_t i) {
    return ref::encodeBf16(random.normal(uint64_t(2000 + i)) *
                           std::ldexp(1.0, -100));
  });
  // Token 1: every block at a different power of two.
  for (int64_t b = 0; b < kHidden / 32; ++b)
    block(kHidden / 32 + b, [&](int64_t i) {
      return ref::encodeBf16(random.normal(uint64_t(3000 + 32 * b + i)) *
                             std::ldexp(1.0, int(8 * b) - 60));
    });

  for (int64_t waves : {1, 2}) {
    INFO("waves " << waves);
    const test::BuiltStage quant = buildQuant(waves);
    LayerData data;
    data.batch.tokens = tokens;
    data.batch.hiddenBf16 = bits;
    data.batch.topkIds.assign(size_t(tokens * 4), 0);
    data.batch.topkWeights.assign(size_t(tokens * 4), 0.25f);
    data.topK = 4;
    data.hasBatch = true;
    requireBitIdentical(quant, data, DataOptions());
    // The edges did reach the kernel: the huge block's scale is large, the
    // zero block's is the floor's (2^-22 -> code 105).
    CHECK(data.tokens.scales[9] > 127 + 90);
    CHECK(data.tokens.scales[0] == 105);
  }
}

TEST_CASE("quant kernel: num_tokens = 0 is launchable and writes nothing",
          "[quant]") {
  const test::BuiltStage quant = buildQuant(4);
  // The manifest's grid rule gives one workgroup, not zero.
  const rt::RuleVariable variables[] = {{"num_tokens", 0}, {"H", kHidden}};
  int64_t grid = 0;
  std::string error;
  REQUIRE(rt::evaluateGridRule(quant.kernel->description.abi.gridX, variables,
                               std::size(variables), grid, error));
  CHECK(grid == 1);
  DataOptions options;
  options.tokens = 0;
  LayerData data;
  StageOutcome outcome;
  const bool ran = mlir::succeeded(
      quant.harness->check(data, 0, options, LaunchConfig(), outcome, error));
  INFO(error);
  REQUIRE(ran);
  INFO(outcome.summary);
  CHECK(outcome.launched);
  CHECK(outcome.run.stats.workgroups == 1);
  for (const char *name : {"out", "out_scale"})
    for (uint8_t written : outcome.outputs.at(name).written)
      CHECK(written == 0);
  CHECK(outcome.pass);
}

TEST_CASE("quant kernel: grid rule covers every block with one lane each",
          "[quant]") {
  const test::BuiltStage quant = buildQuant(4);
  const std::string &rule = quant.kernel->description.abi.gridX;
  CHECK(rule == "max(1, ceil(num_tokens * H / 8192))");
  for (int64_t tokens : {1, 15, 16, 17, 1000}) {
    const rt::RuleVariable variables[] = {{"num_tokens", tokens},
                                          {"H", 5120}};
    int64_t grid = 0;
    std::string error;
    REQUIRE(rt::evaluateGridRule(rule, variables, std::size(variables), grid,
                                 error));
    const int64_t blocks = tokens * 5120 / 32;
    CHECK(grid * 256 >= blocks);
    CHECK((grid - 1) * 256 < blocks);
  }
}
