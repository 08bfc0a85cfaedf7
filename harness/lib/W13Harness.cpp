//===- W13Harness.cpp - the W13 stage on the emulator vs the oracle -------===//
//
// Gate/up GEMM of the routed tokens, clamped SwiGLU and FP8 1x32
// quantisation of the intermediate: the kernel's FP8 codes and E8M0 scales
// against the reference W13 stage on the same FP8 tokens and MXFP4 weights.
//
//===----------------------------------------------------------------------===//

#include "StageSupport.h"

#include "moec/reference/Formats.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

using namespace mlir;

namespace moec::emu {
namespace {

/// FP8 tokens -> one rank's FP8 intermediate.
class W13Harness final : public StageHarness {
public:
  W13Harness(const BuiltKernel &kernel, const StageShape &shape)
      : StageHarness(kernel, shape) {}

  const char *tolerance() const override {
    return "|dequant(out) - activation| <= one FP8 (or, MXFP4 intermediate, "
           "one E2M1) step at the kernel's block scale + the oracle's bound for an FP32-accumulated GEMM; rel L2 "
           "vs the activation before FP8 <= 2^-4 (MXFP4: 2^-1)";
  }

  std::vector<std::string> arguments() const override {
    return {"a",          "a_scale",       "b",
            "b_scale",    "sorted_routes", "tile_experts",
            "out",        "out_scale",     "num_tokens",
            "num_sorted", "b_shared",      "b_shared_scale",
            "bias"};
  }

  ref::Status generate(const DataOptions &options, LayerData &data,
                       int64_t rank) const override {
    const StageShape &s = shape_;
    if (ref::Status status = ensureBatch(s, options, data, rank); !status)
      return status;
    if (ref::Status status = ensureRoutes(s, options, data, rank); !status)
      return status;
    // A16W4 has no quant stage: W13 reads the batch's own BF16 rows, even
    // when an earlier stage (the sort) generated the batch in another
    // token format.
    if (s.tokenFormat == ref::ActivationFormat::Bf16 &&
        data.tokens.format != ref::ActivationFormat::Bf16)
      quantizeTokens(data.batch, s.hidden, data.tokens, s.tokenFormat);
    return ensureWeights(s, options, data.rank(rank), /*w13=*/true);
  }

  LogicalResult run(LayerData &data, int64_t rank, const LaunchConfig &launch,
                    StageOutcome &outcome, std::string &error) const override {
    const StageShape &s = shape_;
    RankData &mine = data.rank(rank);
    KernelMemory km;
    km.input("a", data.tokens.codes);
    km.input("a_scale", data.tokens.scales);
    km.weights("b", "b_scale", mine.w13);
    km.routes(mine.sorted);
    const size_t codeBytes = size_t(
        data.numRoutes() * ref::activationRowBytes(s.midFormat, s.intermediate));
    const size_t scaleBytes = size_t(data.numRoutes() * s.intermediate / 32);
    const unsigned out = km.output("out", codeBytes);
    const unsigned outScale = km.output("out_scale", scaleBytes);
    km.scalar("num_tokens", data.batch.tokens);
    if (s.bias)
      km.input("bias", mine.w13.bias);
    if (failed(km.runTiles(kernel_, s, mine.sorted, s.intermediate / s.tileN, 1,
                           launch, outcome, error)))
      return failure();
    const GlobalMemory &memory = km.memory;
    Fp8Rows &inter = mine.intermediate;
    inter.format = s.midFormat;
    inter.codes.assign(memory.data(out), memory.data(out) + codeBytes);
    inter.codesWritten.assign(memory.written(out),
                              memory.written(out) + codeBytes);
    inter.scales.assign(memory.data(outScale), memory.data(outScale) + scaleBytes);
    inter.scalesWritten.assign(memory.written(outScale),
                               memory.written(outScale) + scaleBytes);
    mine.hasIntermediate = true;
    return success();
  }

  void compare(LayerData &data, int64_t rank, const DataOptions &options,
               StageOutcome &outcome) const override {
    const StageShape &s = shape_;
    RankData &mine = data.rank(rank);
    const int64_t inter = s.intermediate, numRoutes = data.numRoutes();
    outcome.relL2Bound = s.midFormat == ref::ActivationFormat::Mxfp4
                             ? kW13Fp4RelL2Bound
                             : kW13RelL2Bound;
    ref::SortedRoutes view;
    ref::Status status =
        oracleRoutes(mine.sorted, s.tileM, s.localExperts, view);
    const size_t elements = size_t(numRoutes * inter);
    outcome.oracle.assign(elements, std::numeric_limits<double>::quiet_NaN());
    const bool fp4 = s.midFormat == ref::ActivationFormat::Mxfp4;
    // A16W4: BF16 values (two bytes each, little-endian), no scales.
    const bool bf16 = s.midFormat == ref::ActivationFormat::Bf16;
    const int64_t rowBytes = ref::activationRowBytes(s.midFormat, inter);
    outcome.oracleCodes.assign(size_t(numRoutes * rowBytes), 0);
    outcome.oracleScales.assign(elements / 32, 0);
    // How far FP32 accumulation may move each activation (the oracle sums
    // in double): near zero, after cancellation, it can exceed an FP8 step.
    std::vector<double> accumulationBound(elements, 0.0);
    if (status) {
      ref::GluConfig glu;
      glu.interleave = s.interleave;
      glu.clampLimit = s.swigluLimit;
      glu.gptOssSwiglu = s.gptOssSwiglu;
      glu.situV2 = s.situV2;
      glu.situBeta = s.situBeta;
      glu.situLinearBeta = s.situLinearBeta;
      if (s.bias)
        glu.bias = mine.w13.bias.data();
      ref::W13Outputs outputs;
      outputs.activation = outcome.oracle.data();
      outputs.intermediateCodes = outcome.oracleCodes.data();
      outputs.intermediateScales = outcome.oracleScales.data();
      outputs.activationErrorBound = accumulationBound.data();
      outputs.intermediateFormat = s.midFormat;
      OracleWeights weights(mine.w13, s.mxfp4Experts(), 2 * inter, s.hidden,
                            s.sharedFp8);
      status = ref::runW13Stage(
          data.tokens.view(data.batch.tokens, s.hidden),
          s.topK, weights.source(), view, glu, outputs);
    }
    if (!status) {
      outcome.pass = false;
      outcome.summary = "oracle failed: " + status.message();
      return;
    }
    // The all-oracle layer continues from the oracle's own intermediate.
    mine.chainIntermediate.format = s.midFormat;
    mine.chainIntermediate.codes = outcome.oracleCodes;
    mine.chainIntermediate.scales = outcome.oracleScales;

    const Fp8Rows &got = mine.intermediate;
    const std::vector<int32_t> expertOf = expertOfRoutes(view, numRoutes);
    const std::set<int64_t> zeroExperts(options.zeroExperts.begin(),
                                        options.zeroExperts.end());
    ElementCheck check(outcome);
    for (int64_t r = 0; r < numRoutes; ++r) {
      const size_t base = size_t(r * inter);
      const size_t byteBase = size_t(r * rowBytes);
      const int32_t expert = expertOf[size_t(r)];
      if (expert < 0) {
        bool written = false;
        for (int64_t i = 0; i < rowBytes; ++i)
          written |= got.codesWritten[byteBase + size_t(i)] != 0;
        for (int64_t blk = 0; blk < inter / 32 && !bf16; ++blk)
          written |= got.scalesWritten[base / 32 + size_t(blk)] != 0;
        outcome.unlistedRowsWritten += written;
        continue;
      }
      bool unwritten = false, zeroMismatch = false;
      for (int64_t blk = 0; blk < inter / 32; ++blk) {
        const size_t sc = base / 32 + size_t(blk);
        double scale = 1.0;
        if (!bf16) {
          unwritten |= !got.scalesWritten[sc];
          ++outcome.scalesChecked;
          outcome.scalesEqual += got.scales[sc] == outcome.oracleScales[sc];
          scale = ref::decodeE8M0(got.scales[sc]);
        }
        for (int64_t i = 0; i < 32; ++i) {
          const size_t e = base + size_t(blk * 32 + i);
          if (bf16) {
            const size_t b = 2 * e;
            unwritten |= !got.codesWritten[b] || !got.codesWritten[b + 1];
            const uint16_t bits = uint16_t(got.codes[b] | (got.codes[b + 1] << 8));
            const uint16_t wantBits = uint16_t(outcome.oracleCodes[b] |
                                               (outcome.oracleCodes[b + 1] << 8));
            const double value = ref::decodeBf16(bits);
            const double want = outcome.oracle[e];
            if (!check.add(value, want,
                           ulpOf(s.midFormat, want, 1.0) + accumulationBound[e]))
              continue;
            zeroMismatch |= !s.bias && zeroExperts.count(expert) && value != 0.0;
            outcome.codesEqual += bits == wantBits;
            continue;
          }
          // The byte of element e and its code (FP4: the low nibble holds
          // the even element).
          const size_t b = fp4 ? byteBase + size_t(blk * 16 + i / 2) : e;
          unwritten |= !got.codesWritten[b];
          const uint8_t code =
              fp4 ? uint8_t((got.codes[b] >> (4 * (i & 1))) & 0xF) : got.codes[b];
          const uint8_t wantCode =
              fp4 ? uint8_t((outcome.oracleCodes[b] >> (4 * (i & 1))) & 0xF)
                  : outcome.oracleCodes[b];
          const double value =
              (fp4 ? ref::decodeE2M1(code) : ref::decodeFp8E4M3(code)) * scale;
          const double want = outcome.oracle[e];
          if (!check.add(value, want,
                         ulpOf(s.midFormat, want, scale) + accumulationBound[e]))
            continue;
          // A zero-weight expert's activation is that of its bias.
          zeroMismatch |= !s.bias && zeroExperts.count(expert) && value != 0.0;
          outcome.codesEqual += code == wantCode;
        }
      }
      outcome.listedRowsUnwritten += unwritten;
      outcome.zeroExpertNonZero += zeroMismatch;
    }
    check.finish();
    char text[256];
    std::snprintf(
        text, sizeof(text),
        "rel L2 %.3e (vs activation before %s), worst err/tol "
        "%.3f, %lld/%lld codes and %lld/%lld scales equal to the "
        "oracle's",
        outcome.relL2, bf16 ? "BF16" : fp4 ? "MXFP4" : "FP8", outcome.worstErrorOverTolerance,
        (long long)outcome.codesEqual, (long long)outcome.elementsChecked,
        (long long)outcome.scalesEqual, (long long)outcome.scalesChecked);
    outcome.summary = text + rowCounts(outcome);
  }

  NamedArrays arrays(const LayerData &data, int64_t rank,
                     const StageOutcome &outcome) const override {
    const RankData &mine = data.ranks[size_t(rank)];
    const int64_t routes = data.numRoutes(), inter = shape_.intermediate;
    return {
        {"out_codes",
         npyOf({routes, ref::activationRowBytes(shape_.midFormat, inter)},
               mine.intermediate.codes)},
        {"out_scales", npyOf({routes, inter / 32}, mine.intermediate.scales)},
        {"oracle_activation", npyOf({routes, inter}, outcome.oracle)},
    };
  }
};

} // namespace

std::unique_ptr<StageHarness> makeW13Harness(const BuiltKernel &kernel,
                                             const StageShape &shape) {
  return std::make_unique<W13Harness>(kernel, shape);
}

} // namespace moec::emu
