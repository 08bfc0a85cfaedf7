//===- ReferenceCommand.cpp - moec reference: run the CPU oracle ----------===//
//
// Computes one MoE layer with the reference oracle (reference/, namespace
// moec::ref) from seeded generated data or from .npy inputs, and writes the
// outputs as .npy files (docs/reference.md lists every name). Exit status:
// 0 success, 1 a check failed (dispatch overflow, --compare above its
// tolerance), 2 bad usage or bad input (one line naming the file or field).
//
//===----------------------------------------------------------------------===//

#include "moec/reference/ReferenceCommand.h"

#include "moec/reference/Families.h"
#include "moec/reference/Tolerance.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Quantize.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace {

/// The exit statuses of docs/cli.md.
enum ExitStatus : int { kSuccess = 0, kCheckFailed = 1, kBadInput = 2 };

using namespace moec::ref;

struct ReferenceArgs {
  std::string family;
  std::string shape;
  int64_t hidden = 0, intermediate = 0, experts = 0, topk = 0;
  int64_t validIntermediate = 0;
  int64_t ep = 2;
  std::string transport = "fixed-slot";
  std::string tokens = "6";
  uint64_t seed = 1;
  std::string mode = "faithful";
  int64_t mTile = 32;
  int64_t interleave = 16;
  std::optional<double> swigluLimit;
  std::string activation = "silu";
  /// The format the BF16 tokens are quantised to (fp8: A8W4, fp4: MXFP4,
  /// A4W4; bf16: read as they are, A16W4) and of the intermediate between
  /// the GEMMs (empty: as the tokens).
  std::string aFormat = "fp8", midFormat;
  double situBeta = 4.0;
  double situLinearBeta = 25.0;
  bool noShared = false;
  int64_t slotCapacity = 0;
  int64_t compactCapacity = 0;
  int64_t hotRank = -1;
  double invalidFraction = 0.0;
  std::string inputs;
  bool writeInputs = false;
  bool stages = false;
  int threads = 0;
  std::string compare;
  /// Relative L2 bound of --compare; negative: the mode's default
  /// (kLayerOutputRelL2Bound for quant-faithful, 0.10 for exact).
  double tolerance = -1.0;
  std::string output;
};

/// A failure with its exit status and one-line message.
struct Failure {
  int status = kSuccess;
  std::string message;
  bool failed() const { return status != kSuccess; }
};

Failure badInput(const std::string &message) {
  return {kBadInput, message};
}

std::string joinPath(const std::string &dir, const std::string &name) {
  return (std::filesystem::path(dir) / name).string();
}

/// Parses "6" or "6,0,3,7" into token counts.
bool parseTokens(const std::string &text, std::vector<int64_t> &tokens) {
  tokens.clear();
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    // At most 7 digits: a token count beyond 10^7 per rank is a typo, and
    // stoll must not overflow.
    if (item.empty() || item.size() > 7 ||
        item.find_first_not_of("0123456789") != std::string::npos)
      return false;
    tokens.push_back(std::stoll(item));
  }
  return !tokens.empty();
}

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

/// Everything one layer run needs; weights either owned arrays or generated.
struct LayerInputs {
  MoeShape shape;
  std::vector<TokenBatch> batches; // one per rank (one for tp / fhmoe)
  std::vector<uint8_t> w13Packed, w13Scales, w2Packed, w2Scales;
  std::unique_ptr<WeightSource> w13, w2;
  std::vector<uint8_t> sharedW13, sharedW13Scale, sharedW2, sharedW2Scale;
  /// Optional per-expert biases (w13_bias.npy, w2_bias.npy of --inputs).
  ExpertBias bias;
};

Failure readArray(const std::string &dir, const std::string &name,
                  NpyDtype dtype, const std::vector<int64_t> &shape,
                  NpyArray &array) {
  std::string path = joinPath(dir, name);
  if (Status status = readNpy(path, array); !status)
    return badInput(status.message());
  if (Status status = expectNpy(path, array, dtype, shape); !status)
    return badInput(status.message());
  return {};
}

Failure readBatch(const std::string &dir, const std::string &prefix,
                  const MoeShape &shape, TokenBatch &batch) {
  NpyArray ids, hidden, weights;
  if (Failure f = readArray(dir, prefix + "topk_ids.npy", NpyDtype::Int32,
                            {-1, shape.topk}, ids);
      f.failed())
    return f;
  batch.tokens = ids.shape[0];
  if (Failure f = readArray(dir, prefix + "hidden_states.npy", NpyDtype::UInt16,
                            {batch.tokens, shape.hidden}, hidden);
      f.failed())
    return f;
  if (Failure f = readArray(dir, prefix + "topk_weights.npy", NpyDtype::Float32,
                            {batch.tokens, shape.topk}, weights);
      f.failed())
    return f;
  batch.topkIds = ids.toVector<int32_t>();
  batch.hiddenBf16 = hidden.toVector<uint16_t>();
  batch.topkWeights = weights.toVector<float>();
  return {};
}

Failure readInputs(const ReferenceArgs &args, int64_t ranks, LayerInputs &in) {
  const std::string &dir = args.inputs;
  NpyArray w13, w13Scale, w2, w2Scale;
  {
    std::string path = joinPath(dir, "w13.npy");
    if (Status status = readNpy(path, w13); !status)
      return badInput(status.message());
    if (Status status = expectNpy(path, w13, NpyDtype::UInt8, {-1, -1, -1}); !status)
      return badInput(status.message());
  }
  MoeShape &shape = in.shape;
  shape.experts = w13.shape[0];
  shape.intermediate = w13.shape[1] / 2;
  shape.hidden = w13.shape[2] * 2;
  if (shape.experts <= 0 || w13.shape[1] % 2 != 0 || shape.hidden % 32 != 0 ||
      shape.intermediate % 32 != 0)
    return badInput(joinPath(dir, "w13.npy") + ": shape " + w13.shapeString() +
                    " is not [E, 2I, H/2] with H and I multiples of 32");
  {
    // topk comes from the first routing file.
    std::string first = args.family == "megamoe" ? "rank0.topk_ids.npy" : "topk_ids.npy";
    NpyArray ids;
    if (Failure f = readArray(dir, first, NpyDtype::Int32, {-1, -1}, ids); f.failed())
      return f;
    shape.topk = ids.shape[1];
  }
  if (Failure f = readArray(dir, "w13_scale.npy", NpyDtype::UInt8,
                            {shape.experts, 2 * shape.intermediate, shape.hidden / 32},
                            w13Scale);
      f.failed())
    return f;
  if (Failure f = readArray(dir, "w2.npy", NpyDtype::UInt8,
                            {shape.experts, shape.hidden, shape.intermediate / 2}, w2);
      f.failed())
    return f;
  if (Failure f = readArray(dir, "w2_scale.npy", NpyDtype::UInt8,
                            {shape.experts, shape.hidden, shape.intermediate / 32},
                            w2Scale);
      f.failed())
    return f;
  in.w13Packed = std::move(w13.bytes);
  in.w13Scales = std::move(w13Scale.bytes);
  in.w2Packed = std::move(w2.bytes);
  in.w2Scales = std::move(w2Scale.bytes);
  if (args.family == "fhmoe" && !args.noShared) {
    const int64_t H = shape.hidden, I = shape.intermediate;
    NpyArray a, b, c, d;
    if (Failure f = readArray(dir, "shared_w13.npy", NpyDtype::UInt8, {2 * I, H}, a); f.failed())
      return f;
    if (Failure f = readArray(dir, "shared_w13_scale.npy", NpyDtype::UInt8, {2 * I, H / 32}, b);
        f.failed())
      return f;
    if (Failure f = readArray(dir, "shared_w2.npy", NpyDtype::UInt8, {H, I}, c); f.failed())
      return f;
    if (Failure f = readArray(dir, "shared_w2_scale.npy", NpyDtype::UInt8, {H, I / 32}, d);
        f.failed())
      return f;
    in.sharedW13 = std::move(a.bytes);
    in.sharedW13Scale = std::move(b.bytes);
    in.sharedW2 = std::move(c.bytes);
    in.sharedW2Scale = std::move(d.bytes);
  }
  // Optional per-expert FP32 biases, one row per expert the layer holds
  // (FHMoE's shared expert last), as AITER's bias1 and bias2.
  const int64_t biasRows =
      shape.experts + (args.family == "fhmoe" && !args.noShared ? 1 : 0);
  for (auto [name, columns, values] :
       {std::make_tuple("w13_bias.npy", 2 * shape.intermediate, &in.bias.w13),
        std::make_tuple("w2_bias.npy", shape.hidden, &in.bias.w2)}) {
    if (!std::filesystem::exists(joinPath(dir, name)))
      continue;
    NpyArray bias;
    if (Failure f = readArray(dir, name, NpyDtype::Float32, {biasRows, columns},
                              bias);
        f.failed())
      return f;
    *values = bias.toVector<float>();
  }
  in.batches.resize(ranks);
  for (int64_t rank = 0; rank < ranks; ++rank) {
    std::string prefix =
        args.family == "megamoe" ? "rank" + std::to_string(rank) + "." : "";
    if (Failure f = readBatch(dir, prefix, shape, in.batches[rank]); f.failed())
      return f;
  }
  in.w13 = std::make_unique<DenseWeights>(WeightFormat::Mxfp4, in.w13Packed.data(),
                                          in.w13Scales.data(), shape.experts,
                                          2 * shape.intermediate, shape.hidden);
  in.w2 = std::make_unique<DenseWeights>(WeightFormat::Mxfp4, in.w2Packed.data(),
                                         in.w2Scales.data(), shape.experts,
                                         shape.hidden, shape.intermediate);
  return {};
}

Failure resolveShape(const ReferenceArgs &args, MoeShape &shape,
                     int64_t &validIntermediate) {
  if (!args.shape.empty()) {
    const ShapePreset *preset = findShapePreset(args.shape);
    if (!preset) {
      std::string names;
      for (const ShapePreset &p : shapePresets())
        names += (names.empty() ? "" : ", ") + p.name;
      return badInput("--shape: unknown shape '" + args.shape + "' (known: " +
                      names + ")");
    }
    shape = preset->shape;
    validIntermediate = preset->validIntermediate;
  }
  // Explicit dimensions override the preset's.
  if (args.hidden)
    shape.hidden = args.hidden;
  if (args.intermediate) {
    shape.intermediate = args.intermediate;
    validIntermediate = args.intermediate;
  }
  if (args.experts)
    shape.experts = args.experts;
  if (args.topk)
    shape.topk = args.topk;
  if (args.validIntermediate)
    validIntermediate = args.validIntermediate;
  if (shape.hidden <= 0 || shape.intermediate <= 0 || shape.experts <= 0 ||
      shape.topk <= 0)
    return badInput("--shape: give a preset name or all of --hidden, "
                    "--intermediate, --experts, --topk");
  if (shape.hidden % 32 || shape.intermediate % 32)
    return badInput("--hidden/--intermediate: must be multiples of 32 (got " +
                    std::to_string(shape.hidden) + ", " +
                    std::to_string(shape.intermediate) + ")");
  if (validIntermediate <= 0 || validIntermediate > shape.intermediate)
    return badInput("--valid-intermediate: must be in [1, I]");
  return {};
}

Failure generateInputs(const ReferenceArgs &args,
                       const std::vector<int64_t> &tokens, const GluConfig &glu,
                       LayerInputs &in) {
  int64_t validIntermediate = 0;
  if (Failure f = resolveShape(args, in.shape, validIntermediate); f.failed())
    return f;
  const MoeShape &shape = in.shape;
  in.w13 = std::make_unique<GeneratedMxfp4Weights>(
      args.seed, 13, shape.experts, 2 * shape.intermediate, shape.hidden,
      defaultScaleExponent(shape.hidden),
      paddedW13Rows(glu, shape.intermediate, validIntermediate));
  in.w2 = std::make_unique<GeneratedMxfp4Weights>(
      args.seed, 2, shape.experts, shape.hidden, shape.intermediate,
      defaultScaleExponent(validIntermediate), std::vector<bool>{},
      validIntermediate);
  RoutingOptions routing;
  routing.invalidFraction = args.invalidFraction;
  if (args.hotRank >= 0) {
    routing.ep = args.ep;
    routing.hotRank = args.hotRank;
  }
  for (size_t rank = 0; rank < tokens.size(); ++rank)
    in.batches.push_back(generateBatch(args.seed, rank, tokens[rank], shape, routing));
  if (args.family == "fhmoe" && !args.noShared) {
    generateFp8Expert(args.seed, 1, 2 * shape.intermediate, shape.hidden,
                      in.sharedW13, in.sharedW13Scale);
    generateFp8Expert(args.seed, 2, shape.hidden, shape.intermediate,
                      in.sharedW2, in.sharedW2Scale);
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Outputs
//===----------------------------------------------------------------------===//

class Writer {
public:
  explicit Writer(std::string dir) : dir_(std::move(dir)) {}
  template <typename T>
  Failure write(const std::string &name, NpyDtype dtype,
                std::vector<int64_t> shape, const std::vector<T> &values) {
    Status status =
        writeNpy(joinPath(dir_, name), NpyArray::fromVector(dtype, std::move(shape), values));
    if (!status)
      return badInput(status.message());
    return {};
  }

private:
  std::string dir_;
};

std::vector<float> toFloat(const std::vector<double> &values) {
  std::vector<float> result(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    result[i] = roundToFloat(values[i]);
  return result;
}

Failure writeInputs(Writer &writer, const ReferenceArgs &args,
                    const LayerInputs &in) {
  const MoeShape &s = in.shape;
  std::vector<uint8_t> packed, scales;
  materializeWeights(*in.w13, packed, scales);
  if (Failure f = writer.write("w13.npy", NpyDtype::UInt8,
                               {s.experts, 2 * s.intermediate, s.hidden / 2}, packed);
      f.failed())
    return f;
  if (Failure f = writer.write("w13_scale.npy", NpyDtype::UInt8,
                               {s.experts, 2 * s.intermediate, s.hidden / 32}, scales);
      f.failed())
    return f;
  materializeWeights(*in.w2, packed, scales);
  if (Failure f = writer.write("w2.npy", NpyDtype::UInt8,
                               {s.experts, s.hidden, s.intermediate / 2}, packed);
      f.failed())
    return f;
  if (Failure f = writer.write("w2_scale.npy", NpyDtype::UInt8,
                               {s.experts, s.hidden, s.intermediate / 32}, scales);
      f.failed())
    return f;
  if (!in.sharedW13.empty()) {
    const int64_t H = s.hidden, I = s.intermediate;
    for (auto [name, values, shape] :
         {std::make_tuple("shared_w13.npy", &in.sharedW13, std::vector<int64_t>{2 * I, H}),
          std::make_tuple("shared_w13_scale.npy", &in.sharedW13Scale,
                          std::vector<int64_t>{2 * I, H / 32}),
          std::make_tuple("shared_w2.npy", &in.sharedW2, std::vector<int64_t>{H, I}),
          std::make_tuple("shared_w2_scale.npy", &in.sharedW2Scale,
                          std::vector<int64_t>{H, I / 32})})
      if (Failure f = writer.write(name, NpyDtype::UInt8, shape, *values); f.failed())
        return f;
  }
  for (size_t rank = 0; rank < in.batches.size(); ++rank) {
    const TokenBatch &b = in.batches[rank];
    std::string prefix = args.family == "megamoe" ? "rank" + std::to_string(rank) + "." : "";
    if (Failure f = writer.write(prefix + "hidden_states.npy", NpyDtype::UInt16,
                                 {b.tokens, s.hidden}, b.hiddenBf16);
        f.failed())
      return f;
    if (Failure f = writer.write(prefix + "topk_ids.npy", NpyDtype::Int32,
                                 {b.tokens, s.topk}, b.topkIds);
        f.failed())
      return f;
    if (Failure f = writer.write(prefix + "topk_weights.npy", NpyDtype::Float32,
                                 {b.tokens, s.topk}, b.topkWeights);
        f.failed())
      return f;
  }
  return {};
}

/// The oracle's activation rows of one format as <stem>_<format>.npy:
/// FP8 one byte a value and MXFP4 two E2M1 codes a byte ([rows, depth] or
/// [rows, depth/2] uint8) with <stem>_scale.npy (E8M0 per 1x32); BF16 the
/// values' bits ([rows, depth] uint16), which carry no scales.
Failure writeActivationRows(Writer &writer, const std::string &stem,
                            ActivationFormat format, int64_t rows,
                            int64_t depth, const std::vector<uint8_t> &codes,
                            const std::vector<uint8_t> &scales) {
  if (format == ActivationFormat::Bf16) {
    std::vector<uint16_t> bits(codes.size() / 2);
    for (size_t i = 0; i < bits.size(); ++i)
      bits[i] = uint16_t(codes[2 * i] | (codes[2 * i + 1] << 8));
    return writer.write(stem + "_bf16.npy", NpyDtype::UInt16, {rows, depth}, bits);
  }
  const bool fp4 = format == ActivationFormat::Mxfp4;
  if (Failure f = writer.write(stem + (fp4 ? "_fp4.npy" : "_fp8.npy"), NpyDtype::UInt8,
                               {rows, activationRowBytes(format, depth)}, codes);
      f.failed())
    return f;
  return writer.write(stem + "_scale.npy", NpyDtype::UInt8, {rows, depth / 32}, scales);
}

/// Output and (with --stages) stage arrays of one rank or TP group.
Failure writeResults(Writer &writer, const std::string &prefix,
                     const MoeShape &shape, int64_t tokens, int64_t rows,
                     const StageResults &r, bool stages, bool faithful,
                     ActivationFormat inputFormat,
                     ActivationFormat intermediateFormat) {
  const int64_t H = shape.hidden, I = shape.intermediate;
  if (Failure f = writer.write(prefix + "output.npy", NpyDtype::Float32, {tokens, H}, r.output);
      f.failed())
    return f;
  if (Failure f = writer.write(prefix + "output_bf16.npy", NpyDtype::UInt16, {tokens, H},
                               r.outputBf16);
      f.failed())
    return f;
  if (!stages)
    return {};
  if (Failure f = writer.write(prefix + "sorted_route_ids.npy", NpyDtype::Int32,
                               {static_cast<int64_t>(r.routes.routeIds.size())},
                               r.routes.routeIds);
      f.failed())
    return f;
  if (Failure f = writer.write(prefix + "tile_expert_ids.npy", NpyDtype::Int32,
                               {r.routes.numTiles()}, r.routes.tileExperts);
      f.failed())
    return f;
  if (faithful) {
    if (Failure f = writeActivationRows(writer, prefix + "input", inputFormat,
                                        tokens, H, r.inputCodes, r.inputScales);
        f.failed())
      return f;
  }
  if (Failure f = writer.write(prefix + "activation.npy", NpyDtype::Float32, {rows, I},
                               toFloat(r.activation));
      f.failed())
    return f;
  if (faithful) {
    if (Failure f = writeActivationRows(writer, prefix + "intermediate",
                                        intermediateFormat, rows, I,
                                        r.intermediateCodes, r.intermediateScales);
        f.failed())
      return f;
  }
  return writer.write(prefix + "down.npy", NpyDtype::Float32, {rows, H},
                      toFloat(r.downRows));
}

/// How DIR/<prefix>output.npy compares with the oracle output.
struct Comparison {
  double relativeL2 = 0.0;
  /// Elements outside their per-element bound (with a tolerance vector),
  /// and non-finite elements (always counted); the largest error / bound
  /// and its element.
  int64_t overBound = 0, nonFinite = 0;
  double worstOverBound = 0.0;
  int64_t worstElement = -1;
};

/// Compares DIR/<prefix>output.npy (<f4, or <u2 BF16 bits) with the oracle
/// output, and element by element with `elementBound` when it is not empty
/// (StageResults::outputTolerance).
Failure compareOutput(const std::string &dir, const std::string &prefix,
                      const std::vector<float> &oracle,
                      const std::vector<double> &elementBound, int64_t tokens,
                      int64_t hidden, Comparison &result) {
  std::string path = joinPath(dir, prefix + "output.npy");
  NpyArray array;
  if (Status status = readNpy(path, array); !status)
    return badInput(status.message());
  std::vector<double> candidate;
  if (array.dtype == NpyDtype::Float32) {
    for (float value : array.toVector<float>())
      candidate.push_back(value);
  } else if (array.dtype == NpyDtype::UInt16) {
    for (uint16_t bits : array.toVector<uint16_t>())
      candidate.push_back(decodeBf16(bits));
  } else {
    return badInput(path + ": dtype is '" + npyDescr(array.dtype) +
                    "', expected '<f4' or '<u2' (BF16 bits)");
  }
  if (array.shape != std::vector<int64_t>{tokens, hidden})
    return badInput(path + ": shape is " + array.shapeString() + ", expected (" +
                    std::to_string(tokens) + ", " + std::to_string(hidden) + ")");
  double error = 0, reference = 0;
  for (size_t i = 0; i < candidate.size(); ++i) {
    if (!std::isfinite(candidate[i])) {
      ++result.nonFinite;
      continue;
    }
    double difference = candidate[i] - oracle[i];
    error += difference * difference;
    reference += static_cast<double>(oracle[i]) * oracle[i];
    if (elementBound.empty())
      continue;
    const double bound = elementBound[i];
    const double error = std::fabs(difference);
    if (!(error <= bound))
      ++result.overBound;
    const double ratio = bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0);
    if (result.worstElement < 0 || ratio > result.worstOverBound) {
      result.worstOverBound = ratio;
      result.worstElement = static_cast<int64_t>(i);
    }
  }
  result.relativeL2 = reference > 0 ? std::sqrt(error / reference) : std::sqrt(error);
  if (!std::isfinite(result.relativeL2))
    result.relativeL2 = INFINITY;
  return {};
}

double rms(const std::vector<float> &values) {
  double sum = 0;
  for (float v : values)
    sum += static_cast<double>(v) * v;
  return values.empty() ? 0.0 : std::sqrt(sum / values.size());
}

//===----------------------------------------------------------------------===//
// The command
//===----------------------------------------------------------------------===//

Failure runReference(const ReferenceArgs &args) {
  const bool mega = args.family == "megamoe";
  std::vector<int64_t> tokens;
  if (!parseTokens(args.tokens, tokens))
    return badInput("--m: expected a token count below 10^7 or a comma-separated "
                    "list of them, got '" +
                    args.tokens + "'");
  const int64_t ranks = mega ? args.ep : 1;
  if (ranks <= 0)
    return badInput("--ep: must be positive");
  if (tokens.size() == 1)
    tokens.assign(ranks, tokens[0]);
  if (static_cast<int64_t>(tokens.size()) != ranks)
    return badInput("--m: " + std::to_string(tokens.size()) +
                    " token counts for " + std::to_string(ranks) + " ranks");
  if (args.mTile <= 0)
    return badInput("--m-tile: must be positive");
  if (args.hotRank >= 0 && !mega)
    return badInput("--hot-rank: only for --family megamoe");
  if (args.hotRank >= ranks)
    return badInput("--hot-rank: must be below --ep");
  if (args.invalidFraction < 0 || args.invalidFraction > 1)
    return badInput("--invalid-fraction: must be in [0, 1]");
  if (args.output.empty())
    return badInput("-o: an output directory is required");

  const OracleMode mode =
      args.mode == "exact" ? OracleMode::Exact : OracleMode::QuantFaithful;
  const bool gptOss = args.activation == "gpt-oss-swiglu";
  const bool situV2 = args.activation == "situ-v2";
  const std::string midFormat = args.midFormat.empty() ? args.aFormat : args.midFormat;
  if (mega && (args.aFormat != "fp8" || midFormat != "fp8"))
    return badInput("--a-format " + args.aFormat + " --mid-format " + midFormat +
                    ": the MegaMoE oracle quantises the tokens and the "
                    "intermediate to FP8 (A8W4); MXFP4 (A4W4) and BF16 (A16W4) "
                    "activations are tp and fhmoe formats");
  // As a table's a_format=bf16 and mid_format=bf16: AITER's a16w4 stage 1
  // writes a BF16 intermediate, and no stage reads BF16 rows otherwise.
  if ((args.aFormat == "bf16") != (midFormat == "bf16"))
    return badInput("--a-format " + args.aFormat + " --mid-format " + midFormat +
                    ": BF16 tokens (A16W4) and a BF16 intermediate go together");
  auto formatOf = [](const std::string &name) {
    return name == "fp4"    ? ActivationFormat::Mxfp4
           : name == "bf16" ? ActivationFormat::Bf16
                            : ActivationFormat::Fp8E4M3;
  };
  const ActivationFormat inputFormat = formatOf(args.aFormat);
  const ActivationFormat intermediateFormat = formatOf(midFormat);
  if (situV2 && mega)
    return badInput("--activation situ-v2: the MegaMoE networks compute SiLU "
                    "(SiTUv2 is a TP and FHMoE activation)");
  if (situV2 && (args.situBeta <= 0 || args.situLinearBeta <= 0))
    return badInput("--situ-beta and --situ-linear-beta must be positive");
  // Default clamps: DeepSeek V4's 10 for MegaMoE, AITER's 7 for GPT-OSS's
  // SwiGLU, none for SiLU in the TP families.
  const double limit = args.swigluLimit ? *args.swigluLimit
                       : mega           ? 10.0
                       : gptOss         ? 7.0
                                        : 0.0;
  // MegaMoE's W13 is gate rows then up rows; the TP families interleave.
  const GluConfig glu{mega ? 0 : args.interleave, limit, gptOss};

  LayerInputs in;
  Failure failure = args.inputs.empty() ? generateInputs(args, tokens, glu, in)
                                        : readInputs(args, ranks, in);
  if (failure.failed())
    return failure;

  std::error_code error;
  std::filesystem::create_directories(args.output, error);
  if (error)
    return badInput(args.output + ": cannot create output directory (" +
                    error.message() + ")");
  Writer writer(args.output);
  if (args.writeInputs && args.inputs.empty())
    if (Failure f = writeInputs(writer, args, in); f.failed())
      return f;

  const MoeShape &shape = in.shape;
  // The per-element bound holds against the quantisation-faithful oracle.
  const bool elementBounds =
      !args.compare.empty() && mode == OracleMode::QuantFaithful;
  const double relL2Bound =
      args.tolerance >= 0 ? args.tolerance
                          : (mode == OracleMode::QuantFaithful
                                 ? kLayerOutputRelL2Bound
                                 : 0.10);
  auto start = std::chrono::steady_clock::now();
  std::vector<StageResults> results;
  std::vector<int64_t> rows; // GEMM rows per result (routes or receive rows)
  Status status;
  if (mega) {
    MegaMoeConfig config;
    config.shape = shape;
    config.ep = args.ep;
    config.transport =
        args.transport == "compact" ? Transport::Compact : Transport::FixedSlot;
    config.mTile = args.mTile;
    config.slotCapacity = args.slotCapacity;
    config.compactCapacity = args.compactCapacity;
    config.swigluLimit = limit;
    config.gptOssSwiglu = gptOss;
    config.bias = in.bias;
    config.mode = mode;
    config.outputTolerance = elementBounds;
    config.numThreads = args.threads;
    std::vector<MegaMoeRankResult> megaResults;
    status = runMegaMoe(config, *in.w13, *in.w2, in.batches, megaResults);
    if (!status)
      // Overflow is the one failure that is a check, not bad input.
      return {status.message().find("overflow") != std::string::npos
                  ? kCheckFailed
                  : kBadInput,
              status.message()};
    for (MegaMoeRankResult &r : megaResults) {
      rows.push_back(r.plan.numRows);
      if (args.stages) {
        std::vector<int32_t> sources;
        for (int64_t row = 0; row < r.plan.numRows; ++row) {
          sources.push_back(r.plan.sourceRank[row]);
          sources.push_back(r.plan.sourceRoute[row]);
        }
        std::string prefix = "rank" + std::to_string(results.size()) + ".";
        if (Failure f = writer.write(prefix + "recv_source.npy", NpyDtype::Int32,
                                     {r.plan.numRows, 2}, sources);
            f.failed())
          return f;
      }
      results.push_back(std::move(r.stages));
    }
  } else {
    TpMoeConfig tp;
    tp.shape = shape;
    tp.mTile = args.mTile;
    tp.gateUpInterleave = args.interleave;
    tp.swigluLimit = limit;
    tp.gptOssSwiglu = gptOss;
    tp.situV2 = situV2;
    tp.situBeta = args.situBeta;
    tp.situLinearBeta = args.situLinearBeta;
    tp.inputFormat = inputFormat;
    tp.intermediateFormat = intermediateFormat;
    tp.bias = in.bias;
    tp.mode = mode;
    tp.outputTolerance = elementBounds;
    tp.numThreads = args.threads;
    results.resize(1);
    if (args.family == "tp") {
      status = runTpMoe(tp, *in.w13, *in.w2, in.batches[0], results[0]);
      rows.push_back(in.batches[0].tokens * shape.topk);
    } else {
      FhMoeConfig config;
      config.tp = tp;
      config.includeSharedExpert = !args.noShared;
      SharedExpertWeights shared{in.sharedW13.data(), in.sharedW13Scale.data(),
                                 in.sharedW2.data(), in.sharedW2Scale.data()};
      status = runFhMoe(config, *in.w13, *in.w2, args.noShared ? nullptr : &shared,
                        in.batches[0], results[0]);
      rows.push_back(in.batches[0].tokens * (shape.topk + (args.noShared ? 0 : 1)));
    }
    if (!status)
      return badInput(status.message());
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Failure compareFailure;
  for (size_t i = 0; i < results.size(); ++i) {
    std::string prefix = mega ? "rank" + std::to_string(i) + "." : "";
    int64_t rankTokens = in.batches[i].tokens;
    if (Failure f = writeResults(writer, prefix, shape, rankTokens, rows[i],
                                 results[i], args.stages,
                                 mode == OracleMode::QuantFaithful,
                                 mega ? ActivationFormat::Fp8E4M3 : inputFormat,
                                 mega ? ActivationFormat::Fp8E4M3
                                      : intermediateFormat);
        f.failed())
      return f;
    std::printf("%s%s tokens %lld, output rms %.6g\n", mega ? "rank " : "",
                mega ? std::to_string(i).c_str() : args.family.c_str(),
                static_cast<long long>(rankTokens), rms(results[i].output));
    if (!args.compare.empty()) {
      Comparison c;
      const std::string path = joinPath(args.compare, prefix + "output.npy");
      if (Failure f = compareOutput(args.compare, prefix, results[i].output,
                                    results[i].outputTolerance, rankTokens,
                                    shape.hidden, c);
          f.failed())
        return f;
      std::string problem;
      if (c.nonFinite > 0)
        problem = std::to_string(c.nonFinite) + " non-finite elements";
      else if (!(c.relativeL2 <= relL2Bound))
        problem = "relative L2 " + std::to_string(c.relativeL2) +
                  " exceeds tolerance " + std::to_string(relL2Bound);
      else if (c.overBound > 0)
        problem = std::to_string(c.overBound) +
                  " elements over their bound (worst: element " +
                  std::to_string(c.worstElement) + ", " +
                  std::to_string(c.worstOverBound) + " x its bound)";
      std::printf("  compare %s: relative L2 %.6g (tolerance %g)", path.c_str(),
                  c.relativeL2, relL2Bound);
      if (elementBounds)
        std::printf(", %lld elements over their bound (worst %.3g of it)",
                    static_cast<long long>(c.overBound), c.worstOverBound);
      std::printf(", %lld non-finite %s\n", static_cast<long long>(c.nonFinite),
                  problem.empty() ? "PASS" : "FAIL");
      if (!problem.empty() && !compareFailure.failed())
        compareFailure = {kCheckFailed, path + ": " + problem};
    }
  }
  std::printf("oracle time %.3f s\n", seconds);
  return compareFailure;
}

} // namespace

void addReferenceCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<ReferenceArgs>();
  CLI::App *cmd = app.add_subcommand(
      "reference",
      "Compute one MoE layer with the CPU reference oracle and write .npy "
      "outputs (docs/reference.md)");
  cmd->add_option("--family", args->family, "megamoe | tp | fhmoe")
      ->required()
      ->check(CLI::IsMember({"megamoe", "tp", "fhmoe"}));
  cmd->add_option("--shape", args->shape,
                  "preset: flash, flash-tp4, flash-draft-tp4, pro-fhmoe, small, small-ep");
  cmd->add_option("--hidden", args->hidden, "H (overrides the preset)");
  cmd->add_option("--intermediate", args->intermediate, "I (overrides the preset)");
  cmd->add_option("--experts", args->experts, "routed experts E (overrides the preset)");
  cmd->add_option("--topk", args->topk, "routed slots per token (overrides the preset)");
  cmd->add_option("--valid-intermediate", args->validIntermediate,
                  "columns of I holding data; the rest is zero padding");
  cmd->add_option("--ep", args->ep, "megamoe: EP size (simulated ranks)");
  cmd->add_option("--transport", args->transport, "megamoe: fixed-slot | compact")
      ->check(CLI::IsMember({"fixed-slot", "compact"}));
  cmd->add_option("--m", args->tokens,
                  "tokens per rank (megamoe) or tokens (tp, fhmoe); "
                  "a comma list gives one count per rank");
  cmd->add_option("--seed", args->seed, "seed of the generated data");
  cmd->add_option("--mode", args->mode, "faithful | exact")
      ->check(CLI::IsMember({"faithful", "exact"}));
  cmd->add_option("--m-tile", args->mTile, "M tile of the sorted route list");
  cmd->add_option("--interleave", args->interleave,
                  "tp/fhmoe: gate/up interleave granularity of W13 rows (0: gate then up)");
  cmd->add_option("--activation", args->activation,
                  "W13 activation: silu, gpt-oss-swiglu (GPT-OSS, AITER's "
                  "ActivationType.Swiglu: g * sigmoid(1.702 g) * (u + 1)), or "
                  "situ-v2 (Kimi K3, AITER's ActivationType.Situv2; tp and fhmoe)")
      ->check(CLI::IsMember({"silu", "gpt-oss-swiglu", "situ-v2"}));
  cmd->add_option("--a-format", args->aFormat,
                  "tp/fhmoe, faithful mode: the format the BF16 tokens are "
                  "quantised to, fp8 (A8W4, the default) or fp4 (MXFP4 with "
                  "E8M0 1x32 scales: AITER's A4W4, q_dtype_a "
                  "torch.float4_e2m1fn_x2), or bf16 (read as they are: AITER's "
                  "A16W4, q_dtype_a torch.bfloat16; with --mid-format bf16)")
      ->check(CLI::IsMember({"fp8", "fp4", "bf16"}));
  cmd->add_option("--mid-format", args->midFormat,
                  "tp/fhmoe, faithful mode: the format of the intermediate "
                  "between the GEMMs, fp8, fp4 or bf16 (default: --a-format's)")
      ->check(CLI::IsMember({"fp8", "fp4", "bf16"}));
  cmd->add_option("--situ-beta", args->situBeta,
                  "situ-v2: the gate's beta (AITER's default 4)");
  cmd->add_option("--situ-linear-beta", args->situLinearBeta,
                  "situ-v2: the up rows' linear beta (AITER's default 25)");
  cmd->add_option("--swiglu-limit", args->swigluLimit,
                  "SwiGLU clamp (default 10 for megamoe, 7 for gpt-oss-swiglu, "
                  "0 = none otherwise)");
  cmd->add_flag("--no-shared", args->noShared, "fhmoe: omit the shared expert");
  cmd->add_option("--slot-capacity", args->slotCapacity,
                  "megamoe fixed-slot: receive slots per local expert (0: default)");
  cmd->add_option("--compact-capacity", args->compactCapacity,
                  "megamoe compact: receive-row limit per rank (0: none)");
  cmd->add_option("--hot-rank", args->hotRank,
                  "generated routing: send every token to this rank's experts");
  cmd->add_option("--invalid-fraction", args->invalidFraction,
                  "generated routing: fraction of slots made invalid");
  cmd->add_option("--inputs", args->inputs,
                  "read inputs and weights from this directory of .npy files "
                  "(with w13_bias.npy / w2_bias.npy when there)");
  cmd->add_flag("--write-inputs", args->writeInputs,
                "also write the generated inputs and weights to the output directory");
  cmd->add_flag("--stages", args->stages, "also write stage outputs");
  cmd->add_option("--threads", args->threads, "worker threads (0: all)");
  cmd->add_option("--compare", args->compare,
                  "directory with a candidate output.npy (or rankN.output.npy) to check");
  cmd->add_option("--tolerance", args->tolerance,
                  "relative L2 bound for --compare (default: 2^-7 against the "
                  "quant-faithful oracle, which also checks every element "
                  "against its own bound; 0.10 with --mode exact)");
  cmd->add_option("-o,--output", args->output, "output directory")->required();
  cmd->callback([args, &exitStatus] {
    Failure failure = runReference(*args);
    if (failure.failed())
      std::cerr << "moec reference: " << failure.message << "\n";
    exitStatus = failure.status;
  });
}
