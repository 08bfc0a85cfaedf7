//===- A4W4KernelTest.cpp - MXFP4 activation kernels vs the oracle --------===//
//
// The A4W4 kernels (problem.activation / output f4E2M1FN) lowered from moe
// ops and run on the emulator:
//
// - moe.quant to MXFP4: every E2M1 code and E8M0 scale bit-identical to
//   ref::quantizeFp4ActivationRow (AITER's rule) on seeded random BF16
//   tokens with edge blocks mixed in (all zero, -0, amax significand exactly
//   1.75 and just below, saturation, every E2M1 rounding tie, BF16's largest
//   value, BF16 subnormals, NaN and Inf blocks); outputs poisoned first,
//   every byte written, nothing past the end.
// - A two-stage layer at a small shape (quant -> W13 -> W2, the combine on
//   the host in FP32) with an MXFP4 or an FP8 intermediate, against
//   ref::runTpMoe in QuantFaithful mode with the same formats: the quantised
//   tokens bit-identical, the intermediate's scales and codes equal but for
//   elements at a rounding boundary, and the BF16 output within the oracle's
//   per-element bound (StageResults::outputTolerance) and a relative L2 of
//   2^-7 (kLayerOutputRelL2Bound, docs/numerics.md).
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include "moec/Compiler/Pipeline.h"
#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Tolerance.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace moec;
using namespace moec::emu;

namespace {

constexpr int64_t kHidden = 512, kInter = 256, kExperts = 8, kTopK = 2;

/// A moe op lowered to kernel IR in test::stageContext().
using LoweredStage = test::ParsedKernel;

std::string problemText(const char *activation, const char *output) {
  return "#moe.problem<hidden = " + std::to_string(kHidden) +
         ", intermediate = " + std::to_string(kInter) +
         ", experts = " + std::to_string(kExperts) +
         ", top_k = " + std::to_string(kTopK) + ", activation = " +
         activation + ", weight = f4E2M1FN, output = " + output + ">";
}

/// Parses one moe op and lowers it (moe-lower-to-kernel, canonicalize,
/// CSE); fails the test with the diagnostics when either step fails.
LoweredStage lowerStage(const std::string &text) {
  LoweredStage stage;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(
      &test::stageContext(), [&](mlir::Diagnostic &d) {
        diagnostics += d.str() + "\n";
        return mlir::success();
      });
  stage.module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &test::stageContext());
  INFO(text << "\n" << diagnostics);
  REQUIRE(stage.module);
  REQUIRE(mlir::succeeded(lowerToKernelIR(*stage.module)));
  stage.module->walk([&](mlir::gpu::GPUFuncOp func) { stage.func = func; });
  REQUIRE(stage.func);
  return stage;
}

LoweredStage lowerQuant() {
  return lowerStage("moe.quant @q problem(" +
                    problemText("bf16", "f4E2M1FN") + ")");
}

/// Runs `stage` over `grid` workgroups; fails the test on an error or a
/// detector finding.
void runStage(LoweredStage &stage, GlobalMemory &memory,
              const std::vector<KernelArgValue> &args,
              std::array<int64_t, 3> grid) {
  LaunchConfig launch;
  launch.grid = grid;
  RunResult result = test::runOrFail(stage, memory, args, launch);
  CHECK(result.totalFindings() == 0);
}

/// Runs the MXFP4 quant kernel on `bits` ([tokens, H] BF16) with poisoned
/// outputs `slack` bytes longer than needed; returns codes and scales with
/// the slack, and counts bytes left unwritten inside and written outside.
struct QuantRun {
  std::vector<uint8_t> codes, scales;
  int64_t unwritten = 0, beyond = 0;
};
QuantRun runQuant(LoweredStage &quant, const std::vector<uint16_t> &bits,
                  int64_t tokens) {
  constexpr size_t kSlack = 256;
  GlobalMemory memory;
  const unsigned x = test::addInput(memory, "x", bits);
  const size_t codeBytes = size_t(tokens * kHidden / 2),
               scaleBytes = size_t(tokens * kHidden / 32);
  const unsigned out = memory.addBuffer("out", codeBytes + kSlack);
  const unsigned outScale = memory.addBuffer("out_scale", scaleBytes + kSlack);
  memory.poison(out);
  memory.poison(outScale);
  // One lane per block; extra workgroups past the last block write nothing.
  const int64_t lanes = 256, blocks = tokens * kHidden / 32;
  std::vector<KernelArgValue> args = test::bufferArgs({x, out, outScale});
  args.push_back(KernelArgValue::makeScalar(tokens));
  runStage(quant, memory, args, {std::max<int64_t>(1, (blocks + lanes - 1) / lanes) + 1, 1, 1});
  QuantRun run;
  run.codes.assign(memory.data(out), memory.data(out) + codeBytes);
  run.scales.assign(memory.data(outScale), memory.data(outScale) + scaleBytes);
  for (size_t i = 0; i < codeBytes + kSlack; ++i)
    (i < codeBytes ? run.unwritten : run.beyond) +=
        (memory.written(out)[i] != 0) != (i < codeBytes);
  for (size_t i = 0; i < scaleBytes + kSlack; ++i)
    (i < scaleBytes ? run.unwritten : run.beyond) +=
        (memory.written(outScale)[i] != 0) != (i < scaleBytes);
  return run;
}

/// ref::quantizeFp4ActivationRow over every token of `bits`.
void referenceQuant(const std::vector<uint16_t> &bits, int64_t tokens,
                    std::vector<uint8_t> &codes, std::vector<uint8_t> &scales) {
  codes.assign(size_t(tokens * kHidden / 2), 0);
  scales.assign(size_t(tokens * kHidden / 32), 0);
  std::vector<double> row(kHidden);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < kHidden; ++h)
      row[size_t(h)] = ref::decodeBf16(bits[size_t(t * kHidden + h)]);
    ref::quantizeFp4ActivationRow(row.data(), kHidden,
                                  &codes[size_t(t * kHidden / 2)],
                                  &scales[size_t(t * kHidden / 32)]);
  }
}

/// Overwrites block `block` of `bits` with 32 values from `make(i)`.
template <typename F> void setBlock(std::vector<uint16_t> &bits, size_t block,
                                    F make) {
  for (size_t i = 0; i < 32; ++i)
    bits[32 * block + i] = ref::encodeBf16(make(i));
}

} // namespace

TEST_CASE("A4W4 quant kernel: MXFP4 codes and scales bit-identical to "
          "ref::quantizeFp4ActivationRow",
          "[a4w4][quant]") {
  LoweredStage quant = lowerQuant();
  for (int64_t tokens : {1, 7, 33}) {
    INFO(tokens << " tokens");
    std::mt19937_64 rng(0xA4A4 + uint64_t(tokens));
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int> exponent(-20, 20);
    std::vector<uint16_t> bits(size_t(tokens * kHidden));
    for (size_t block = 0; block < bits.size() / 32; ++block) {
      const double scale = std::ldexp(1.0, exponent(rng));
      setBlock(bits, block, [&](size_t) { return normal(rng) * scale; });
    }
    // Edge blocks (where the batch has them): each value below is exact in
    // BF16.
    const size_t blocks = bits.size() / 32;
    auto edge = [&](size_t block, auto make) {
      if (block < blocks)
        setBlock(bits, block, make);
    };
    // All zero, and all -0 (codes 0x8, scale 0).
    edge(0, [](size_t) { return 0.0; });
    edge(1, [](size_t) { return -0.0; });
    // amax significand exactly 1.75 (rounds up: scale 2^(e-1)) and just
    // below (1.75 - 2^-7: scale 2^(e-2), elements up to 6.97 saturate).
    edge(2, [](size_t i) { return i == 5 ? -1.75 * 8 : 0.3 * double(i % 7); });
    edge(3, [](size_t i) {
      return i == 9 ? (1.75 - 0.0078125) * 8 : -0.37 * double(i % 5);
    });
    // Every E2M1 rounding tie and its neighbours at scale 1 (amax 6.5 with
    // significand 1.625: scale 2^0): 0.25 .. 5 tie to even, both signs.
    edge(4, [](size_t i) {
      const double ties[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.5};
      const double t = ties[i % 8];
      const double nudge = i / 8 == 1 ? t / 32 : i / 8 == 2 ? -t / 32 : 0;
      return (i / 8 == 3 ? -1.0 : 1.0) * (t + (t == 6.5 ? 0 : nudge));
    });
    // BF16's largest value (the rounding leaves FP32's range: scale 254),
    // and BF16 subnormals (scale code 0).
    edge(5, [](size_t i) {
      return (i % 2 ? -1.0 : 1.0) * std::ldexp(255.0 / 128, 127 - int(i % 3));
    });
    edge(6, [](size_t i) { return std::ldexp(double(i + 1), -133); });
    // A NaN block and an Inf block: scale 0xFF, zero codes.
    edge(7, [](size_t i) {
      return i == 3 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
    });
    edge(8, [](size_t i) {
      return i == 30 ? -std::numeric_limits<double>::infinity() : 2.0;
    });
    std::vector<uint8_t> codes, scales;
    referenceQuant(bits, tokens, codes, scales);
    QuantRun run = runQuant(quant, bits, tokens);
    int64_t codeMismatches = 0, scaleMismatches = 0;
    for (size_t i = 0; i < codes.size(); ++i)
      codeMismatches += run.codes[i] != codes[i];
    for (size_t i = 0; i < scales.size(); ++i)
      scaleMismatches += run.scales[i] != scales[i];
    CHECK(codeMismatches == 0);
    CHECK(scaleMismatches == 0);
    CHECK(run.unwritten == 0);
    CHECK(run.beyond == 0);
    if (tokens == 33) {
      // The edge blocks are there, and the oracle gives what the comments
      // say (so the comparison above covered them).
      CHECK(scales[0] == 0);
      CHECK(codes[16] == 0x88); // -0 pairs
      CHECK(scales[2] == 127 + 4 - 2); // amax 14 = 1.75 * 2^3 rounds up
      CHECK(scales[3] == 127 + 3 - 2); // amax 13.94: 2^1, 6.97 saturates
      CHECK(codes[3 * 16 + 4] == 0x79); // -0.55 -> 0x9, 6.97 -> 6 (0x7)
      CHECK(scales[4] == 127);
      CHECK(scales[5] == 254);
      CHECK(scales[6] == 0);
      CHECK(scales[7] == 0xFF);
      CHECK(scales[8] == 0xFF);
      CHECK(codes[7 * 16] == 0);
    }
  }
}

namespace {

/// The host's combine as a correct kernel computes it: per token the FP32
/// sum over its valid slots of weight * BF16 row, in slot order, rounded to
/// BF16.
std::vector<double> combineBf16(const std::vector<uint16_t> &rows,
                                const ref::TokenBatch &batch) {
  std::vector<double> out(size_t(batch.tokens * kHidden));
  for (int64_t t = 0; t < batch.tokens; ++t)
    for (int64_t h = 0; h < kHidden; ++h) {
      float sum = 0.0f;
      for (int64_t k = 0; k < kTopK; ++k) {
        const int64_t r = t * kTopK + k;
        if (!ref::isValidExpert(batch.topkIds[size_t(r)], kExperts))
          continue;
        sum += batch.topkWeights[size_t(r)] *
               float(ref::decodeBf16(rows[size_t(r * kHidden + h)]));
      }
      out[size_t(t * kHidden + h)] = ref::decodeBf16(ref::encodeBf16(sum));
    }
  return out;
}

void runA4W4Layer(ref::ActivationFormat intermediate) {
  const bool fp4Mid = intermediate == ref::ActivationFormat::Mxfp4;
  const char *midType = fp4Mid ? "f4E2M1FN" : "f8E4M3FN";
  constexpr int64_t kTileM = 32, kTokens = 40;
  const ref::MoeShape shape{kHidden, kInter, kExperts, kTopK};
  const ref::TokenBatch batch =
      ref::generateBatch(0xA4F4, 0, kTokens, shape, ref::RoutingOptions());
  const ref::GeneratedMxfp4Weights w13(0xA4F4, 13, kExperts, 2 * kInter,
                                       kHidden,
                                       ref::defaultScaleExponent(kHidden));
  const ref::GeneratedMxfp4Weights w2(0xA4F4, 2, kExperts, kHidden, kInter,
                                      ref::defaultScaleExponent(kInter));
  ref::TpMoeConfig config;
  config.shape = shape;
  config.mTile = kTileM;
  config.gateUpInterleave = 0;
  config.inputFormat = ref::ActivationFormat::Mxfp4;
  config.intermediateFormat = intermediate;
  config.outputTolerance = true;
  ref::StageResults want;
  REQUIRE(ref::runTpMoe(config, w13, w2, batch, want));

  std::vector<uint8_t> w13Codes, w13Scales, w2Codes, w2Scales;
  ref::materializeWeights(w13, w13Codes, w13Scales);
  ref::materializeWeights(w2, w2Codes, w2Scales);
  const ref::SortedRoutes &sorted = want.routes;
  const int64_t numRoutes = kTokens * kTopK;
  const int64_t numSorted = int64_t(sorted.routeIds.size());

  // Stage 0: the tokens to MXFP4, bit-identical to the oracle's input.
  LoweredStage quant = lowerQuant();
  QuantRun tokens = runQuant(quant, batch.hiddenBf16, kTokens);
  CHECK(tokens.codes == want.inputCodes);
  CHECK(tokens.scales == want.inputScales);

  // Stage 1: W13 with FP4 A tiles, the intermediate in `intermediate`.
  LoweredStage w13Stage = lowerStage(
      "moe.w13 @w13 problem(" + problemText("f4E2M1FN", midType) +
      ") tile(#moe.tile<m = 32, n = 64>)");
  GlobalMemory memory;
  const unsigned a = test::addInput(memory, "a", tokens.codes);
  const unsigned aScale = test::addInput(memory, "a_scale", tokens.scales);
  const unsigned b13 = test::addInput(memory, "b", w13Codes);
  const unsigned b13Scale = test::addInput(memory, "b_scale", w13Scales);
  const unsigned routes = test::addInput(memory, "sorted_routes", sorted.routeIds);
  const unsigned experts = test::addInput(memory, "tile_experts", sorted.tileExperts);
  const int64_t midRowBytes = fp4Mid ? kInter / 2 : kInter;
  const unsigned mid = memory.addBuffer("out", size_t(numRoutes * midRowBytes));
  const unsigned midScale = memory.addBuffer("out_scale", size_t(numRoutes * kInter / 32));
  memory.poison(mid);
  memory.poison(midScale);
  std::vector<KernelArgValue> args13 =
      test::bufferArgs({a, aScale, b13, b13Scale, routes, experts, mid, midScale});
  args13.push_back(KernelArgValue::makeScalar(kTokens));
  args13.push_back(KernelArgValue::makeScalar(numSorted));
  runStage(w13Stage, memory, args13, {kInter / 64, numSorted / kTileM, 1});

  // Every listed route's intermediate row is written; codes and scales
  // equal the oracle's but where the FP32 GEMM lands across a rounding
  // boundary (a handful).
  const std::vector<int32_t> listed = ref::listedRoutes(sorted);
  int64_t unwritten = 0, scaleDiffs = 0, codeDiffs = 0;
  for (int32_t r : listed) {
    for (int64_t i = 0; i < midRowBytes; ++i) {
      const size_t at = size_t(r * midRowBytes + i);
      unwritten += memory.written(mid)[at] == 0;
      codeDiffs += memory.data(mid)[at] != want.intermediateCodes[at];
    }
    for (int64_t i = 0; i < kInter / 32; ++i) {
      const size_t at = size_t(r * kInter / 32 + i);
      unwritten += memory.written(midScale)[at] == 0;
      scaleDiffs += memory.data(midScale)[at] != want.intermediateScales[at];
    }
  }
  INFO(codeDiffs << " of " << listed.size() * midRowBytes
                 << " intermediate code bytes and " << scaleDiffs << " of "
                 << listed.size() * kInter / 32 << " scales differ");
  CHECK(unwritten == 0);
  CHECK(codeDiffs * 100 <= int64_t(listed.size()) * midRowBytes);
  CHECK(scaleDiffs * 100 <= int64_t(listed.size()) * kInter / 32);

  // Stage 2: W2 on the kernel's intermediate, BF16 rows per route.
  LoweredStage w2Stage = lowerStage(
      "moe.w2 @w2 problem(" + problemText(midType, "bf16") +
      ") tile(#moe.tile<m = 32, n = 128>)");
  const unsigned b2 = test::addInput(memory, "b2", w2Codes);
  const unsigned b2Scale = test::addInput(memory, "b2_scale", w2Scales);
  const unsigned down = memory.addBuffer("down", size_t(numRoutes * kHidden * 2));
  memory.poison(down);
  std::vector<KernelArgValue> args2 =
      test::bufferArgs({mid, midScale, b2, b2Scale, routes, experts, down});
  args2.push_back(KernelArgValue::makeScalar(numRoutes));
  args2.push_back(KernelArgValue::makeScalar(numSorted));
  runStage(w2Stage, memory, args2, {kHidden / 128, numSorted / kTileM, 1});
  std::vector<uint16_t> downRows(size_t(numRoutes * kHidden));
  std::memcpy(downRows.data(), memory.data(down), downRows.size() * 2);

  // The layer output against the oracle's bound.
  const std::vector<double> got = combineBf16(downRows, batch);
  int64_t over = 0;
  double worst = 0.0, diff2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(got[i] - double(want.output[i]));
    const double bound = want.outputTolerance[i];
    over += !(d <= bound);
    if (bound > 0)
      worst = std::max(worst, d / bound);
    diff2 += d * d;
    ref2 += double(want.output[i]) * double(want.output[i]);
  }
  const double relL2 = std::sqrt(diff2 / ref2);
  INFO("relative L2 " << relL2 << ", worst error / bound " << worst << ", "
                      << over << " elements over their bound");
  CHECK(ref2 > 0);
  CHECK(over == 0);
  CHECK(relL2 <= ref::kLayerOutputRelL2Bound);
}

} // namespace

TEST_CASE("A4W4 layer, MXFP4 intermediate: quant, W13 and W2 kernels vs "
          "ref::runTpMoe",
          "[a4w4][layer]") {
  runA4W4Layer(ref::ActivationFormat::Mxfp4);
}

TEST_CASE("A4W4 layer, FP8 intermediate: quant, W13 and W2 kernels vs "
          "ref::runTpMoe",
          "[a4w4][layer]") {
  runA4W4Layer(ref::ActivationFormat::Fp8E4M3);
}
