//===- QuantHarness.cpp - the input quantisation vs the oracle ------------===//
//
// BF16 tokens -> FP8 E4M3 codes + E8M0 scales per 1x32 block, compared with
// ref::quantizeFp8Row on the same BF16 values. The rounding is
// deterministic (an exact power-of-two scale, round to nearest even), so
// every code and every scale must be bit-identical. The kernel's output
// becomes the tokens the layer's W13 reads.
//
//===----------------------------------------------------------------------===//

#include "StageSupport.h"

#include "moec/grid_rule.h"
#include "moec/reference/Formats.h"

#include <cmath>
#include <cstdio>

using namespace mlir;

namespace moec::emu {
namespace {

/// Stream of the edge-case block choice.
constexpr uint64_t kEdgeBlockTag = 0x9A27;

/// Bytes past each output that the kernel must leave untouched: the masked
/// tail lanes of the last workgroup would write there.
constexpr size_t kCodeSlack = 256, kScaleSlack = 64;

/// The layer's BF16 tokens -> the FP8 token rows W13 reads.
class QuantHarness final : public StageHarness {
public:
  QuantHarness(const BuiltKernel &kernel, const StageShape &shape)
      : StageHarness(kernel, shape) {}

  /// The tokens are the layer's, shared by every rank.
  bool perRank() const override { return false; }

  const char *tolerance() const override {
    return "codes and scales bit-identical to ref::quantizeFp8Row";
  }

  std::vector<std::string> arguments() const override {
    return {"x", "out", "out_scale", "num_tokens"};
  }

  /// The layer's tokens when missing, with edge-case blocks mixed in (a
  /// seeded choice): all-zero blocks (scale from the 1e-4 floor), blocks
  /// 2^12 larger and blocks 2^-24 smaller (amax below the floor). Powers of
  /// two keep the BF16 values exact and the layer's later stages in range.
  ref::Status generate(const DataOptions &options, LayerData &data,
                       int64_t rank) const override {
    if (data.hasBatch)
      return {};
    if (ref::Status status = ensureBatch(shape_, options, data, rank); !status)
      return status;
    const ref::CounterRandom random(options.seed, kEdgeBlockTag);
    std::vector<uint16_t> &bits = data.batch.hiddenBf16;
    for (size_t block = 0; block < bits.size() / 32; ++block) {
      const uint64_t pick = random.bits(block) % 16;
      if (pick > 2)
        continue;
      for (size_t i = 32 * block; i < 32 * block + 32; ++i)
        bits[i] = pick == 0 ? 0
                            : ref::encodeBf16(ref::decodeBf16(bits[i]) *
                                              std::ldexp(1.0, pick == 1 ? 12 : -24));
    }
    quantizeTokens(data.batch, shape_.hidden, data.tokens, shape_.tokenFormat);
    return checkNotAllZero(data.tokens.codes, "token codes");
  }

  LogicalResult run(LayerData &data, int64_t, const LaunchConfig &launchIn,
                    StageOutcome &outcome, std::string &error) const override {
    const int64_t tokens = data.batch.tokens, hidden = shape_.hidden;
    const size_t codeBytes =
        size_t(tokens * ref::activationRowBytes(shape_.tokenFormat, hidden));
    const size_t scaleBytes = size_t(tokens * hidden / 32);
    KernelMemory km;
    km.input("x", data.batch.hiddenBf16);
    const unsigned out = km.output("out", codeBytes + kCodeSlack);
    const unsigned outScale =
        km.output("out_scale", scaleBytes + kScaleSlack);
    km.scalar("num_tokens", tokens);
    // The manifest's own grid rule, also for num_tokens = 0.
    const rt::RuleVariable variables[] = {{"num_tokens", tokens},
                                          {"H", hidden}};
    int64_t gridX = 0;
    if (!rt::evaluateGridRule(kernel_.description.abi.gridX, variables,
                              std::size(variables), gridX, error))
      return failure();
    LaunchConfig launch = launchIn;
    launch.grid = {gridX, 1, 1};
    outcome = StageOutcome();
    if (failed(km.run(kernel_, launch, outcome, error)))
      return failure();
    outcome.launched = true;
    km.snapshot(outcome);
    // The kernel's rows are what W13 reads from here on.
    const GlobalMemory &memory = km.memory;
    Fp8Rows &rows = data.tokens;
    rows.format = shape_.tokenFormat;
    rows.codes.assign(memory.data(out), memory.data(out) + codeBytes);
    rows.codesWritten.assign(memory.written(out),
                             memory.written(out) + codeBytes);
    rows.scales.assign(memory.data(outScale), memory.data(outScale) + scaleBytes);
    rows.scalesWritten.assign(memory.written(outScale),
                              memory.written(outScale) + scaleBytes);
    return success();
  }

  void compare(LayerData &data, int64_t, const DataOptions &,
               StageOutcome &outcome) const override {
    const int64_t hidden = shape_.hidden;
    Fp8Rows want;
    quantizeTokens(data.batch, hidden, want, shape_.tokenFormat);
    outcome.oracleCodes = want.codes;
    outcome.oracleScales = want.scales;
    const BufferSnapshot &codes = outcome.outputs.at("out");
    const BufferSnapshot &scales = outcome.outputs.at("out_scale");
    const size_t codeCount = want.codes.size(), scaleCount = want.scales.size();
    int64_t codeMismatches = 0, scaleMismatches = 0, unwritten = 0,
            tailWritten = 0;
    for (size_t i = 0; i < codeCount; ++i) {
      unwritten += !codes.written[i];
      const bool equal = codes.bytes[i] == want.codes[i];
      outcome.codesEqual += equal;
      codeMismatches += !equal;
    }
    for (size_t i = 0; i < scaleCount; ++i) {
      unwritten += !scales.written[i];
      const bool equal = scales.bytes[i] == want.scales[i];
      ++outcome.scalesChecked;
      outcome.scalesEqual += equal;
      scaleMismatches += !equal;
    }
    for (size_t i = codeCount; i < codes.written.size(); ++i)
      tailWritten += codes.written[i] != 0;
    for (size_t i = scaleCount; i < scales.written.size(); ++i)
      tailWritten += scales.written[i] != 0;
    outcome.elementsChecked = int64_t(codeCount + scaleCount);
    outcome.elementsOverTolerance = codeMismatches + scaleMismatches;
    outcome.elementsUnwritten = unwritten;
    outcome.unlistedRowsWritten = tailWritten;
    outcome.pass = outcome.elementsOverTolerance == 0 && unwritten == 0 &&
                   tailWritten == 0 && outcome.run.totalFindings() == 0;
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%lld tokens: %lld of %zu codes and %lld of %zu scales "
                  "differ from the oracle, %lld unwritten, %lld written past "
                  "the end, %llu findings",
                  (long long)data.batch.tokens, (long long)codeMismatches,
                  codeCount, (long long)scaleMismatches, scaleCount,
                  (long long)unwritten, (long long)tailWritten,
                  (unsigned long long)outcome.run.totalFindings());
    outcome.summary = text;
  }

  NamedArrays arrays(const LayerData &data, int64_t,
                     const StageOutcome &outcome) const override {
    const int64_t tokens = data.batch.tokens, hidden = shape_.hidden;
    const int64_t rowBytes = ref::activationRowBytes(shape_.tokenFormat, hidden);
    return {
        {"codes", npyOf({tokens, rowBytes}, data.tokens.codes)},
        {"scales", npyOf({tokens, hidden / 32}, data.tokens.scales)},
        {"oracle_codes", npyOf({tokens, rowBytes}, outcome.oracleCodes)},
        {"oracle_scales", npyOf({tokens, hidden / 32}, outcome.oracleScales)},
    };
  }
};

} // namespace

std::unique_ptr<StageHarness> makeQuantHarness(const BuiltKernel &kernel,
                                               const StageShape &shape) {
  return std::make_unique<QuantHarness>(kernel, shape);
}

} // namespace moec::emu
