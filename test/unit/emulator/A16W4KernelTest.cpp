//===- A16W4KernelTest.cpp - BF16 activation kernels vs the oracle ---------===//
//
// A16W4 (problem.activation bf16, MXFP4 weights) on the emulator:
//
// - amdgpu.mfma 16x16x32 and 32x32x16 on vector<8xbf16> operands in kernel
//   IR against a plain loop over the gfx950 lane layout written out here
//   (lane l supplies row / column l mod dim and K 8 (l / dim) .. + 7; C
//   value a of lane l is row (a / 4) 4 (64 / dim) + 4 (l / dim) + a mod 4,
//   column l mod dim), on seeded random BF16 operands and C: bit-identical
//   to the loop's double sum rounded once to FP32 (the emulator's documented
//   arithmetic, ScaledMfma.h), and a K-permuted operand changes the result.
// - A two-stage layer at a small shape (W13 on BF16 tokens writing a BF16
//   intermediate, W2 on it, the combine on the host in FP32) against
//   ref::runTpMoe with BF16 input and intermediate: every listed route's
//   intermediate written, its BF16 values equal to the oracle's but for at
//   most 1% that differ by one BF16 step (the kernel accumulates in FP32,
//   the oracle in double, so values next to a rounding boundary may round
//   the other way), and the BF16 output within the oracle's per-element
//   bound (StageResults::outputTolerance) and a relative L2 of 2^-7
//   (kLayerOutputRelL2Bound, docs/numerics.md). Outputs are poisoned first.
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
#include <cstring>
#include <random>

using namespace moec;
using namespace moec::emu;

namespace {

//===----------------------------------------------------------------------===//
// The BF16 MFMA op
//===----------------------------------------------------------------------===//

struct Bf16Geometry {
  int dim, k, accPerLane;
};

/// Random BF16 bits of magnitude in [2^-4, 2^4), both signs.
std::vector<uint16_t> randomBf16(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mag(-4.0, 4.0);
  std::vector<uint16_t> bits(count);
  for (auto &b : bits)
    b = ref::encodeBf16((rng() & 1 ? -1.0 : 1.0) * std::exp2(mag(rng)));
  return bits;
}

/// D of one wave by the plain loop: A [dim][k] and B [k][dim] row-major.
std::vector<float> expectedBf16D(const Bf16Geometry &g,
                                 const std::vector<uint16_t> &a,
                                 const std::vector<uint16_t> &b,
                                 const std::vector<float> &c) {
  const int groups = 64 / g.dim;
  std::vector<float> d(size_t(64 * g.accPerLane));
  for (int lane = 0; lane < 64; ++lane)
    for (int acc = 0; acc < g.accPerLane; ++acc) {
      const int row = (acc / 4) * 4 * groups + 4 * (lane / g.dim) + acc % 4;
      const int col = lane % g.dim;
      double sum = 0.0;
      for (int k = 0; k < g.k; ++k)
        sum += double(ref::decodeBf16(a[size_t(row * g.k + k)])) *
               double(ref::decodeBf16(b[size_t(k * g.dim + col)]));
      const size_t slot = size_t(lane * g.accPerLane + acc);
      d[slot] = float(sum + double(c[slot]));
    }
  return d;
}

/// Lane registers (8 BF16 each) of A [dim][k] (rows) or B [k][dim]
/// (columns); `permute` swaps the lane's two halves (a wrong K order).
std::vector<uint16_t> toBf16Lanes(const Bf16Geometry &g,
                                  const std::vector<uint16_t> &m, bool isB,
                                  bool permute = false) {
  std::vector<uint16_t> regs(64 * 8);
  for (int lane = 0; lane < 64; ++lane)
    for (int e = 0; e < 8; ++e) {
      const int rc = lane % g.dim, k = 8 * (lane / g.dim) + e;
      const int slot = permute ? (e + 4) % 8 : e;
      regs[size_t(lane * 8 + slot)] =
          isB ? m[size_t(k * g.dim + rc)] : m[size_t(rc * g.k + k)];
    }
  return regs;
}

std::string bf16MfmaKernel(const Bf16Geometry &g) {
  const std::string mnk = std::to_string(g.dim) + "x" + std::to_string(g.dim) +
                          "x" + std::to_string(g.k);
  const std::string acc = std::to_string(g.accPerLane);
  return "gpu.module @m {\n"
         "  gpu.func @mfma(%a: memref<256xi32, #gpu.address_space<global>>,\n"
         "      %b: memref<256xi32, #gpu.address_space<global>>,\n"
         "      %c: memref<1024xf32, #gpu.address_space<global>>,\n"
         "      %d: memref<1024xf32, #gpu.address_space<global>>) kernel\n"
         "      attributes {known_block_size = array<i32: 64, 1, 1>} {\n"
         "    %tid = gpu.thread_id x\n"
         "    %c4 = arith.constant 4 : index\n"
         "    %cacc = arith.constant " + acc + " : index\n"
         "    %r4 = arith.muli %tid, %c4 : index\n"
         "    %racc = arith.muli %tid, %cacc : index\n"
         "    %avi = vector.load %a[%r4] : memref<256xi32, #gpu.address_space<global>>, vector<4xi32>\n"
         "    %av = vector.bitcast %avi : vector<4xi32> to vector<8xbf16>\n"
         "    %bvi = vector.load %b[%r4] : memref<256xi32, #gpu.address_space<global>>, vector<4xi32>\n"
         "    %bv = vector.bitcast %bvi : vector<4xi32> to vector<8xbf16>\n"
         "    %cv = vector.load %c[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
         "    %dv = amdgpu.mfma " + mnk + " %av * %bv + %cv blgp = none : "
         "vector<8xbf16>, vector<8xbf16>, vector<" + acc + "xf32>\n"
         "    vector.store %dv, %d[%racc] : memref<1024xf32, #gpu.address_space<global>>, vector<" + acc + "xf32>\n"
         "    gpu.return\n"
         "  }\n"
         "}\n";
}

} // namespace

TEST_CASE("amdgpu.mfma on BF16 (16x16x32, 32x32x16) matches a plain loop",
          "[a16w4][mfma][ops]") {
  for (const Bf16Geometry g : {Bf16Geometry{16, 32, 4}, Bf16Geometry{32, 16, 16}}) {
    test::ParsedKernel kernel = test::parseKernel(bf16MfmaKernel(g));
    const std::vector<uint16_t> a = randomBf16(size_t(g.dim * g.k), 11 + g.dim);
    const std::vector<uint16_t> b = randomBf16(size_t(g.k * g.dim), 23 + g.dim);
    std::mt19937 rng(37 + g.dim);
    std::uniform_real_distribution<float> cDist(-8.0f, 8.0f);
    std::vector<float> c(size_t(64 * g.accPerLane));
    for (float &v : c)
      v = cDist(rng);
    std::vector<float> cFull(1024, 0.0f);
    std::copy(c.begin(), c.end(), cFull.begin());
    const std::vector<float> want = expectedBf16D(g, a, b, c);
    INFO("shape " << g.dim << "x" << g.dim << "x" << g.k);
    for (bool permute : {false, true}) {
      const test::BufferRun run(
          kernel, {test::BufferArg::input("a", toBf16Lanes(g, a, false, permute)),
                   test::BufferArg::input("b", toBf16Lanes(g, b, true)),
                   test::BufferArg::input("c", cFull),
                   test::BufferArg::output("d", 1024 * 4)});
      CHECK(run.result.stats.mfmas == 1);
      CHECK(run.result.totalFindings() == 0);
      const std::vector<float> got = run.read<float>("d");
      const bool equal = std::memcmp(got.data(), want.data(), want.size() * 4) == 0;
      INFO("A's K order permuted: " << permute);
      // The right lane layout gives the loop's result bit for bit; a wrong
      // K order on one side must not.
      CHECK(equal == !permute);
    }
  }
}

namespace {

//===----------------------------------------------------------------------===//
// The two-stage layer
//===----------------------------------------------------------------------===//

constexpr int64_t kHidden = 512, kInter = 256, kExperts = 8, kTopK = 2;

std::string problemText(const char *activation, const char *output) {
  return "#moe.problem<hidden = " + std::to_string(kHidden) +
         ", intermediate = " + std::to_string(kInter) +
         ", experts = " + std::to_string(kExperts) +
         ", top_k = " + std::to_string(kTopK) + ", activation = " +
         activation + ", weight = f4E2M1FN, output = " + output + ">";
}

/// Parses one moe op and lowers it to kernel IR; fails the test with the
/// diagnostics when either step fails.
test::ParsedKernel lowerStage(const std::string &text) {
  test::ParsedKernel stage;
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

void runStage(test::ParsedKernel &stage, GlobalMemory &memory,
              const std::vector<KernelArgValue> &args,
              std::array<int64_t, 3> grid) {
  LaunchConfig launch;
  launch.grid = grid;
  RunResult result = test::runOrFail(stage, memory, args, launch);
  CHECK(result.totalFindings() == 0);
}

/// The host's combine: per token the FP32 sum over its valid slots of
/// weight * BF16 row, in slot order, rounded to BF16.
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

/// Runs W13 (tile `w13Tile`) and W2 (tile `w2Tile`) of an A16W4 layer and
/// compares them with the oracle.
void runA16W4Layer(const std::string &w13Tile, const std::string &w2Tile,
                   int64_t w13TileN, int64_t w2TileN, uint32_t seed) {
  constexpr int64_t kTileM = 32, kTokens = 40;
  const ref::MoeShape shape{kHidden, kInter, kExperts, kTopK};
  const ref::TokenBatch batch =
      ref::generateBatch(seed, 0, kTokens, shape, ref::RoutingOptions());
  const ref::GeneratedMxfp4Weights w13(seed, 13, kExperts, 2 * kInter, kHidden,
                                       ref::defaultScaleExponent(kHidden));
  const ref::GeneratedMxfp4Weights w2(seed, 2, kExperts, kHidden, kInter,
                                      ref::defaultScaleExponent(kInter));
  ref::TpMoeConfig config;
  config.shape = shape;
  config.mTile = kTileM;
  config.gateUpInterleave = 0;
  config.inputFormat = ref::ActivationFormat::Bf16;
  config.intermediateFormat = ref::ActivationFormat::Bf16;
  config.outputTolerance = true;
  ref::StageResults want;
  REQUIRE(ref::runTpMoe(config, w13, w2, batch, want));
  // The oracle's BF16 input is the batch's own bits.
  REQUIRE(want.inputCodes.size() == batch.hiddenBf16.size() * 2);
  REQUIRE(std::memcmp(want.inputCodes.data(), batch.hiddenBf16.data(),
                      want.inputCodes.size()) == 0);

  std::vector<uint8_t> w13Codes, w13Scales, w2Codes, w2Scales;
  ref::materializeWeights(w13, w13Codes, w13Scales);
  ref::materializeWeights(w2, w2Codes, w2Scales);
  const ref::SortedRoutes &sorted = want.routes;
  const int64_t numRoutes = kTokens * kTopK;
  const int64_t numSorted = int64_t(sorted.routeIds.size());

  // Stage 1: BF16 tokens in, BF16 intermediate out. The scale arguments
  // are in the ABI but unused: a one-byte buffer each.
  test::ParsedKernel w13Stage = lowerStage(
      "moe.w13 @w13 problem(" + problemText("bf16", "bf16") + ") tile(" +
      w13Tile + ")");
  GlobalMemory memory;
  const unsigned a = test::addInput(memory, "a", batch.hiddenBf16);
  const unsigned aScale = memory.addBuffer("a_scale", 1);
  const unsigned b13 = test::addInput(memory, "b", w13Codes);
  const unsigned b13Scale = test::addInput(memory, "b_scale", w13Scales);
  const unsigned routes = test::addInput(memory, "sorted_routes", sorted.routeIds);
  const unsigned experts = test::addInput(memory, "tile_experts", sorted.tileExperts);
  const unsigned mid = memory.addBuffer("out", size_t(numRoutes * kInter * 2));
  const unsigned midScale = memory.addBuffer("out_scale", 1);
  memory.poison(mid);
  memory.poison(midScale);
  std::vector<KernelArgValue> args13 =
      test::bufferArgs({a, aScale, b13, b13Scale, routes, experts, mid, midScale});
  args13.push_back(KernelArgValue::makeScalar(kTokens));
  args13.push_back(KernelArgValue::makeScalar(numSorted));
  runStage(w13Stage, memory, args13,
           {kInter / w13TileN, numSorted / kTileM, 1});

  // Every listed route's intermediate row written; values equal to the
  // oracle's BF16 rounding but for a few one-step differences.
  const std::vector<int32_t> listed = ref::listedRoutes(sorted);
  REQUIRE(want.intermediateCodes.size() == size_t(numRoutes * kInter * 2));
  int64_t unwritten = 0, diffs = 0, farDiffs = 0;
  const uint8_t *midBytes = memory.data(mid);
  for (int32_t r : listed)
    for (int64_t i = 0; i < kInter; ++i) {
      const size_t at = size_t(r * kInter + i);
      unwritten += !memory.written(mid)[2 * at] || !memory.written(mid)[2 * at + 1];
      const int got = midBytes[2 * at] | (midBytes[2 * at + 1] << 8);
      const int ref = want.intermediateCodes[2 * at] |
                      (want.intermediateCodes[2 * at + 1] << 8);
      if (got == ref)
        continue;
      ++diffs;
      // One BF16 step: same sign, adjacent magnitudes.
      farDiffs += (got >> 15) != (ref >> 15) ||
                  std::abs((got & 0x7FFF) - (ref & 0x7FFF)) != 1;
    }
  const int64_t values = int64_t(listed.size()) * kInter;
  INFO(diffs << " of " << values << " intermediate values differ, " << farDiffs
             << " by more than one BF16 step");
  CHECK(unwritten == 0);
  CHECK(farDiffs == 0);
  CHECK(diffs * 100 <= values);
  // The scale argument is never accessed.
  CHECK(memory.written(midScale)[0] == 0);

  // Stage 2: W2 on the kernel's BF16 intermediate, BF16 rows per route.
  test::ParsedKernel w2Stage = lowerStage(
      "moe.w2 @w2 problem(" + problemText("bf16", "bf16") + ") tile(" +
      w2Tile + ")");
  const unsigned b2 = test::addInput(memory, "b2", w2Codes);
  const unsigned b2Scale = test::addInput(memory, "b2_scale", w2Scales);
  const unsigned down = memory.addBuffer("down", size_t(numRoutes * kHidden * 2));
  memory.poison(down);
  std::vector<KernelArgValue> args2 =
      test::bufferArgs({mid, midScale, b2, b2Scale, routes, experts, down});
  args2.push_back(KernelArgValue::makeScalar(numRoutes));
  args2.push_back(KernelArgValue::makeScalar(numSorted));
  runStage(w2Stage, memory, args2, {kHidden / w2TileN, numSorted / kTileM, 1});
  std::vector<uint16_t> downRows(size_t(numRoutes * kHidden));
  std::memcpy(downRows.data(), memory.data(down), downRows.size() * 2);

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

TEST_CASE("A16W4 layer, m16n16 BF16 MFMA: W13 and W2 kernels vs "
          "ref::runTpMoe",
          "[a16w4][layer]") {
  runA16W4Layer("#moe.tile<m = 32, n = 64>", "#moe.tile<m = 32, n = 128>", 64,
                128, 0xA16);
}

TEST_CASE("A16W4 layer, b_major, swizzled A, m32n32 BF16 MFMA",
          "[a16w4][layer]") {
  runA16W4Layer("#moe.tile<m = 32, n = 64, orientation = b_major, "
                "a_swizzle = true>",
                "#moe.tile<m = 32, n = 128, mfma = m32n32k64>", 64, 128,
                0xA17);
}
