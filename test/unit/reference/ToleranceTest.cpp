// The per-element bound of a kernel's layer output (Tolerance.h) against a
// model of a correct kernel written here: W13 and W2 accumulated in FP32
// over 32-element blocks in reverse order, the activation evaluated in FP32
// and pushed to the edge of its error bound before the FP8 quantisation (so
// that many codes land on the neighbouring step, as far as a correct kernel
// may), each W2 row rounded to BF16, the routes summed in FP32 in reverse
// slot order and the output rounded to BF16. Every element of that kernel
// must lie within the bound and its relative L2 within 2^-7; each planted
// fault (a NaN, no FP8 intermediate, gate and up swapped, SiLU for GPT-OSS's
// SwiGLU, one expert's W2 scales one exponent off) must break the bound.
#include "TestData.h"

#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Tolerance.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace moec::ref;
using testdata::DenseLayer;
using testdata::rankBatches;

namespace {

enum class Fault { None, NaN, NoIntermediateQuant, GateUpSwapped, Silu, W2Scale };

const char *faultName(Fault fault) {
  switch (fault) {
  case Fault::None: return "none";
  case Fault::NaN: return "NaN in one row";
  case Fault::NoIntermediateQuant: return "intermediate not quantised";
  case Fault::GateUpSwapped: return "gate and up swapped";
  case Fault::Silu: return "SiLU for GPT-OSS SwiGLU";
  case Fault::W2Scale: return "expert 0 W2 scales x2";
  }
  return "?";
}

/// FP32 sum of exact 32-element partial sums of x . row, blocks in reverse.
double fp32Dot(const std::vector<double> &x, const naive::Matrix &m,
               int64_t row) {
  float acc = 0.0f;
  for (int64_t b = m.depth / 32 - 1; b >= 0; --b) {
    double partial = 0.0;
    for (int64_t k = b * 32; k < b * 32 + 32; ++k)
      partial += x[size_t(k)] * m.at(row, k);
    acc = float(double(acc) + partial);
  }
  return acc;
}

/// The layer output a kernel computes, decoded from BF16.
std::vector<double> kernelModel(const DenseLayer &layer, const TpMoeConfig &config,
                                const TokenBatch &batch,
                                const StageResults &oracle,
                                const std::vector<double> &activationBound,
                                Fault fault, uint64_t seed) {
  const MoeShape &s = config.shape;
  const int64_t H = s.hidden, I = s.intermediate, topk = s.topk;
  std::mt19937_64 random(seed);
  std::vector<double> out(static_cast<size_t>(batch.tokens * H), 0.0);
  for (int64_t t = 0; t < batch.tokens; ++t) {
    std::vector<double> x(static_cast<size_t>(H));
    dequantizeFp8Row(oracle.inputCodes.data() + t * H,
                     oracle.inputScales.data() + t * (H / 32), H, x.data());
    std::vector<float> sum(static_cast<size_t>(H), 0.0f);
    for (int64_t k = topk - 1; k >= 0; --k) {
      const int64_t route = t * topk + k;
      const int32_t e = batch.topkIds[size_t(route)];
      if (!isValidExpert(e, s.experts))
        continue;
      std::vector<double> act(static_cast<size_t>(I));
      for (int64_t j = 0; j < I; ++j) {
        int64_t gRow = (j / config.gateUpInterleave) * 2 * config.gateUpInterleave +
                       j % config.gateUpInterleave;
        int64_t uRow = gRow + config.gateUpInterleave;
        if (fault == Fault::GateUpSwapped)
          std::swap(gRow, uRow);
        const size_t at = size_t(route * I + j);
        const bool push = random() & 1;
        if (fault == Fault::None || fault == Fault::NaN ||
            fault == Fault::W2Scale) {
          // As far from the oracle as a correct kernel may be (how close
          // FP32 accumulation comes to that edge is AccumulationBoundTest's).
          const double bound = 0.999 * activationBound[at];
          act[size_t(j)] = oracle.activation[at] + (push ? bound : -bound);
          continue;
        }
        const double g = fp32Dot(x, layer.naiveLayer.w13[size_t(e)], gRow);
        const double u = fp32Dot(x, layer.naiveLayer.w13[size_t(e)], uRow);
        const bool gptOss = config.gptOssSwiglu && fault != Fault::Silu;
        act[size_t(j)] = float(gatedActivation(g, u, config.swigluLimit, gptOss));
      }
      std::vector<double> inter = act;
      if (fault != Fault::NoIntermediateQuant) {
        std::vector<uint8_t> codes(static_cast<size_t>(I)), scales(static_cast<size_t>(I / 32));
        quantizeFp8Row(act.data(), I, codes.data(), scales.data());
        dequantizeFp8Row(codes.data(), scales.data(), I, inter.data());
      }
      const double w2Factor = fault == Fault::W2Scale && e == 0 ? 2.0 : 1.0;
      const float weight = batch.topkWeights[size_t(route)];
      for (int64_t h = 0; h < H; ++h) {
        double row = w2Factor * fp32Dot(inter, layer.naiveLayer.w2[size_t(e)], h);
        if (fault == Fault::NaN && t == 1 && k == 0 && h == 3)
          row = std::numeric_limits<double>::quiet_NaN();
        const double rowBf16 = decodeBf16(encodeBf16(row));
        sum[size_t(h)] = float(double(sum[size_t(h)]) + double(float(weight * rowBf16)));
      }
    }
    for (int64_t h = 0; h < H; ++h)
      out[size_t(t * H + h)] = decodeBf16(encodeBf16(sum[size_t(h)]));
  }
  return out;
}

struct Verdict {
  int64_t over = 0, nonFinite = 0;
  double relL2 = 0, worst = 0;
};

Verdict judge(const std::vector<double> &got, const StageResults &oracle) {
  Verdict v;
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = oracle.output[i];
    const double d = std::fabs(got[i] - want);
    if (!std::isfinite(got[i])) {
      ++v.nonFinite;
      continue;
    }
    if (!(d <= oracle.outputTolerance[i]))
      ++v.over;
    if (oracle.outputTolerance[i] > 0)
      v.worst = std::max(v.worst, d / oracle.outputTolerance[i]);
    err += d * d;
    ref += want * want;
  }
  v.relL2 = std::sqrt(err / ref);
  return v;
}

} // namespace

TEST_CASE("a correct FP32 kernel stays within the output tolerance; faults do not",
          "[tolerance]") {
  const MoeShape shape{256, 128, 8, 4};
  for (bool gptOss : {false, true}) {
    DYNAMIC_SECTION((gptOss ? "GPT-OSS SwiGLU" : "SiLU, clamp 10")) {
      TpMoeConfig config;
      config.shape = shape;
      config.mTile = 16;
      config.gateUpInterleave = 16;
      config.swigluLimit = gptOss ? 7.0 : 10.0;
      config.gptOssSwiglu = gptOss;
      config.outputTolerance = true;
      config.numThreads = 2;
      DenseLayer layer(shape, GluConfig{16, config.swigluLimit, gptOss}, 4100,
                       /*scaleOffset=*/1);
      RoutingOptions routing;
      routing.invalidFraction = 0.1;
      TokenBatch batch = generateBatch(41, 0, 48, shape, routing);
      StageResults oracle;
      REQUIRE(runTpMoe(config, *layer.w13, *layer.w2, batch, oracle).ok());
      REQUIRE(oracle.outputTolerance.size() == oracle.output.size());
      REQUIRE(oracle.downRowTolerance.size() == oracle.downRows.size());

      // The activation bound of every route, as the oracle used it.
      std::vector<double> activation(oracle.activation.size());
      std::vector<double> bound(oracle.activation.size(), 0.0);
      W13Outputs outputs;
      outputs.activation = activation.data();
      outputs.activationErrorBound = bound.data();
      GluConfig glu{16, config.swigluLimit, gptOss};
      REQUIRE(runW13Stage(oracle.inputCodes.data(), oracle.inputScales.data(),
                          batch.tokens, shape.topk, layer.w13Packed.data(),
                          layer.w13Scales.data(), shape.experts, shape.hidden,
                          shape.intermediate, oracle.routes, glu, outputs));
      // The pushed activations do move codes: the bound's ambiguity path is
      // exercised, not only its exact-code path.
      int64_t moved = 0, elements = 0;
      for (size_t r = 0; r < size_t(batch.tokens * shape.topk); ++r) {
        if (!isValidExpert(batch.topkIds[r], shape.experts))
          continue;
        for (int64_t b = 0; b < shape.intermediate; b += 32) {
          double deviation[32];
          const size_t at = r * size_t(shape.intermediate) + size_t(b);
          intermediateDeviation(activation.data() + at, bound.data() + at,
                                deviation);
          for (double d : deviation) {
            moved += d > 0;
            ++elements;
          }
        }
      }
      INFO(moved << " of " << elements << " intermediate elements may move");
      CHECK(moved > 0);
      CHECK(moved < elements / 4);

      for (uint64_t seed : {1, 2, 3}) {
        Verdict v = judge(kernelModel(layer, config, batch, oracle, bound,
                                      Fault::None, seed),
                          oracle);
        INFO("seed " << seed << ": rel L2 " << v.relL2 << ", worst err/tol "
                     << v.worst);
        CHECK(v.over == 0);
        CHECK(v.nonFinite == 0);
        CHECK(v.relL2 <= kLayerOutputRelL2Bound);
        // Rounding to BF16 alone: well above zero, so the model is no copy.
        CHECK(v.relL2 > 0x1p-10);
      }
      for (Fault fault : {Fault::NaN, Fault::NoIntermediateQuant,
                          Fault::GateUpSwapped, Fault::Silu, Fault::W2Scale}) {
        if (fault == Fault::Silu && !gptOss)
          continue;
        Verdict v = judge(
            kernelModel(layer, config, batch, oracle, bound, fault, 1), oracle);
        INFO(faultName(fault) << ": " << v.over << " over tolerance, "
                              << v.nonFinite << " non-finite, rel L2 "
                              << v.relL2);
        CHECK(v.over + v.nonFinite > 0);
        if (fault == Fault::NaN)
          CHECK(v.nonFinite == 1);
        else
          CHECK(v.relL2 > kLayerOutputRelL2Bound);
      }
    }
  }
}

TEST_CASE("the output tolerance of MegaMoE ranks equals family 2's per rank",
          "[tolerance]") {
  const MoeShape shape{128, 64, 16, 4};
  DenseLayer layer(shape, GluConfig{0, 10.0}, 601, 2);
  std::vector<TokenBatch> ranks =
      rankBatches(shape, 4, {7, 3, 0, 8}, RoutingOptions{0, 0, 0.05}, 61);
  MegaMoeConfig config;
  config.shape = shape;
  config.ep = 4;
  config.mTile = 8;
  config.outputTolerance = true;
  for (Transport transport : {Transport::FixedSlot, Transport::Compact}) {
    config.transport = transport;
    std::vector<MegaMoeRankResult> mega;
    REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, mega).ok());
    for (int64_t rank = 0; rank < 4; ++rank) {
      TpMoeConfig tp;
      tp.shape = shape;
      tp.gateUpInterleave = 0;
      tp.swigluLimit = 10.0;
      tp.outputTolerance = true;
      StageResults family2;
      REQUIRE(runTpMoe(tp, *layer.w13, *layer.w2, ranks[size_t(rank)], family2).ok());
      REQUIRE(mega[size_t(rank)].stages.outputTolerance.size() ==
              size_t(ranks[size_t(rank)].tokens * shape.hidden));
      REQUIRE(mega[size_t(rank)].stages.outputTolerance == family2.outputTolerance);
      // Positive wherever a token has a valid route; zero where it has none.
      for (double tolerance : family2.outputTolerance)
        CHECK(tolerance >= 0.0);
    }
  }
  // Without the flag nothing extra is computed.
  config.outputTolerance = false;
  std::vector<MegaMoeRankResult> plain;
  REQUIRE(runMegaMoe(config, *layer.w13, *layer.w2, ranks, plain).ok());
  CHECK(plain[0].stages.outputTolerance.empty());
  CHECK(plain[0].stages.downRowTolerance.empty());
}
