//===- W13Harness.cpp - the W13 stage on the emulator vs the oracle -------===//

#include "moec/Emulator/W13Harness.h"
#include "moec/Dialect/Moe/MoeDialect.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Stages.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

using namespace mlir;

namespace moec::emu {

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

ref::Status parseW13Shape(const StageDescription &description, W13Shape &shape) {
  W2Shape base;
  ref::Status status = parseW2Shape(description, base);
  if (!status)
    return status;
  shape.hidden = base.hidden;
  shape.intermediate = base.intermediate;
  shape.experts = base.experts;
  shape.topK = base.topK;
  shape.ep = base.ep;
  shape.localExperts = base.localExperts;
  shape.tileM = base.tileM;
  shape.tileN = base.tileN;
  shape.mfmaK = base.mfmaK;
  shape.sharedFp8 = base.sharedFp8;
  shape.persistCu = base.persistCu;
  DictionaryAttr attrs = description.opAttributes;
  if (auto interleave = attrs.getAs<IntegerAttr>("gate_up_interleave"))
    shape.interleave = interleave.getInt();
  if (auto limit = attrs.getAs<FloatAttr>("swiglu_limit"))
    shape.swigluLimit = limit.getValueAsDouble();
  return {};
}

ref::Status generateW13Data(const W13Shape &shape, const W2DataOptions &options,
                            W13Data &data) {
  const int64_t hidden = shape.hidden, inter = shape.intermediate;
  ref::MoeShape moeShape{hidden, inter, shape.experts, shape.topK};
  ref::RoutingOptions routing;
  routing.invalidFraction = options.invalidFraction;
  if (options.hotRank) {
    routing.ep = shape.ep;
    routing.hotRank = 0;
  }
  ref::TokenBatch batch = ref::generateBatch(options.seed, /*stream=*/0,
                                             options.tokens, moeShape, routing);
  data.tokens = options.tokens;
  data.numRoutes = options.tokens * shape.topK;
  data.topkIds = batch.topkIds;
  ref::Status status =
      ref::buildSortedRoutes(data.topkIds.data(), options.tokens, shape.topK,
                             shape.localExperts, shape.tileM, data.sorted);
  if (!status)
    return status;
  for (int64_t t = 0; t < options.emptyTiles; ++t) {
    data.sorted.tileExperts.push_back(
        t % 2 == 0 ? -1 : static_cast<int32_t>(shape.localExperts));
    data.sorted.routeIds.insert(data.sorted.routeIds.end(), shape.tileM,
                                static_cast<int32_t>(data.numRoutes));
  }
  // Tokens: the generated BF16 rows quantised per 1x32 (activation recipe),
  // as the dispatch stage hands them to W13.
  data.aCodes.assign(size_t(options.tokens * hidden), 0);
  data.aScales.assign(size_t(options.tokens * hidden / 32), 0);
  std::vector<double> row(static_cast<size_t>(hidden));
  for (int64_t t = 0; t < options.tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h)
      row[size_t(h)] = ref::decodeBf16(batch.hiddenBf16[size_t(t * hidden + h)]);
    ref::quantizeFp8Row(row.data(), hidden, &data.aCodes[size_t(t * hidden)],
                        &data.aScales[size_t(t * hidden / 32)]);
  }
  const int64_t mxfp4Experts = shape.localExperts - (shape.sharedFp8 ? 1 : 0);
  ref::GeneratedMxfp4Weights weights(options.seed, /*tensorTag=*/0xB13,
                                     mxfp4Experts, 2 * inter, hidden,
                                     ref::defaultScaleExponent(hidden));
  ref::materializeWeights(weights, data.bPacked, data.bScales);
  if (shape.sharedFp8)
    ref::generateFp8Expert(options.seed, /*tensorTag=*/0x5B13, 2 * inter,
                           hidden, data.sharedCodes, data.sharedScales);
  for (int64_t e : options.zeroExperts) {
    if (e < 0 || e >= shape.localExperts)
      return ref::Status::error("zero expert " + std::to_string(e) +
                                " is not a local expert");
    if (e >= mxfp4Experts)
      std::fill(data.sharedCodes.begin(), data.sharedCodes.end(), uint8_t(0));
    else
      std::fill_n(data.bPacked.begin() + e * 2 * inter * hidden / 2,
                  2 * inter * hidden / 2, uint8_t(0));
  }
  return {};
}

LogicalResult runW13(Operation *funcOp, const W13Shape &shape,
                     const W13Data &data, const LaunchConfig &launchIn,
                     W13Outcome &outcome, std::string &error) {
  auto func = cast<gpu::GPUFuncOp>(funcOp);
  const int64_t inter = shape.intermediate;
  const int64_t numSorted = static_cast<int64_t>(data.sorted.routeIds.size());
  const int64_t numTiles = data.sorted.numTiles();
  GlobalMemory memory;
  auto input = [&](const char *name, const void *bytes, size_t size) {
    unsigned id = memory.addBuffer(name, size);
    memory.write(id, 0, bytes, size);
    return id;
  };
  const unsigned a = input("a", data.aCodes.data(), data.aCodes.size());
  const unsigned aScale = input("a_scale", data.aScales.data(), data.aScales.size());
  auto [b, bScale] = addExpertWeights(memory, data.bPacked, data.bScales,
                                      data.bExpertsPresent);
  const unsigned sorted = input("sorted_routes", data.sorted.routeIds.data(),
                                data.sorted.routeIds.size() * 4);
  const unsigned tiles = input("tile_experts", data.sorted.tileExperts.data(),
                               data.sorted.tileExperts.size() * 4);
  const size_t codeBytes = size_t(data.numRoutes * inter);
  const unsigned out = memory.addBuffer("out", codeBytes);
  const unsigned outScale = memory.addBuffer("out_scale", codeBytes / 32);
  memory.poison(out);
  memory.poison(outScale);

  outcome = W13Outcome();
  if (numTiles > 0) {
    LaunchConfig launch = launchIn;
    launch.grid = {inter / shape.tileN,
                   shape.persistCu > 0 ? shape.persistCu : numTiles, 1};
    std::vector<KernelArgValue> args = {
        KernelArgValue::makeBuffer(a),      KernelArgValue::makeBuffer(aScale),
        KernelArgValue::makeBuffer(b),      KernelArgValue::makeBuffer(bScale),
        KernelArgValue::makeBuffer(sorted), KernelArgValue::makeBuffer(tiles),
        KernelArgValue::makeBuffer(out),    KernelArgValue::makeBuffer(outScale),
        KernelArgValue::makeScalar(data.tokens),
        KernelArgValue::makeScalar(numSorted)};
    if (shape.sharedFp8) {
      args.push_back(KernelArgValue::makeBuffer(
          input("b_shared", data.sharedCodes.data(), data.sharedCodes.size())));
      args.push_back(KernelArgValue::makeBuffer(input(
          "b_shared_scale", data.sharedScales.data(), data.sharedScales.size())));
    }
    FailureOr<RunResult> run = runKernel(func, memory, args, launch, error);
    if (failed(run))
      return failure();
    outcome.run = std::move(*run);
    outcome.launched = true;
  }
  outcome.outCodes.assign(memory.data(out), memory.data(out) + codeBytes);
  outcome.codesWritten.assign(memory.written(out), memory.written(out) + codeBytes);
  outcome.outScales.assign(memory.data(outScale),
                           memory.data(outScale) + codeBytes / 32);
  outcome.scalesWritten.assign(memory.written(outScale),
                               memory.written(outScale) + codeBytes / 32);
  return success();
}

double ulpFp8(double x, double scale) {
  const double v = std::fabs(x) / scale;
  const int exponent = v > 0 ? std::max(std::ilogb(v), -6) : -6;
  return std::ldexp(scale, exponent - 3);
}

void compareW13(const W13Shape &shape, const W13Data &data,
                const W2DataOptions &options, W13Outcome &outcome) {
  const int64_t inter = shape.intermediate;
  ref::SortedRoutes view;
  ref::Status status =
      oracleRoutes(data.sorted, shape.tileM, shape.localExperts, view);
  const size_t elements = size_t(data.numRoutes * inter);
  outcome.activation.assign(elements, std::numeric_limits<double>::quiet_NaN());
  outcome.oracleCodes.assign(elements, 0);
  outcome.oracleScales.assign(elements / 32, 0);
  if (status) {
    ref::GluConfig glu;
    glu.interleave = shape.interleave;
    glu.clampLimit = shape.swigluLimit;
    ref::W13Outputs outputs;
    outputs.activation = outcome.activation.data();
    outputs.intermediateCodes = outcome.oracleCodes.data();
    outputs.intermediateScales = outcome.oracleScales.data();
    if (shape.sharedFp8) {
      ref::DenseWeights routed(ref::WeightFormat::Mxfp4, data.bPacked.data(),
                               data.bScales.data(), shape.localExperts - 1,
                               2 * inter, shape.hidden);
      ref::DenseWeights shared(ref::WeightFormat::Fp8E4M3,
                               data.sharedCodes.data(), data.sharedScales.data(),
                               1, 2 * inter, shape.hidden);
      ref::AppendedExpertWeights all(routed, shared);
      status = ref::runW13Stage(
          ref::ActivationRows::fp8(data.aCodes.data(), data.aScales.data(),
                                   data.tokens, shape.hidden),
          shape.topK, all, view, glu, outputs);
    } else {
      status = ref::runW13Stage(data.aCodes.data(), data.aScales.data(),
                                data.tokens, shape.topK, data.bPacked.data(),
                                data.bScales.data(), shape.localExperts,
                                shape.hidden, inter, view, glu, outputs);
    }
  }
  if (!status) {
    outcome.pass = false;
    outcome.summary = "oracle failed: " + status.message();
    return;
  }
  std::vector<int32_t> expertOf(size_t(data.numRoutes), -1);
  for (int64_t t = 0; t < view.numTiles(); ++t)
    for (int64_t i = 0; i < shape.tileM; ++i) {
      const int32_t route = view.routeIds[size_t(t * shape.tileM + i)];
      if (!view.isPadding(route))
        expertOf[size_t(route)] = view.tileExperts[size_t(t)];
    }
  const std::set<int64_t> zeroExperts(options.zeroExperts.begin(),
                                      options.zeroExperts.end());
  double errSq = 0.0, refSq = 0.0;
  for (int64_t r = 0; r < data.numRoutes; ++r) {
    const size_t base = size_t(r * inter);
    const int32_t expert = expertOf[size_t(r)];
    if (expert < 0) {
      bool written = false;
      for (int64_t i = 0; i < inter; ++i)
        written |= outcome.codesWritten[base + size_t(i)] != 0;
      for (int64_t blk = 0; blk < inter / 32; ++blk)
        written |= outcome.scalesWritten[base / 32 + size_t(blk)] != 0;
      outcome.unlistedRowsWritten += written;
      continue;
    }
    bool unwritten = false, zeroMismatch = false;
    for (int64_t blk = 0; blk < inter / 32; ++blk) {
      const size_t s = base / 32 + size_t(blk);
      unwritten |= !outcome.scalesWritten[s];
      ++outcome.scalesChecked;
      outcome.scalesEqual += outcome.outScales[s] == outcome.oracleScales[s];
      const double scale = ref::decodeE8M0(outcome.outScales[s]);
      for (int64_t i = 0; i < 32; ++i) {
        const size_t e = base + size_t(blk * 32 + i);
        unwritten |= !outcome.codesWritten[e];
        const double got = ref::decodeFp8E4M3(outcome.outCodes[e]) * scale;
        const double want = outcome.activation[e];
        ++outcome.elementsChecked;
        if (!std::isfinite(got)) {
          ++outcome.nonFinite;
          continue;
        }
        if (zeroExperts.count(expert) && got != 0.0)
          zeroMismatch = true;
        outcome.codesEqual += outcome.outCodes[e] == outcome.oracleCodes[e];
        const double err = std::fabs(got - want);
        const double tol = ulpFp8(want, scale);
        outcome.worstErrorOverTolerance =
            std::max(outcome.worstErrorOverTolerance, err / tol);
        if (err > tol)
          ++outcome.elementsOverTolerance;
        errSq += err * err;
        refSq += want * want;
      }
    }
    outcome.listedRowsUnwritten += unwritten;
    outcome.zeroExpertNonZero += zeroMismatch;
  }
  outcome.relL2 = refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
  outcome.pass = outcome.run.totalFindings() == 0 &&
                 outcome.elementsOverTolerance == 0 && outcome.nonFinite == 0 &&
                 outcome.listedRowsUnwritten == 0 &&
                 outcome.unlistedRowsWritten == 0 &&
                 outcome.zeroExpertNonZero == 0 &&
                 outcome.relL2 <= kW13RelL2Bound;
  char text[512];
  std::snprintf(text, sizeof(text),
                "rel L2 %.3e (vs activation before FP8), worst err/tol %.3f, "
                "%lld/%lld codes and %lld/%lld scales equal to the oracle's, "
                "%lld over tolerance, %lld non-finite, %lld listed rows "
                "unwritten, %lld unlisted rows written, %llu findings",
                outcome.relL2, outcome.worstErrorOverTolerance,
                (long long)outcome.codesEqual, (long long)outcome.elementsChecked,
                (long long)outcome.scalesEqual, (long long)outcome.scalesChecked,
                (long long)outcome.elementsOverTolerance,
                (long long)outcome.nonFinite,
                (long long)outcome.listedRowsUnwritten,
                (long long)outcome.unlistedRowsWritten,
                (unsigned long long)outcome.run.totalFindings());
  outcome.summary = text;
}

ref::Status saveW13Arrays(const std::string &dir, const std::string &prefix,
                          const W13Shape &shape, const W13Data &data,
                          const W13Outcome &outcome) {
  using ref::NpyArray;
  using ref::NpyDtype;
  const int64_t routes = data.numRoutes, hidden = shape.hidden,
                inter = shape.intermediate,
                experts = int64_t(data.bPacked.size()) / (2 * inter * hidden / 2);
  std::vector<std::pair<std::string, NpyArray>> arrays = {
      {"a_codes", NpyArray::fromVector(NpyDtype::UInt8, {data.tokens, hidden}, data.aCodes)},
      {"a_scales", NpyArray::fromVector(NpyDtype::UInt8, {data.tokens, hidden / 32}, data.aScales)},
      {"b_packed", NpyArray::fromVector(NpyDtype::UInt8, {experts, 2 * inter, hidden / 2}, data.bPacked)},
      {"b_scales", NpyArray::fromVector(NpyDtype::UInt8, {experts, 2 * inter, hidden / 32}, data.bScales)},
      {"topk_ids", NpyArray::fromVector(NpyDtype::Int32, {data.tokens, shape.topK}, data.topkIds)},
      {"sorted_route_ids", NpyArray::fromVector(NpyDtype::Int32, {int64_t(data.sorted.routeIds.size())}, data.sorted.routeIds)},
      {"tile_experts", NpyArray::fromVector(NpyDtype::Int32, {data.sorted.numTiles()}, data.sorted.tileExperts)},
      {"out_codes", NpyArray::fromVector(NpyDtype::UInt8, {routes, inter}, outcome.outCodes)},
      {"out_scales", NpyArray::fromVector(NpyDtype::UInt8, {routes, inter / 32}, outcome.outScales)},
      {"oracle_activation", NpyArray::fromVector(NpyDtype::Float64, {routes, inter}, outcome.activation)},
  };
  if (shape.sharedFp8) {
    arrays.push_back({"b_shared", NpyArray::fromVector(NpyDtype::UInt8, {2 * inter, hidden}, data.sharedCodes)});
    arrays.push_back({"b_shared_scale", NpyArray::fromVector(NpyDtype::UInt8, {2 * inter, hidden / 32}, data.sharedScales)});
  }
  for (const auto &[name, array] : arrays) {
    ref::Status status = ref::writeNpy(dir + "/" + prefix + name + ".npy", array);
    if (!status)
      return status;
  }
  return {};
}

} // namespace moec::emu
