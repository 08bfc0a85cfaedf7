//===- StageData.cpp - generators and helpers the stage harnesses share ---===//

#include "SharedRoute.h"
#include "StageSupport.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Quantize.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

using namespace mlir;

namespace moec::emu {

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

void RankData::releaseWeights() {
  w13 = ExpertWeights();
  w2 = ExpertWeights();
}

RankData &LayerData::rank(int64_t rank) {
  while (int64_t(ranks.size()) <= rank) {
    ranks.emplace_back();
    ranks.back().rank = int64_t(ranks.size()) - 1;
  }
  return ranks[size_t(rank)];
}

//===----------------------------------------------------------------------===//
// Tolerances
//===----------------------------------------------------------------------===//

double ulpBf16(double x) {
  x = std::fabs(x);
  if (!(x >= std::ldexp(1.0, -126)))
    return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::ilogb(x) - 7);
}

double ulpFp8(double x, double scale) {
  const double v = std::fabs(x) / scale;
  const int exponent = v > 0 ? std::max(std::ilogb(v), -6) : -6;
  return std::ldexp(scale, exponent - 3);
}

double ulpFp4(double x, double scale) {
  const double v = std::fabs(x) / scale;
  const int exponent = v >= 1 ? std::min(std::ilogb(v), 2) : 0;
  return std::ldexp(scale, exponent - 1);
}

double ulpOf(ref::ActivationFormat format, double x, double scale) {
  if (format == ref::ActivationFormat::Bf16)
    return ulpBf16(x);
  return format == ref::ActivationFormat::Mxfp4 ? ulpFp4(x, scale)
                                                : ulpFp8(x, scale);
}

double relativeL2(double errorSquares, double referenceSquares) {
  return referenceSquares > 0 ? std::sqrt(errorSquares / referenceSquares)
                              : std::sqrt(errorSquares);
}

void OutputDistance::merge(const OutputDistance &other) {
  if (!(other.relL2 <= relL2))
    relL2 = other.relL2;
  nonFinite += other.nonFinite;
}

OutputDistance outputDistance(const std::vector<double> &got,
                              const std::vector<float> &want) {
  OutputDistance distance;
  double errorSquares = 0.0, referenceSquares = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++distance.nonFinite;
      continue;
    }
    const double err = got[i] - want[i];
    errorSquares += err * err;
    referenceSquares += double(want[i]) * want[i];
  }
  distance.relL2 = relativeL2(errorSquares, referenceSquares);
  return distance;
}

bool ElementCheck::add(double got, double want, double tolerance) {
  ++outcome.elementsChecked;
  if (!std::isfinite(got)) {
    ++outcome.nonFinite;
    return false;
  }
  const double err = std::fabs(got - want);
  outcome.worstErrorOverTolerance =
      std::max(outcome.worstErrorOverTolerance, err / tolerance);
  if (!(err <= tolerance))
    ++outcome.elementsOverTolerance;
  errorSquares += err * err;
  referenceSquares += want * want;
  return true;
}

void ElementCheck::finish() {
  outcome.relL2 = relativeL2(errorSquares, referenceSquares);
  outcome.pass =
      outcome.run.totalFindings() == 0 && outcome.elementsOverTolerance == 0 &&
      outcome.nonFinite == 0 && outcome.listedRowsUnwritten == 0 &&
      outcome.unlistedRowsWritten == 0 && outcome.zeroExpertNonZero == 0 &&
      outcome.elementsUnwritten == 0 && outcome.relL2 <= outcome.relL2Bound;
}

std::string rowCounts(const StageOutcome &outcome) {
  char text[256];
  std::snprintf(text, sizeof(text),
                ", %lld over tolerance, %lld non-finite, %lld listed rows "
                "unwritten, %lld unlisted rows written, %llu findings",
                (long long)outcome.elementsOverTolerance,
                (long long)outcome.nonFinite,
                (long long)outcome.listedRowsUnwritten,
                (long long)outcome.unlistedRowsWritten,
                (unsigned long long)outcome.run.totalFindings());
  return text;
}

//===----------------------------------------------------------------------===//
// Generators
//===----------------------------------------------------------------------===//

namespace {

/// Tensor tags of the generated weights (one stream per tensor).
constexpr uint64_t kW13Tag = 0xB13, kW2Tag = 0xB2;
constexpr uint64_t kSharedW13Tag = 0x5B13, kSharedW2Tag = 0x5B2;
constexpr uint64_t kW13BiasTag = 0xB1A5, kW2BiasTag = 0xB2A5;
/// Streams of the per-block factors of tokens and of generated FP8 rows.
constexpr uint64_t kTokenBlockTag = 0x70B1, kRowsTag = 0x57A2,
                   kRowsBlockTag = 0x57A3;

/// A power of two in [2^-2, 2^2] per 1x32 block: quantised per block, the
/// values then get E8M0 scales that differ from block to block, which a
/// wrong scale-to-K assignment in a kernel cannot hide.
double blockFactor(const ref::CounterRandom &random, uint64_t block) {
  return std::ldexp(1.0, int(random.bits(block) % 5) - 2);
}

} // namespace

LayerWeights::LayerWeights(uint64_t seed, const StageShape &shape)
    : seed_(seed), shape_(shape) {
  const int64_t hidden = shape.hidden, inter = shape.intermediate;
  w13_ = std::make_unique<ref::GeneratedMxfp4Weights>(
      seed, kW13Tag, shape.routedExperts(), 2 * inter, hidden,
      ref::defaultScaleExponent(hidden));
  w2_ = std::make_unique<ref::GeneratedMxfp4Weights>(
      seed, kW2Tag, shape.routedExperts(), hidden, inter,
      ref::defaultScaleExponent(inter));
}

LayerWeights::~LayerWeights() = default;

void LayerWeights::sharedW13(std::vector<uint8_t> &codes,
                             std::vector<uint8_t> &scales) const {
  ref::generateFp8Expert(seed_, kSharedW13Tag, 2 * shape_.intermediate,
                         shape_.hidden, codes, scales);
}

void LayerWeights::sharedW2(std::vector<uint8_t> &codes,
                            std::vector<uint8_t> &scales) const {
  ref::generateFp8Expert(seed_, kSharedW2Tag, shape_.hidden,
                         shape_.intermediate, codes, scales);
}

void LayerWeights::rankSlice(const ref::WeightSource &source, int64_t rank,
                             const std::vector<uint8_t> &present,
                             ExpertWeights &out) const {
  const int64_t count = shape_.mxfp4Experts(),
                first = rank * shape_.localExperts;
  const int64_t rows = source.rows(), depth = source.depth();
  const size_t rowBytes = size_t(depth / 2), scaleBytes = size_t(depth / 32);
  out.packed.assign(size_t(count * rows) * rowBytes, 0);
  out.scales.assign(size_t(count * rows) * scaleBytes, 0);
  out.present = present;
  ref::WeightScratch scratch;
  for (int64_t e = 0; e < count; ++e) {
    if (!present.empty() && !present[size_t(e)])
      continue;
    ref::ExpertRows expert = source.expertRows(first + e, 0, rows, scratch);
    std::memcpy(&out.packed[size_t(e * rows) * rowBytes], expert.elements,
                size_t(rows) * rowBytes);
    std::memcpy(&out.scales[size_t(e * rows) * scaleBytes], expert.scales,
                size_t(rows) * scaleBytes);
  }
}

void LayerWeights::rankW13(int64_t rank, const std::vector<uint8_t> &present,
                           ExpertWeights &out) const {
  rankSlice(*w13_, rank, present, out);
  if (shape_.sharedFp8)
    sharedW13(out.sharedCodes, out.sharedScales);
}

void LayerWeights::rankW2(int64_t rank, const std::vector<uint8_t> &present,
                          ExpertWeights &out) const {
  rankSlice(*w2_, rank, present, out);
  if (shape_.sharedFp8)
    sharedW2(out.sharedCodes, out.sharedScales);
}

std::vector<float> generateExpertBias(uint64_t seed, const StageShape &shape,
                                      int64_t rank, bool w13) {
  const int64_t columns = w13 ? 2 * shape.intermediate : shape.hidden;
  const ref::CounterRandom random(seed, w13 ? kW13BiasTag : kW2BiasTag);
  std::vector<float> bias(size_t(shape.localExperts * columns));
  const uint64_t first = uint64_t(rank * shape.localExperts * columns);
  for (size_t i = 0; i < bias.size(); ++i)
    bias[i] = static_cast<float>(random.normal(first + i));
  return bias;
}

ref::TokenBatch generateTokens(uint64_t seed, uint64_t stream, int64_t tokens,
                               const StageShape &shape,
                               const ref::RoutingOptions &routing) {
  ref::TokenBatch batch =
      ref::generateBatch(seed, stream, tokens,
                         ref::MoeShape{shape.hidden, shape.intermediate,
                                       shape.experts, shape.topK},
                         routing);
  const ref::CounterRandom factors(seed, kTokenBlockTag + 16 * stream);
  // A power of two keeps every BF16 value exact (no value nears the range).
  for (size_t i = 0; i < batch.hiddenBf16.size(); ++i)
    batch.hiddenBf16[i] = ref::encodeBf16(ref::decodeBf16(batch.hiddenBf16[i]) *
                                          blockFactor(factors, i / 32));
  return batch;
}

void quantizeTokens(const ref::TokenBatch &batch, int64_t hidden,
                    Fp8Rows &tokens, ref::ActivationFormat format) {
  tokens = Fp8Rows();
  tokens.format = format;
  const int64_t rowBytes = ref::activationRowBytes(format, hidden);
  tokens.codes.assign(size_t(batch.tokens * rowBytes), 0);
  tokens.scales.assign(size_t(batch.tokens * hidden / 32), 0);
  std::vector<double> row(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < batch.tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h)
      row[size_t(h)] =
          ref::decodeBf16(batch.hiddenBf16[size_t(t * hidden + h)]);
    ref::quantizeActivationRow(format, row.data(), hidden,
                               &tokens.codes[size_t(t * rowBytes)],
                               &tokens.scales[size_t(t * hidden / 32)]);
  }
}

void generateFp8Rows(uint64_t seed, int64_t rows, int64_t depth, Fp8Rows &out,
                     ref::ActivationFormat format) {
  out = Fp8Rows();
  out.format = format;
  const ref::CounterRandom random(seed, kRowsTag), factors(seed, kRowsBlockTag);
  const int64_t rowBytes = ref::activationRowBytes(format, depth);
  out.codes.assign(size_t(rows * rowBytes), 0);
  out.scales.assign(size_t(rows * depth / 32), 0);
  std::vector<double> row(static_cast<size_t>(depth));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < depth; ++k) {
      const uint64_t index = uint64_t(r * depth + k);
      row[size_t(k)] = random.normal(index) * blockFactor(factors, index / 32);
    }
    ref::quantizeActivationRow(format, row.data(), depth,
                               &out.codes[size_t(r * rowBytes)],
                               &out.scales[size_t(r * depth / 32)]);
  }
}

ref::Status checkNotAllZero(const std::vector<uint8_t> &bytes,
                            const char *what) {
  if (!bytes.empty() &&
      std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; }))
    return ref::Status::error(std::string("generated ") + what +
                              " are all zero");
  return {};
}

ref::Status ensureBatch(const StageShape &shape, const DataOptions &options,
                        LayerData &data, int64_t rank) {
  if (data.hasBatch)
    return {};
  ref::RoutingOptions routing;
  routing.invalidFraction = options.invalidFraction;
  if (options.hotRank) {
    routing.ep = shape.ep;
    routing.hotRank = rank;
  }
  data.sharedLastRoute = data.sharedLastRoute || shape.sharedLastRoute;
  if (data.sharedLastRoute) {
    // FHMoE: routed experts and slots, then the shared slot (id E - 1,
    // weight 1) appended to every token, as the runtime's layer does.
    StageShape routed = shape;
    routed.experts = shape.experts - 1;
    routed.topK = shape.topK - 1;
    ref::TokenBatch batch = generateTokens(options.seed, /*stream=*/0,
                                           options.tokens, routed, routing);
    const int64_t K = shape.topK;
    std::vector<int32_t> ids(size_t(batch.tokens * K));
    std::vector<float> weights(size_t(batch.tokens * K));
    for (int64_t t = 0; t < batch.tokens; ++t) {
      for (int64_t k = 0; k + 1 < K; ++k) {
        ids[size_t(t * K + k)] = batch.topkIds[size_t(t * (K - 1) + k)];
        weights[size_t(t * K + k)] = batch.topkWeights[size_t(t * (K - 1) + k)];
      }
      ids[size_t(t * K + K - 1)] = static_cast<int32_t>(shape.experts - 1);
      weights[size_t(t * K + K - 1)] = 1.0f;
    }
    batch.topkIds = std::move(ids);
    batch.topkWeights = std::move(weights);
    data.batch = std::move(batch);
  } else {
    data.batch = generateTokens(options.seed, /*stream=*/0, options.tokens,
                                shape, routing);
  }
  data.topK = shape.topK;
  quantizeTokens(data.batch, shape.hidden, data.tokens, shape.tokenFormat);
  data.hasBatch = true;
  return checkNotAllZero(data.tokens.codes, "token codes");
}

ref::Status ensureRoutes(const StageShape &shape, const DataOptions &options,
                         LayerData &data, int64_t rank) {
  RankData &mine = data.rank(rank);
  if (mine.hasSorted)
    return {};
  // Routes to other ranks' experts are invalid here.
  const int64_t first = rank * shape.localExperts;
  std::vector<int32_t> localIds =
      sharedRuleIds(data.batch.topkIds, data.topK, shape.experts,
                    shape.sharedLastRoute || data.sharedLastRoute);
  for (int32_t &id : localIds)
    id = (id >= first && id < first + shape.localExperts)
             ? static_cast<int32_t>(id - first)
             : -1;
  if (ref::Status status =
          ref::buildSortedRoutes(localIds.data(), data.batch.tokens, data.topK,
                                 shape.localExperts, shape.tileM, mine.sorted);
      !status)
    return status;
  for (int64_t t = 0; t < options.emptyTiles; ++t) {
    mine.sorted.tileExperts.push_back(
        t % 2 == 0 ? -1 : static_cast<int32_t>(shape.localExperts));
    mine.sorted.routeIds.insert(mine.sorted.routeIds.end(), shape.tileM,
                                static_cast<int32_t>(data.numRoutes()));
  }
  mine.hasSorted = true;
  return {};
}

ref::Status ensureWeights(const StageShape &shape, const DataOptions &options,
                          RankData &rank, bool w13) {
  ExpertWeights &weights = w13 ? rank.w13 : rank.w2;
  if (shape.bias && weights.bias.empty()) {
    weights.bias = generateExpertBias(options.seed, shape, rank.rank, w13);
    if (std::all_of(weights.bias.begin(), weights.bias.end(),
                    [](float v) { return v == 0.0f; }))
      return ref::Status::error("generated biases are all zero");
  }
  if (!weights.packed.empty())
    return {};
  // Only the experts some tile selects: the others stay poisoned, so a
  // kernel that reads them is a finding (and real shapes stay affordable).
  std::vector<uint8_t> present(size_t(shape.mxfp4Experts()), 0);
  for (int32_t e : rank.sorted.tileExperts)
    if (e >= 0 && e < shape.mxfp4Experts())
      present[size_t(e)] = 1;
  const LayerWeights layer(options.seed, shape);
  if (w13)
    layer.rankW13(rank.rank, present, weights);
  else
    layer.rankW2(rank.rank, present, weights);
  const int64_t perExpert = w13 ? 2 * shape.intermediate * shape.hidden / 2
                                : shape.hidden * shape.intermediate / 2;
  for (int64_t e : options.zeroExperts) {
    if (e < 0 || e >= shape.localExperts)
      return ref::Status::error("zero expert " + std::to_string(e) +
                                " is not a local expert");
    if (e >= shape.mxfp4Experts())
      std::fill(weights.sharedCodes.begin(), weights.sharedCodes.end(),
                uint8_t(0));
    else
      std::fill_n(weights.packed.begin() + e * perExpert, perExpert,
                  uint8_t(0));
  }
  return {};
}

//===----------------------------------------------------------------------===//
// Routes and weights for the oracle
//===----------------------------------------------------------------------===//

ref::Status oracleRoutes(const ref::SortedRoutes &sorted, int64_t tileM,
                         int64_t localExperts, ref::SortedRoutes &view) {
  view = sorted;
  view.routeIds.clear();
  view.tileExperts.clear();
  for (int64_t t = 0; t < sorted.numTiles(); ++t) {
    const int32_t expert = sorted.tileExperts[size_t(t)];
    const auto first = sorted.routeIds.begin() + t * tileM;
    if (!ref::isValidExpert(expert, localExperts)) {
      for (auto it = first; it != first + tileM; ++it)
        if (!sorted.isPadding(*it))
          return ref::Status::error("tile " + std::to_string(t) +
                                    " has no valid expert but lists route " +
                                    std::to_string(*it));
      continue;
    }
    view.tileExperts.push_back(expert);
    view.routeIds.insert(view.routeIds.end(), first, first + tileM);
  }
  return {};
}

std::vector<int32_t> expertOfRoutes(const ref::SortedRoutes &view,
                                    int64_t numRoutes) {
  std::vector<int32_t> expertOf(size_t(numRoutes), -1);
  for (int64_t t = 0; t < view.numTiles(); ++t)
    for (int64_t i = 0; i < view.mTile; ++i) {
      const int32_t route = view.routeIds[size_t(t * view.mTile + i)];
      if (!view.isPadding(route))
        expertOf[size_t(route)] = view.tileExperts[size_t(t)];
    }
  return expertOf;
}

OracleWeights::OracleWeights(const ExpertWeights &weights, int64_t mxfp4Experts,
                             int64_t rows, int64_t depth, bool shared)
    : routed(ref::WeightFormat::Mxfp4, weights.packed.data(),
             weights.scales.data(), mxfp4Experts, rows, depth),
      sharedExpert(ref::WeightFormat::Fp8E4M3, weights.sharedCodes.data(),
                   weights.sharedScales.data(), 1, rows, depth),
      appended(routed, sharedExpert), hasShared(shared) {}

void dequantizeExpert(const ref::WeightSource &source, int64_t expert,
                      std::vector<double> &out) {
  const int64_t rows = source.rows(), depth = source.depth();
  out.assign(size_t(rows * depth), 0.0);
  ref::WeightScratch scratch;
  ref::ExpertRows rowsOf = source.expertRows(expert, 0, rows, scratch);
  const int64_t rowBytes = ref::weightRowBytes(rowsOf.format, depth);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *elements = rowsOf.elements + r * rowBytes;
    const uint8_t *scales = rowsOf.scales + r * (depth / 32);
    if (rowsOf.format == ref::WeightFormat::Fp8E4M3)
      ref::dequantizeFp8Row(elements, scales, depth, &out[size_t(r * depth)]);
    else
      ref::dequantizeMxfp4Row(elements, scales, depth, &out[size_t(r * depth)]);
  }
}

//===----------------------------------------------------------------------===//
// Kernel memory
//===----------------------------------------------------------------------===//

unsigned KernelMemory::input(const std::string &name, const void *bytes,
                             size_t size, const std::vector<uint8_t> &written) {
  const unsigned id = memory.addBuffer(name, std::max<size_t>(size, 1));
  if (size)
    memory.write(id, 0, bytes, size);
  // Bytes nobody produced stay poisoned: a kernel must not read them.
  if (!written.empty())
    for (size_t i = 0; i < size; ++i)
      memory.written(id)[i] = written[i] ? 1 : 0;
  args[name] = KernelArgValue::makeBuffer(id);
  return id;
}

unsigned KernelMemory::weights(const std::string &name,
                               const std::string &scaleName,
                               const ExpertWeights &weights) {
  const unsigned b = memory.addBuffer(name, weights.packed.size());
  const unsigned bScale = memory.addBuffer(scaleName, weights.scales.size());
  const size_t experts = weights.present.empty() ? 1 : weights.present.size();
  const size_t packedPerExpert = weights.packed.size() / experts;
  const size_t scalesPerExpert = weights.scales.size() / experts;
  for (size_t e = 0; e < experts; ++e)
    if (weights.present.empty() || weights.present[e]) {
      memory.write(b, e * packedPerExpert,
                   weights.packed.data() + e * packedPerExpert,
                   packedPerExpert);
      memory.write(bScale, e * scalesPerExpert,
                   weights.scales.data() + e * scalesPerExpert,
                   scalesPerExpert);
    }
  args[name] = KernelArgValue::makeBuffer(b);
  args[scaleName] = KernelArgValue::makeBuffer(bScale);
  if (!weights.sharedCodes.empty()) {
    input(name + "_shared", weights.sharedCodes);
    input(name + "_shared_scale", weights.sharedScales);
  }
  return b;
}

unsigned KernelMemory::output(const std::string &name, size_t size) {
  const unsigned id = memory.addBuffer(name, size);
  memory.poison(id);
  args[name] = KernelArgValue::makeBuffer(id);
  outputs.push_back(name);
  return id;
}

void KernelMemory::scalar(const std::string &name, int64_t value) {
  args[name] = KernelArgValue::makeScalar(value);
}

void KernelMemory::routes(const ref::SortedRoutes &sorted) {
  input("sorted_routes", sorted.routeIds);
  input("tile_experts", sorted.tileExperts);
  scalar("num_sorted", int64_t(sorted.routeIds.size()));
}

LogicalResult
KernelMemory::runTiles(const BuiltKernel &kernel, const StageShape &shape,
                       const ref::SortedRoutes &sorted, int64_t gridX,
                       int64_t gridZ, const LaunchConfig &launchIn,
                       StageOutcome &outcome, std::string &error) {
  outcome = StageOutcome();
  if (sorted.numTiles() > 0) {
    LaunchConfig launch = launchIn;
    launch.grid = {gridX,
                   shape.persistCu > 0
                       ? shape.persistCu
                       : sorted.numTiles() * shape.tilesPerSortBlock,
                   gridZ};
    if (failed(run(kernel, launch, outcome, error)))
      return failure();
  }
  snapshot(outcome);
  return success();
}

LogicalResult KernelMemory::run(const BuiltKernel &kernel,
                                const LaunchConfig &launch,
                                StageOutcome &outcome, std::string &error) {
  std::vector<KernelArgValue> values;
  for (const KernelArg &arg : kernel.description.abi.args) {
    auto it = args.find(arg.name);
    if (it == args.end()) {
      error = "the emulator harness does not provide kernel argument '" +
              arg.name + "' of " + kernel.description.symbol;
      return failure();
    }
    values.push_back(it->second);
  }
  FailureOr<RunResult> run = runKernel(cast<gpu::GPUFuncOp>(kernel.func),
                                       memory, values, launch, error);
  if (failed(run))
    return failure();
  outcome.run = std::move(*run);
  outcome.launched = true;
  return success();
}

void KernelMemory::snapshot(StageOutcome &outcome) const {
  for (const std::string &name : outputs) {
    const unsigned id = args.at(name).buffer;
    BufferSnapshot &snap = outcome.outputs[name];
    snap.bytes.assign(memory.data(id), memory.data(id) + memory.size(id));
    snap.written.assign(memory.written(id),
                        memory.written(id) + memory.size(id));
  }
}

std::string missingArgument(const StageDescription &description,
                            const std::vector<std::string> &provided) {
  for (const KernelArg &arg : description.abi.args)
    if (std::find(provided.begin(), provided.end(), arg.name) == provided.end())
      return arg.name;
  return "";
}

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

ref::Status saveArrays(const std::string &dir, const std::string &prefix,
                       const NamedArrays &arrays) {
  for (const auto &[name, array] : arrays)
    if (ref::Status status =
            ref::writeNpy(dir + "/" + prefix + name + ".npy", array);
        !status)
      return status;
  return {};
}

//===----------------------------------------------------------------------===//
// The harness
//===----------------------------------------------------------------------===//

StageHarness::~StageHarness() = default;

LogicalResult StageHarness::check(LayerData &data, int64_t rank,
                                  const DataOptions &options,
                                  const LaunchConfig &launch,
                                  StageOutcome &outcome,
                                  std::string &error) const {
  if (ref::Status status = generate(options, data, rank); !status) {
    error = status.message();
    return failure();
  }
  if (failed(run(data, rank, launch, outcome, error)))
    return failure();
  compare(data, rank, options, outcome);
  return success();
}

std::unique_ptr<StageHarness> StageHarness::create(const BuiltKernel &kernel,
                                                   std::string &error) {
  StageShape shape;
  if (ref::Status status = parseStageShape(kernel, shape); !status) {
    error = kernel.description.symbol + ": " + status.message();
    return nullptr;
  }
  std::unique_ptr<StageHarness> harness;
  switch (shape.stage) {
  case abi::Stage::Quant:
    harness = makeQuantHarness(kernel, shape);
    break;
  case abi::Stage::Sort:
    harness = makeSortHarness(kernel, shape);
    break;
  case abi::Stage::W13:
    harness = makeW13Harness(kernel, shape);
    break;
  case abi::Stage::W2:
    harness = makeW2Harness(kernel, shape);
    break;
  case abi::Stage::Combine:
    harness = makeCombineHarness(kernel, shape);
    break;
  }
  if (!harness) {
    error = std::string("stage ") + abi::stageName(shape.stage) + " (" +
            kernel.description.symbol +
            "): the emulator has no harness for it";
    return nullptr;
  }
  const std::string missing =
      missingArgument(kernel.description, harness->arguments());
  if (!missing.empty()) {
    error = "the emulator harness does not provide kernel argument '" +
            missing + "' yet";
    return nullptr;
  }
  return harness;
}

} // namespace moec::emu
