//===- W2Harness.cpp - the W2 stage on the emulator vs the oracle ---------===//

#include "moec/Emulator/W2Harness.h"
#include "moec/Emulator/W13Harness.h"

#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Stages.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

using namespace mlir;

namespace moec::emu {

void prepareContext(MLIRContext &context) {
  DialectRegistry registry;
  registerMoecDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

LogicalResult buildKernelIR(MLIRContext &context, const StageSpec &spec,
                            BuiltKernel &kernel, std::string &error) {
  OpBuilder builder(&context);
  kernel.module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(kernel.module->getBody());
  if (!buildStageOp(builder, spec, kernel.description, error))
    return failure();
  // Lowering reports through diagnostics; keep the first as the error.
  std::string diagnostic;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diagnostic.empty())
      diagnostic = diag.str();
    return success();
  });
  if (failed(lowerToKernelIR(*kernel.module))) {
    error = "lowering " + kernel.description.symbol + " to kernel IR failed: " +
            diagnostic;
    return failure();
  }
  kernel.func = nullptr;
  unsigned count = 0;
  kernel.module->walk([&](gpu::GPUFuncOp func) {
    kernel.func = func;
    ++count;
  });
  if (count != 1) {
    error = "expected one gpu.func after lowering " +
            kernel.description.symbol + ", found " + std::to_string(count);
    return failure();
  }
  return success();
}

std::pair<unsigned, unsigned>
addExpertWeights(GlobalMemory &memory, const std::vector<uint8_t> &packed,
                 const std::vector<uint8_t> &scales,
                 const std::vector<uint8_t> &present) {
  const unsigned b = memory.addBuffer("b", packed.size());
  const unsigned bScale = memory.addBuffer("b_scale", scales.size());
  const size_t experts = present.empty() ? 1 : present.size();
  const size_t packedPerExpert = packed.size() / experts;
  const size_t scalesPerExpert = scales.size() / experts;
  for (size_t e = 0; e < experts; ++e)
    if (present.empty() || present[e]) {
      memory.write(b, e * packedPerExpert, packed.data() + e * packedPerExpert,
                   packedPerExpert);
      memory.write(bScale, e * scalesPerExpert,
                   scales.data() + e * scalesPerExpert, scalesPerExpert);
    }
  return {b, bScale};
}

void shrinkPeerFields(StageSpec &spec) {
  // A fused stage has a peer transport, whose capacity is required; its
  // transport defaults to fixed_slot.
  if (!spec.fields.count("capacity"))
    return;
  auto transport = spec.fields.find("transport");
  const bool compact =
      transport != spec.fields.end() && transport->second == "compact";
  auto integer = [&](const char *name, int64_t fallback) {
    auto field = spec.fields.find(name);
    if (field == spec.fields.end())
      return fallback;
    char *end = nullptr;
    long long value = std::strtoll(field->second.c_str(), &end, 10);
    return (field->second.empty() || *end != '\0') ? fallback : int64_t(value);
  };
  const int64_t m = std::max<int64_t>(1, integer("m", 16));
  const int64_t ep = std::max<int64_t>(1, integer("ep", 1));
  spec.fields["max_tokens"] = "16";
  // Fixed slot: per expert, whole M tiles; compact: every route of every
  // rank could come here.
  spec.fields["capacity"] =
      compact
          ? std::to_string(ep * 16 * std::max<int64_t>(1, integer("top_k", 1)))
          : std::to_string((std::max<int64_t>(ep * 16, m) + m - 1) / m * m);
  spec.fields["workgroups"] =
      std::to_string(std::min<int64_t>(integer("workgroups", 6), 6));
  if (spec.stage == "w13")
    spec.fields["dispatch_cus"] =
        std::to_string(std::min<int64_t>(integer("dispatch_cus", 2), 2));
  // A separate dispatch kernel keeps every workgroup a producer: 2 of them,
  // which the dispatch_cus = 2 of the W13 kernel behind it expects.
  auto dispatch = spec.fields.find("dispatch");
  if (dispatch != spec.fields.end() && dispatch->second == "only")
    spec.fields["workgroups"] = spec.fields["dispatch_cus"];
  if (spec.fields.count("plan_cus"))
    spec.fields["plan_cus"] =
        std::to_string(std::min<int64_t>(integer("plan_cus", 1), 2));
}

void smallConfigSpecs(std::vector<StageSpec> &specs) {
  auto integer = [](const StageSpec &spec, const char *name, int64_t fallback) {
    auto it = spec.fields.find(name);
    return it == spec.fields.end() ? fallback
                                   : int64_t(std::strtoll(it->second.c_str(),
                                                          nullptr, 10));
  };
  int64_t size = 0;
  for (const StageSpec &spec : specs)
    size = std::max(size, 2 * std::max(integer(spec, "n", 128),
                                       integer(spec, "k", 256)));
  for (StageSpec &spec : specs) {
    const int64_t ep = std::max<int64_t>(1, integer(spec, "ep", 1));
    spec.fields["hidden"] = std::to_string(size);
    spec.fields["intermediate"] = std::to_string(size);
    spec.fields["experts"] = std::to_string(4 * ep);
    spec.fields["top_k"] =
        std::to_string(std::min<int64_t>(integer(spec, "top_k", 2), 4));
    shrinkPeerFields(spec);
  }
}

StageSpec smallStageSpec(const StageSpec &spec) {
  StageSpec small = spec;
  auto integer = [&](const char *name, int64_t fallback) {
    auto it = spec.fields.find(name);
    if (it == spec.fields.end())
      return fallback;
    char *end = nullptr;
    long long value = std::strtoll(it->second.c_str(), &end, 10);
    return (it->second.empty() || *end != '\0') ? fallback : int64_t(value);
  };
  const int64_t n = integer("n", 128), k = integer("k", 256);
  const int64_t ep = std::max<int64_t>(1, integer("ep", 1));
  const int64_t size = 2 * std::max(n, k);
  const int64_t experts = 4 * ep;
  small.fields["hidden"] = std::to_string(size);
  small.fields["intermediate"] = std::to_string(size);
  small.fields["experts"] = std::to_string(experts);
  small.fields["top_k"] =
      std::to_string(std::min<int64_t>(std::min<int64_t>(integer("top_k", 2), 4), experts));
  shrinkPeerFields(small);
  return small;
}

ref::Status checkHarnessSupports(const StageDescription &description) {
  static const std::set<std::string> driven = {
      "a",           "a_scale",      "b",          "b_scale",
      "sorted_routes", "tile_experts", "out",      "out_scale",
      "num_routes",  "num_tokens",   "num_sorted", "topk_ids",
      "topk_weights", "rows",        "status",     "expert_offset",
      "capacity",    "b_shared",     "b_shared_scale"};
  for (const KernelArg &arg : description.abi.args)
    if (!driven.count(arg.name))
      return ref::Status::error("the emulator harness does not provide kernel "
                                "argument '" + arg.name + "' yet");
  return {};
}

ref::Status parseW2Shape(const StageDescription &description, W2Shape &shape) {
  DictionaryAttr attrs = description.opAttributes;
  auto problem = attrs ? attrs.getAs<moe::ProblemAttr>("problem") : nullptr;
  auto tile = attrs ? attrs.getAs<moe::TileAttr>("tile") : nullptr;
  if (!problem || !tile)
    return ref::Status::error(description.symbol + " is not a GEMM stage");
  shape.hidden = problem.getHidden();
  shape.intermediate = problem.getIntermediate();
  shape.experts = problem.getExperts();
  shape.topK = problem.getTopK();
  shape.ep = problem.getEp();
  shape.localExperts = problem.getLocalExperts();
  shape.tileM = tile.getM();
  shape.tileN = tile.getN();
  shape.persistCu = tile.getPersistCu();
  shape.mfmaK = tile.getMfmaK();
  if (auto splitK = attrs.getAs<IntegerAttr>("split_k"))
    shape.splitK = std::max<int64_t>(1, splitK.getInt());
  shape.sharedFp8 = static_cast<bool>(attrs.get("shared_fp8_expert"));
  return {};
}

ref::Status generateW2Data(const W2Shape &shape, const W2DataOptions &options,
                           W2Data &data) {
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
  // This is rank 0: global expert ids [0, localExperts) are its experts, so
  // ids of other ranks' experts fall out of range and are invalid here.
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

  // A: one row per route, N(0, 1) values quantised per 1x32 with the
  // activation recipe (the W13 kernel's output format).
  ref::CounterRandom random(options.seed, /*stream=*/0x57A2);
  data.aCodes.assign(size_t(data.numRoutes * inter), 0);
  data.aScales.assign(size_t(data.numRoutes * inter / 32), 0);
  std::vector<double> row(static_cast<size_t>(inter));
  for (int64_t r = 0; r < data.numRoutes; ++r) {
    for (int64_t k = 0; k < inter; ++k)
      row[size_t(k)] = random.normal(uint64_t(r * inter + k));
    ref::quantizeFp8Row(row.data(), inter, &data.aCodes[size_t(r * inter)],
                        &data.aScales[size_t(r * inter / 32)]);
  }
  // B: generated MXFP4 weights of the local experts (the routed ones when
  // the last is the shared FP8 expert).
  const int64_t mxfp4Experts = shape.localExperts - (shape.sharedFp8 ? 1 : 0);
  ref::GeneratedMxfp4Weights weights(options.seed, /*tensorTag=*/0xB2,
                                     mxfp4Experts, hidden, inter,
                                     ref::defaultScaleExponent(inter));
  ref::materializeWeights(weights, data.bPacked, data.bScales);
  if (shape.sharedFp8)
    ref::generateFp8Expert(options.seed, /*tensorTag=*/0x5B2, hidden, inter,
                           data.sharedCodes, data.sharedScales);
  for (int64_t e : options.zeroExperts) {
    if (e < 0 || e >= shape.localExperts)
      return ref::Status::error("zero expert " + std::to_string(e) +
                                " is not a local expert");
    if (e >= mxfp4Experts)
      std::fill(data.sharedCodes.begin(), data.sharedCodes.end(), uint8_t(0));
    else
      std::fill_n(data.bPacked.begin() + e * hidden * inter / 2,
                  hidden * inter / 2, uint8_t(0));
  }
  return {};
}

LogicalResult runW2(Operation *funcOp, const W2Shape &shape, const W2Data &data,
                    const LaunchConfig &launchIn, W2Outcome &outcome,
                    std::string &error) {
  auto func = cast<gpu::GPUFuncOp>(funcOp);
  const int64_t hidden = shape.hidden;
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
  // A produced by an emulated W13 keeps its shadow: rows W13 never wrote
  // stay poisoned, so a W2 read of them is a finding.
  if (!data.aWritten.empty())
    std::memcpy(memory.written(a), data.aWritten.data(), data.aCodes.size());
  if (!data.aScalesWritten.empty())
    std::memcpy(memory.written(aScale), data.aScalesWritten.data(),
                data.aScales.size());
  auto [b, bScale] = addExpertWeights(memory, data.bPacked, data.bScales,
                                      data.bExpertsPresent);
  const unsigned sorted = input("sorted_routes", data.sorted.routeIds.data(),
                                data.sorted.routeIds.size() * 4);
  const unsigned tiles = input("tile_experts", data.sorted.tileExperts.data(),
                               data.sorted.tileExperts.size() * 4);
  const int64_t splitK = shape.splitK;
  const size_t outBytes = splitK > 1 ? size_t(data.numRoutes * splitK * hidden) * 4
                                     : size_t(data.numRoutes * hidden) * 2;
  const unsigned out = memory.addBuffer("out", outBytes);
  memory.poison(out);

  outcome = W2Outcome();
  if (numTiles > 0) {
    LaunchConfig launch = launchIn;
    launch.grid = {hidden / shape.tileN,
                   shape.persistCu > 0 ? shape.persistCu : numTiles, splitK};
    std::vector<KernelArgValue> args = {
        KernelArgValue::makeBuffer(a),      KernelArgValue::makeBuffer(aScale),
        KernelArgValue::makeBuffer(b),      KernelArgValue::makeBuffer(bScale),
        KernelArgValue::makeBuffer(sorted), KernelArgValue::makeBuffer(tiles),
        KernelArgValue::makeBuffer(out),
        KernelArgValue::makeScalar(data.numRoutes),
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
  const size_t elements = size_t(data.numRoutes * hidden);
  const uint8_t *written = memory.written(out);
  outcome.outWritten.resize(elements);
  if (splitK > 1) {
    const size_t count = elements * size_t(splitK);
    outcome.partials.resize(count);
    outcome.partialsWritten.resize(count);
    std::memcpy(outcome.partials.data(), memory.data(out), count * 4);
    for (size_t i = 0; i < count; ++i)
      outcome.partialsWritten[i] = written[4 * i] && written[4 * i + 1] &&
                                   written[4 * i + 2] && written[4 * i + 3];
    for (int64_t r = 0; r < data.numRoutes; ++r)
      for (int64_t h = 0; h < hidden; ++h) {
        bool all = true;
        for (int64_t z = 0; z < splitK; ++z)
          all &= outcome.partialsWritten[size_t((r * splitK + z) * hidden + h)] != 0;
        // Listed rows need every partial; unlisted rows none (checked as
        // "any written" below through outWritten of any partial).
        bool any = false;
        for (int64_t z = 0; z < splitK; ++z)
          any |= outcome.partialsWritten[size_t((r * splitK + z) * hidden + h)] != 0;
        outcome.outWritten[size_t(r * hidden + h)] = all ? 1 : any ? 2 : 0;
      }
  } else {
    outcome.outBits.resize(elements);
    std::memcpy(outcome.outBits.data(), memory.data(out), elements * 2);
    for (size_t i = 0; i < elements; ++i)
      outcome.outWritten[i] = written[2 * i] && written[2 * i + 1];
  }
  return success();
}

namespace {

/// One unit in the last place of BF16 at magnitude |x| (8 significant bits);
/// the smallest subnormal step below the normal range.
double ulpBf16(double x) {
  x = std::fabs(x);
  if (!(x >= std::ldexp(1.0, -126)))
    return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::ilogb(x) - 7);
}

} // namespace

void compareW2(const W2Shape &shape, const W2Data &data,
               const W2DataOptions &options, W2Outcome &outcome) {
  const int64_t hidden = shape.hidden, inter = shape.intermediate;
  outcome.oracle.assign(size_t(data.numRoutes * hidden),
                        std::numeric_limits<float>::quiet_NaN());
  // Tiles a dispatcher left empty (expert -1 or past the local experts)
  // must hold only padding and are dropped from the oracle's view.
  ref::SortedRoutes view;
  if (ref::Status status =
          oracleRoutes(data.sorted, shape.tileM, shape.localExperts, view);
      !status) {
    outcome.pass = false;
    outcome.summary = status.message();
    return;
  }
  ref::Status status;
  if (shape.sharedFp8) {
    // Routed MXFP4 experts with the FP8 shared expert appended as the last.
    ref::DenseWeights routed(ref::WeightFormat::Mxfp4, data.bPacked.data(),
                             data.bScales.data(), shape.localExperts - 1,
                             hidden, inter);
    ref::DenseWeights shared(ref::WeightFormat::Fp8E4M3, data.sharedCodes.data(),
                             data.sharedScales.data(), 1, hidden, inter);
    ref::AppendedExpertWeights all(routed, shared);
    std::vector<double> exact(outcome.oracle.size(),
                              std::numeric_limits<double>::quiet_NaN());
    status = ref::runW2Stage(
        ref::ActivationRows::fp8(data.aCodes.data(), data.aScales.data(),
                                 data.numRoutes, inter),
        all, view, exact.data());
    for (size_t i = 0; i < exact.size(); ++i)
      outcome.oracle[i] = static_cast<float>(exact[i]);
  } else {
    status = ref::runW2Stage(data.aCodes.data(), data.aScales.data(),
                             data.bPacked.data(), data.bScales.data(),
                             shape.localExperts, hidden, inter, view,
                             outcome.oracle.data());
  }
  if (!status) {
    outcome.pass = false;
    outcome.summary = "oracle failed: " + status.message();
    return;
  }
  // Route -> expert of the listed (valid) routes.
  std::vector<int32_t> expertOf(size_t(data.numRoutes), -1);
  for (int64_t t = 0; t < data.sorted.numTiles(); ++t)
    for (int64_t i = 0; i < shape.tileM; ++i) {
      const int32_t route = data.sorted.routeIds[size_t(t * shape.tileM + i)];
      if (!data.sorted.isPadding(route))
        expertOf[size_t(route)] = data.sorted.tileExperts[size_t(t)];
    }
  const std::set<int64_t> zeroExperts(options.zeroExperts.begin(),
                                      options.zeroExperts.end());
  // Accumulation error bound: each of the I / mfmaK instructions rounds its
  // FP32 result once (relative 2^-24 of a partial sum bounded by
  // sum |a_k b_k|), and the oracle's FP32 rounding adds one more.
  const int64_t splitK = shape.splitK;
  const double accumulationFactor =
      double(inter / shape.mfmaK + 1) * std::ldexp(1.0, -24);
  std::vector<double> aRow(static_cast<size_t>(inter));
  double errSq = 0.0, refSq = 0.0;
  outcome.elementsChecked = outcome.elementsOverTolerance = 0;
  outcome.worstErrorOverTolerance = 0.0;
  // Unlisted routes: the kernel must leave their rows untouched.
  for (int64_t r = 0; r < data.numRoutes; ++r) {
    if (expertOf[size_t(r)] >= 0)
      continue;
    const size_t rowBase = size_t(r * hidden);
    for (int64_t h = 0; h < hidden; ++h)
      if (outcome.outWritten[rowBase + size_t(h)]) {
        ++outcome.unlistedRowsWritten;
        break;
      }
  }
  // Listed routes, grouped by expert so each expert's weights are
  // dequantised once (the tolerance needs sum_k |a_k b_k|).
  std::vector<double> bDeq;
  int32_t cachedExpert = -1;
  for (int64_t r : [&] {
         std::vector<int64_t> order;
         for (int64_t r = 0; r < data.numRoutes; ++r)
           if (expertOf[size_t(r)] >= 0)
             order.push_back(r);
         std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
           return expertOf[size_t(x)] < expertOf[size_t(y)];
         });
         return order;
       }()) {
    const int32_t expert = expertOf[size_t(r)];
    if (expert != cachedExpert) {
      bDeq.assign(size_t(hidden * inter), 0.0);
      const bool fp8Expert =
          shape.sharedFp8 && expert == shape.localExperts - 1;
      for (int64_t h = 0; h < hidden; ++h) {
        if (fp8Expert) {
          ref::dequantizeFp8Row(&data.sharedCodes[size_t(h * inter)],
                                &data.sharedScales[size_t(h * inter / 32)],
                                inter, &bDeq[size_t(h * inter)]);
          continue;
        }
        const size_t bRowIndex = size_t((expert * hidden + h) * inter);
        ref::dequantizeMxfp4Row(&data.bPacked[bRowIndex / 2],
                                &data.bScales[bRowIndex / 32], inter,
                                &bDeq[size_t(h * inter)]);
      }
      cachedExpert = expert;
    }
    const size_t rowBase = size_t(r * hidden);
    bool unwritten = false;
    ref::dequantizeFp8Row(&data.aCodes[size_t(r * inter)],
                          &data.aScales[size_t(r * inter / 32)], inter,
                          aRow.data());
    for (int64_t k = 0; k < inter; ++k)
      aRow[size_t(k)] = std::fabs(aRow[size_t(k)]);
    bool zeroMismatch = false;
    for (int64_t h = 0; h < hidden; ++h) {
      const size_t i = rowBase + size_t(h);
      unwritten |= outcome.outWritten[i] != 1;
      const double *bRowValues = &bDeq[size_t(h * inter)];
      double absSum = 0.0;
      for (int64_t k = 0; k < inter; ++k)
        absSum += aRow[size_t(k)] * std::fabs(bRowValues[k]);
      const double expected = outcome.oracle[i];
      double got = 0.0;
      if (splitK > 1) {
        // The combine sums the partials in slice order.
        for (int64_t z = 0; z < splitK; ++z)
          got += outcome.partials[size_t((r * splitK + z) * hidden + h)];
      } else {
        got = ref::decodeBf16(outcome.outBits[i]);
      }
      ++outcome.elementsChecked;
      if (!std::isfinite(got)) {
        ++outcome.nonFinite;
        continue;
      }
      if (zeroExperts.count(expert) && got != 0.0)
        zeroMismatch = true;
      const double err = std::fabs(got - expected);
      const double magnitude = std::max(std::fabs(expected), std::fabs(got));
      // BF16 output: one BF16 ulp; FP32 partials: one FP32 ulp (the
      // oracle's rounding) and one FP32 rounding per slice.
      const double tol =
          splitK > 1 ? std::ldexp(ulpBf16(magnitude), -16) +
                           (accumulationFactor + double(splitK) * std::ldexp(1.0, -24)) *
                               absSum
                     : ulpBf16(magnitude) + accumulationFactor * absSum;
      outcome.worstErrorOverTolerance =
          std::max(outcome.worstErrorOverTolerance, err / tol);
      if (err > tol)
        ++outcome.elementsOverTolerance;
      if (splitK == 1 && ref::encodeBf16(expected) == outcome.outBits[i])
        ++outcome.elementsEqualRounded;
      errSq += err * err;
      refSq += expected * expected;
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
                 outcome.relL2 <= (shape.splitK > 1 ? kW2SplitRelL2Bound
                                                    : kW2RelL2Bound);
  char equal[96] = "FP32 split-K partials";
  if (shape.splitK == 1)
    std::snprintf(equal, sizeof(equal), "%lld/%lld elements equal to bf16(oracle)",
                  (long long)outcome.elementsEqualRounded,
                  (long long)outcome.elementsChecked);
  char text[512];
  std::snprintf(text, sizeof(text),
                "rel L2 %.3e, worst err/tol %.3f, %s, %lld over tolerance, %lld "
                "non-finite, %lld listed rows unwritten, %lld unlisted rows "
                "written, %llu findings",
                outcome.relL2, outcome.worstErrorOverTolerance, equal,
                (long long)outcome.elementsOverTolerance,
                (long long)outcome.nonFinite,
                (long long)outcome.listedRowsUnwritten,
                (long long)outcome.unlistedRowsWritten,
                (unsigned long long)outcome.run.totalFindings());
  outcome.summary = text;
}

ref::Status saveW2Arrays(const std::string &dir, const std::string &prefix,
                         const W2Shape &shape, const W2Data &data,
                         const W2Outcome &outcome) {
  using ref::NpyArray;
  using ref::NpyDtype;
  const int64_t routes = data.numRoutes, hidden = shape.hidden,
                inter = shape.intermediate,
                experts = int64_t(data.bPacked.size()) / (hidden * inter / 2);
  std::vector<std::pair<std::string, NpyArray>> arrays = {
      {"a_codes", NpyArray::fromVector(NpyDtype::UInt8, {routes, inter}, data.aCodes)},
      {"a_scales", NpyArray::fromVector(NpyDtype::UInt8, {routes, inter / 32}, data.aScales)},
      {"b_packed", NpyArray::fromVector(NpyDtype::UInt8, {experts, hidden, inter / 2}, data.bPacked)},
      {"b_scales", NpyArray::fromVector(NpyDtype::UInt8, {experts, hidden, inter / 32}, data.bScales)},
      {"topk_ids", NpyArray::fromVector(NpyDtype::Int32, {data.tokens, shape.topK}, data.topkIds)},
      {"sorted_route_ids", NpyArray::fromVector(NpyDtype::Int32, {int64_t(data.sorted.routeIds.size())}, data.sorted.routeIds)},
      {"tile_experts", NpyArray::fromVector(NpyDtype::Int32, {data.sorted.numTiles()}, data.sorted.tileExperts)},
      shape.splitK > 1
          ? std::pair<std::string, NpyArray>{"out_partials_f32", NpyArray::fromVector(NpyDtype::Float32, {routes, shape.splitK, hidden}, outcome.partials)}
          : std::pair<std::string, NpyArray>{"out_bf16", NpyArray::fromVector(NpyDtype::UInt16, {routes, hidden}, outcome.outBits)},
      {"oracle_f32", NpyArray::fromVector(NpyDtype::Float32, {routes, hidden}, outcome.oracle)},
  };
  if (shape.sharedFp8) {
    arrays.push_back({"b_shared", NpyArray::fromVector(NpyDtype::UInt8, {hidden, inter}, data.sharedCodes)});
    arrays.push_back({"b_shared_scale", NpyArray::fromVector(NpyDtype::UInt8, {hidden, inter / 32}, data.sharedScales)});
  }
  for (const auto &[name, array] : arrays) {
    ref::Status status = ref::writeNpy(dir + "/" + prefix + name + ".npy", array);
    if (!status)
      return status;
  }
  return {};
}

} // namespace moec::emu
