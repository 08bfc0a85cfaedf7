//===- Families.cpp - the oracle of the three MoE kernel families ---------===//

#include "moec/reference/Families.h"
#include "moec/reference/Tolerance.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Parallel.h"
#include "moec/reference/Quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace moec::ref {
namespace {

std::string str(int64_t value) { return std::to_string(value); }

Status validateShape(const MoeShape &shape, const std::string &what) {
  if (shape.hidden <= 0 || shape.hidden % kBlockSize != 0)
    return Status::error(what + ": hidden size H = " + str(shape.hidden) +
                         " must be a positive multiple of 32");
  if (shape.intermediate <= 0 || shape.intermediate % kBlockSize != 0)
    return Status::error(what + ": intermediate size I = " +
                         str(shape.intermediate) +
                         " must be a positive multiple of 32");
  if (shape.experts <= 0)
    return Status::error(what + ": expert count must be positive, got " +
                         str(shape.experts));
  if (shape.topk <= 0)
    return Status::error(what + ": topk must be positive, got " +
                         str(shape.topk));
  return Status();
}

Status validateWeights(const WeightSource &w13, const WeightSource &w2,
                       const MoeShape &shape, int64_t experts,
                       const std::string &what) {
  if (w13.numExperts() != experts || w13.rows() != 2 * shape.intermediate ||
      w13.depth() != shape.hidden)
    return Status::error(what + ": W13 is [" + str(w13.numExperts()) + ", " +
                         str(w13.rows()) + ", " + str(w13.depth()) +
                         "], expected [" + str(experts) + ", " +
                         str(2 * shape.intermediate) + ", " + str(shape.hidden) +
                         "]");
  if (w2.numExperts() != experts || w2.rows() != shape.hidden ||
      w2.depth() != shape.intermediate)
    return Status::error(what + ": W2 is [" + str(w2.numExperts()) + ", " +
                         str(w2.rows()) + ", " + str(w2.depth()) +
                         "], expected [" + str(experts) + ", " +
                         str(shape.hidden) + ", " + str(shape.intermediate) + "]");
  return Status();
}

/// The biases hold nothing or one row per expert of the weights.
Status validateBias(const ExpertBias &bias, int64_t experts,
                    const MoeShape &shape, const std::string &what) {
  auto check = [&](const std::vector<float> &values, int64_t columns,
                   const char *name) {
    if (values.empty() ||
        static_cast<int64_t>(values.size()) == experts * columns)
      return Status();
    return Status::error(what + ": " + name + " bias holds " +
                         str(values.size()) + " values, expected " +
                         str(experts) + " x " + str(columns));
  };
  if (Status status = check(bias.w13, 2 * shape.intermediate, "W13"); !status)
    return status;
  return check(bias.w2, shape.hidden, "W2");
}

const float *biasData(const std::vector<float> &values) {
  return values.empty() ? nullptr : values.data();
}

/// Quantises BF16 rows per 1x32 in `format` (Quantize.h).
void quantizeBf16Rows(const std::vector<uint16_t> &bits, int64_t rows,
                      int64_t depth, std::vector<uint8_t> &codes,
                      std::vector<uint8_t> &scales,
                      ActivationFormat format = ActivationFormat::Fp8E4M3) {
  const int64_t rowBytes = activationRowBytes(format, depth);
  codes.assign(rows * rowBytes, 0);
  scales.assign(rows * (depth / kBlockSize), 0);
  std::vector<double> row(depth);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < depth; ++i)
      row[i] = decodeBf16(bits[r * depth + i]);
    quantizeActivationRow(format, row.data(), depth, codes.data() + r * rowBytes,
                          scales.data() + r * (depth / kBlockSize));
  }
}

void roundOutputs(const std::vector<double> &sum, StageResults &results) {
  results.output.resize(sum.size());
  results.outputBf16.resize(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    results.output[i] = roundToFloat(sum[i]);
    results.outputBf16[i] = encodeBf16(sum[i]);
  }
}

/// Sizes the route-indexed arrays of `results` to `rows` zero rows. Arrays
/// that already have the right size are taken as freshly zeroed: runMegaMoe
/// allocates every rank's arrays up front, in parallel, because touching
/// hundreds of megabytes of fixed-slot receive rows is otherwise a serial
/// cost comparable to the GEMMs.
void allocateStageArrays(int64_t rows, int64_t intermediate, int64_t hidden,
                         OracleMode mode, StageResults &results,
                         ActivationFormat format = ActivationFormat::Fp8E4M3) {
  auto size = [](auto &vector, int64_t count) {
    if (static_cast<int64_t>(vector.size()) != count)
      vector.assign(count, 0);
  };
  size(results.activation, rows * intermediate);
  if (mode == OracleMode::QuantFaithful) {
    size(results.intermediateCodes,
         rows * activationRowBytes(format, intermediate));
    size(results.intermediateScales, rows * (intermediate / kBlockSize));
  }
  size(results.downRows, rows * hidden);
}

/// The Euclidean norm of each listed route's dequantised FP8 row.
std::vector<double> listedRowNorms(const ActivationRows &rows,
                                   const SortedRoutes &sorted, int numThreads) {
  const std::vector<int32_t> listed = listedRoutes(sorted);
  std::vector<double> norms(listed.size());
  parallelFor(int64_t(listed.size()), numThreads, [&](int, int64_t item) {
    std::vector<double> row(size_t(rows.depth));
    rows.dequantizeRow(listed[size_t(item)], row.data());
    double sum = 0.0;
    for (double v : row)
      sum += v * v;
    norms[size_t(item)] = std::sqrt(sum);
  });
  return norms;
}

/// W13 -> activation (-> FP8 or MXFP4, `format`) -> W2 over `rows` GEMM
/// rows; A of W13 is `input` with route r reading row r / routesPerARow.
/// With `tolerance` (QuantFaithful), also the W2 rows' tolerance.
Status runGemmStages(const ActivationRows &input, int64_t routesPerARow,
                     int64_t rows, const WeightSource &w13,
                     const WeightSource &w2, const GluConfig &glu,
                     const float *w2Bias, OracleMode mode, bool tolerance,
                     int numThreads, StageResults &results,
                     ActivationFormat format = ActivationFormat::Fp8E4M3) {
  const int64_t intermediate = w2.depth();
  const int64_t hidden = w2.rows();
  const bool faithful = mode == OracleMode::QuantFaithful;
  tolerance &= faithful;
  allocateStageArrays(rows, intermediate, hidden, mode, results, format);
  W13Outputs outputs;
  outputs.activation = results.activation.data();
  std::vector<double> activationBound;
  if (faithful) {
    outputs.intermediateCodes = results.intermediateCodes.data();
    outputs.intermediateScales = results.intermediateScales.data();
    outputs.intermediateFormat = format;
  }
  if (tolerance) {
    activationBound.assign(size_t(rows * intermediate), 0.0);
    outputs.activationErrorBound = activationBound.data();
  }
  if (Status status = runW13Stage(input, routesPerARow, w13, results.routes,
                                  glu, outputs, numThreads);
      !status)
    return status;
  ActivationRows down =
      faithful ? ActivationRows::quantized(format,
                                           results.intermediateCodes.data(),
                                           results.intermediateScales.data(),
                                           rows, intermediate)
               : ActivationRows::float64(results.activation.data(), rows,
                                         intermediate);
  if (Status status = runW2Stage(down, w2, results.routes,
                                 results.downRows.data(), numThreads, w2Bias);
      !status || !tolerance)
    return status;
  results.downRowTolerance.assign(size_t(rows * hidden), 0.0);
  return w2RowTolerance(results.activation.data(), activationBound.data(),
                        listedRowNorms(down, results.routes, numThreads), w2,
                        results.routes, w2Bias, results.downRows.data(),
                        results.downRowTolerance.data(), numThreads, format);
}

/// StageResults::outputTolerance of `tokens` tokens: `rowOf(route)` gives
/// the route's W2 row and its tolerance row (null for an invalid route).
template <typename RowOf>
std::vector<double> combinedTolerance(const TokenBatch &batch, int64_t topk,
                                      int64_t hidden,
                                      const std::vector<double> &sum,
                                      RowOf rowOf) {
  std::vector<double> tolerance(size_t(batch.tokens * hidden), 0.0);
  for (int64_t token = 0; token < batch.tokens; ++token)
    for (int64_t n = 0; n < hidden; ++n) {
      CombineTolerance element;
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t route = token * topk + k;
        const auto [row, rowTolerance] = rowOf(route);
        if (row)
          element.addRoute(batch.topkWeights[size_t(route)], row[n],
                           rowTolerance[n]);
      }
      tolerance[size_t(token * hidden + n)] =
          element.finish(sum[size_t(token * hidden + n)]);
    }
  return tolerance;
}

/// The combine of PeerPayload::Fp8 over one rank's routes: each valid
/// route's FP32 W2 row times its FP32 weight, quantised per 1x32 block,
/// dequantised exactly and added in FP32 in increasing k; `sum` gets the
/// FP32 sums. With `tolerance`, also each element's bound: per route the
/// deviation of the kernel's dequantised value (intermediateDeviation of
/// the block, given the W2 row's bound times the weight plus three FP32
/// roundings), then the FP32 sum and the BF16 output (CombineTolerance).
/// `rowOf(route)` gives the route's W2 row and its tolerance row (null
/// rows for an invalid route; a null tolerance row when not computed).
template <typename RowOf>
void combineFp8Payload(const TokenBatch &batch, int64_t topk, int64_t hidden,
                       RowOf rowOf, std::vector<double> &sum,
                       std::vector<double> *tolerance) {
  sum.assign(size_t(batch.tokens * hidden), 0.0);
  if (tolerance)
    tolerance->assign(size_t(batch.tokens * hidden), 0.0);
  std::vector<double> weighted(hidden), dequantised(hidden), bound(hidden),
      deviation(hidden);
  std::vector<uint8_t> codes(hidden), scales(hidden / kBlockSize);
  std::vector<float> acc(hidden);
  std::vector<CombineTolerance> elements(tolerance ? hidden : 0);
  for (int64_t token = 0; token < batch.tokens; ++token) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(elements.begin(), elements.end(), CombineTolerance());
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t route = token * topk + k;
      const auto [row, rowTolerance] = rowOf(route);
      if (!row)
        continue;
      const float weight = batch.topkWeights[size_t(route)];
      for (int64_t n = 0; n < hidden; ++n)
        weighted[n] =
            static_cast<double>(static_cast<float>(row[n]) * weight);
      quantizeFp8Row(weighted.data(), hidden, codes.data(), scales.data());
      dequantizeFp8Row(codes.data(), scales.data(), hidden,
                       dequantised.data());
      for (int64_t n = 0; n < hidden; ++n)
        acc[n] += static_cast<float>(dequantised[n]);
      if (!tolerance || !rowTolerance)
        continue;
      const double w = std::fabs(weight);
      for (int64_t n = 0; n < hidden; ++n)
        bound[n] = w * (rowTolerance[n] +
                        3 * 0x1p-24 * (std::fabs(row[n]) + rowTolerance[n]));
      for (int64_t b = 0; b < hidden; b += kBlockSize)
        intermediateDeviation(weighted.data() + b, bound.data() + b,
                              deviation.data() + b);
      for (int64_t n = 0; n < hidden; ++n)
        elements[n].addDequantisedRoute(dequantised[n], deviation[n]);
    }
    for (int64_t n = 0; n < hidden; ++n) {
      sum[size_t(token * hidden + n)] = acc[n];
      if (tolerance)
        (*tolerance)[size_t(token * hidden + n)] = elements[n].finish(acc[n]);
    }
  }
}

/// Families 2 and 3 after the routing is final: `experts` counts every
/// expert the weight sources hold.
Status runRoutedLayer(const TpMoeConfig &config, int64_t experts,
                      const WeightSource &w13, const WeightSource &w2,
                      const TokenBatch &batch, StageResults &results) {
  const MoeShape &shape = config.shape;
  if (Status status = buildSortedRoutes(batch.topkIds.data(), batch.tokens,
                                        shape.topk, experts, config.mTile,
                                        results.routes);
      !status)
    return status;
  ActivationRows input;
  if (config.mode == OracleMode::QuantFaithful) {
    quantizeBf16Rows(batch.hiddenBf16, batch.tokens, shape.hidden,
                     results.inputCodes, results.inputScales,
                     config.inputFormat);
    input = ActivationRows::quantized(
        config.inputFormat, results.inputCodes.data(),
        results.inputScales.data(), batch.tokens, shape.hidden);
  } else {
    input = ActivationRows::bfloat16(batch.hiddenBf16.data(), batch.tokens,
                                     shape.hidden);
  }
  GluConfig glu{config.gateUpInterleave, config.swigluLimit,
                config.gptOssSwiglu, biasData(config.bias.w13)};
  glu.situV2 = config.situV2;
  glu.situBeta = config.situBeta;
  glu.situLinearBeta = config.situLinearBeta;
  if (Status status = runGemmStages(
          input, shape.topk, batch.tokens * shape.topk, w13, w2, glu,
          biasData(config.bias.w2), config.mode, config.outputTolerance,
          config.numThreads, results, config.intermediateFormat);
      !status)
    return status;
  std::vector<double> sum(batch.tokens * shape.hidden, 0.0);
  if (config.payload == PeerPayload::Fp8) {
    const bool bounds = !results.downRowTolerance.empty();
    combineFp8Payload(
        batch, shape.topk, shape.hidden,
        [&](int64_t route) {
          const bool valid =
              isValidExpert(batch.topkIds[size_t(route)], experts);
          const size_t at = size_t(route * shape.hidden);
          return std::make_pair(
              valid ? results.downRows.data() + at : nullptr,
              valid && bounds ? results.downRowTolerance.data() + at
                              : nullptr);
        },
        sum, bounds ? &results.outputTolerance : nullptr);
    roundOutputs(sum, results);
    return Status();
  }
  combineRoutes(results.downRows.data(), batch.topkIds.data(),
                batch.topkWeights.data(), batch.tokens, shape.topk, experts,
                shape.hidden, sum.data());
  roundOutputs(sum, results);
  if (!results.downRowTolerance.empty())
    results.outputTolerance = combinedTolerance(
        batch, shape.topk, shape.hidden, sum, [&](int64_t route) {
          const bool valid = isValidExpert(batch.topkIds[size_t(route)], experts);
          const size_t at = size_t(route * shape.hidden);
          return std::make_pair(
              valid ? results.downRows.data() + at : nullptr,
              valid ? results.downRowTolerance.data() + at : nullptr);
        });
  return Status();
}

} // namespace

Status validateBatch(const TokenBatch &batch, const MoeShape &shape,
                     const std::string &what) {
  if (batch.tokens < 0)
    return Status::error(what + ": token count is negative");
  if (static_cast<int64_t>(batch.hiddenBf16.size()) != batch.tokens * shape.hidden)
    return Status::error(what + ": hidden states hold " +
                         str(batch.hiddenBf16.size()) + " values, expected " +
                         str(batch.tokens) + " x " + str(shape.hidden));
  if (static_cast<int64_t>(batch.topkIds.size()) != batch.tokens * shape.topk)
    return Status::error(what + ": topk ids hold " + str(batch.topkIds.size()) +
                         " values, expected " + str(batch.tokens) + " x " +
                         str(shape.topk));
  if (static_cast<int64_t>(batch.topkWeights.size()) != batch.tokens * shape.topk)
    return Status::error(what + ": topk weights hold " +
                         str(batch.topkWeights.size()) + " values, expected " +
                         str(batch.tokens) + " x " + str(shape.topk));
  return Status();
}

Status runTpMoe(const TpMoeConfig &config, const WeightSource &w13,
                const WeightSource &w2, const TokenBatch &batch,
                StageResults &results) {
  if (Status status = validateShape(config.shape, "TP MoE"); !status)
    return status;
  if (Status status = validateBatch(batch, config.shape, "TP MoE"); !status)
    return status;
  if (Status status = validateWeights(w13, w2, config.shape,
                                      config.shape.experts, "TP MoE");
      !status)
    return status;
  if (Status status = validateBias(config.bias, config.shape.experts,
                                   config.shape, "TP MoE");
      !status)
    return status;
  results = StageResults();
  return runRoutedLayer(config, config.shape.experts, w13, w2, batch, results);
}

Status runFhMoe(const FhMoeConfig &config, const WeightSource &routedW13,
                const WeightSource &routedW2, const SharedExpertWeights *shared,
                const TokenBatch &batch, StageResults &results) {
  const MoeShape &shape = config.tp.shape;
  if (Status status = validateShape(shape, "FHMoE"); !status)
    return status;
  if (Status status = validateBatch(batch, shape, "FHMoE"); !status)
    return status;
  if (Status status =
          validateWeights(routedW13, routedW2, shape, shape.experts, "FHMoE");
      !status)
    return status;
  if (Status status = validateBias(
          config.tp.bias, shape.experts + (config.includeSharedExpert ? 1 : 0),
          shape, "FHMoE");
      !status)
    return status;
  results = StageResults();
  if (!config.includeSharedExpert)
    return runRoutedLayer(config.tp, shape.experts, routedW13, routedW2, batch,
                          results);
  if (!shared || !shared->w13Codes || !shared->w13Scales || !shared->w2Codes ||
      !shared->w2Scales)
    return Status::error("FHMoE: shared expert weights are missing");

  // The shared expert is expert E and every token's last route.
  const int64_t topk = shape.topk + 1;
  TokenBatch extended;
  extended.tokens = batch.tokens;
  extended.hiddenBf16 = batch.hiddenBf16;
  extended.topkIds.resize(batch.tokens * topk);
  extended.topkWeights.resize(batch.tokens * topk);
  for (int64_t token = 0; token < batch.tokens; ++token) {
    for (int64_t k = 0; k < shape.topk; ++k) {
      // Routed slots keep family 2's validity: an id >= E (E included) is
      // invalid there, so it must not silently reach the shared expert.
      int32_t expert = batch.topkIds[token * shape.topk + k];
      extended.topkIds[token * topk + k] =
          isValidExpert(expert, shape.experts) ? expert : -1;
      extended.topkWeights[token * topk + k] =
          batch.topkWeights[token * shape.topk + k];
    }
    extended.topkIds[token * topk + shape.topk] =
        static_cast<int32_t>(shape.experts);
    extended.topkWeights[token * topk + shape.topk] = 1.0f;
  }
  DenseWeights sharedW13(WeightFormat::Fp8E4M3, shared->w13Codes,
                         shared->w13Scales, 1, 2 * shape.intermediate,
                         shape.hidden);
  DenseWeights sharedW2(WeightFormat::Fp8E4M3, shared->w2Codes,
                        shared->w2Scales, 1, shape.hidden, shape.intermediate);
  AppendedExpertWeights w13(routedW13, sharedW13);
  AppendedExpertWeights w2(routedW2, sharedW2);
  TpMoeConfig tp = config.tp;
  tp.shape.topk = topk;
  tp.shape.experts = shape.experts + 1;
  return runRoutedLayer(tp, shape.experts + 1, w13, w2, extended, results);
}

Status planDispatch(const MegaMoeConfig &config,
                    const std::vector<TokenBatch> &ranks,
                    std::vector<ReceivePlan> &plans) {
  const MoeShape &shape = config.shape;
  const int64_t ep = config.ep;
  if (ep <= 0 || shape.experts % ep != 0)
    return Status::error("MegaMoE: EP size " + str(ep) +
                         " must be positive and divide the expert count " +
                         str(shape.experts));
  if (static_cast<int64_t>(ranks.size()) != ep)
    return Status::error("MegaMoE: " + str(ranks.size()) +
                         " rank batches given for EP " + str(ep));
  if (config.mTile <= 0)
    return Status::error("MegaMoE: M tile must be positive, got " +
                         str(config.mTile));
  const int64_t localExperts = shape.experts / ep;
  int64_t maxTokens = 0;
  for (const TokenBatch &batch : ranks)
    maxTokens = std::max(maxTokens, batch.tokens);
  int64_t capacity = config.slotCapacity;
  if (capacity <= 0)
    capacity = std::max<int64_t>(32, (ep * maxTokens + 31) / 32 * 32);

  std::vector<ReceivePlan> result(ep);
  for (int64_t dest = 0; dest < ep; ++dest) {
    // Routes for each local expert: source ranks in order, routes in order.
    std::vector<std::vector<std::pair<int32_t, int32_t>>> buckets(localExperts);
    for (int64_t source = 0; source < ep; ++source) {
      const TokenBatch &batch = ranks[source];
      for (int64_t route = 0; route < batch.tokens * shape.topk; ++route) {
        int32_t expert = batch.topkIds[route];
        if (!isValidExpert(expert, shape.experts) || expert / localExperts != dest)
          continue;
        buckets[expert - dest * localExperts].push_back(
            {static_cast<int32_t>(source), static_cast<int32_t>(route)});
      }
    }
    ReceivePlan &plan = result[dest];
    plan.expertCounts.resize(localExperts);
    plan.expertBase.resize(localExperts);
    int64_t rowCount = 0;
    for (int64_t local = 0; local < localExperts; ++local) {
      int64_t count = static_cast<int64_t>(buckets[local].size());
      plan.expertCounts[local] = count;
      if (config.transport == Transport::FixedSlot) {
        if (count > capacity)
          return Status::error(
              "MegaMoE fixed-slot dispatch overflow: rank " + str(dest) +
              " expert " + str(dest * localExperts + local) + " receives " +
              str(count) + " routes but has " + str(capacity) + " slots");
        plan.expertBase[local] = local * capacity;
      } else {
        plan.expertBase[local] = rowCount;
        rowCount += (count + config.mTile - 1) / config.mTile * config.mTile;
      }
    }
    plan.numRows = config.transport == Transport::FixedSlot
                       ? localExperts * capacity
                       : rowCount;
    if (config.transport == Transport::Compact && config.compactCapacity > 0 &&
        plan.numRows > config.compactCapacity)
      return Status::error("MegaMoE compact dispatch overflow: rank " +
                           str(dest) + " plans " + str(plan.numRows) +
                           " receive rows but the capacity is " +
                           str(config.compactCapacity));
    if (plan.numRows > std::numeric_limits<int32_t>::max() - config.mTile)
      return Status::error("MegaMoE: rank " + str(dest) +
                           " receive rows do not fit int32");
    plan.sourceRank.assign(plan.numRows, -1);
    plan.sourceRoute.assign(plan.numRows, -1);
    plan.rows.numRoutes = plan.numRows;
    plan.rows.mTile = config.mTile;
    for (int64_t local = 0; local < localExperts; ++local) {
      const auto &bucket = buckets[local];
      if (bucket.empty())
        continue;
      for (size_t i = 0; i < bucket.size(); ++i) {
        int64_t row = plan.expertBase[local] + static_cast<int64_t>(i);
        plan.sourceRank[row] = bucket[i].first;
        plan.sourceRoute[row] = bucket[i].second;
        plan.rows.routeIds.push_back(static_cast<int32_t>(row));
      }
      while (plan.rows.routeIds.size() % config.mTile != 0)
        plan.rows.routeIds.push_back(static_cast<int32_t>(plan.numRows));
      int64_t tiles = (static_cast<int64_t>(bucket.size()) + config.mTile - 1) /
                      config.mTile;
      for (int64_t tile = 0; tile < tiles; ++tile)
        plan.rows.tileExperts.push_back(
            static_cast<int32_t>(dest * localExperts + local));
    }
  }
  plans = std::move(result);
  return Status();
}

Status runMegaMoe(const MegaMoeConfig &config, const WeightSource &w13,
                  const WeightSource &w2, const std::vector<TokenBatch> &ranks,
                  std::vector<MegaMoeRankResult> &results) {
  const MoeShape &shape = config.shape;
  if (Status status = validateShape(shape, "MegaMoE"); !status)
    return status;
  for (size_t rank = 0; rank < ranks.size(); ++rank)
    if (Status status =
            validateBatch(ranks[rank], shape, "MegaMoE rank " + str(rank));
        !status)
      return status;
  if (Status status =
          validateWeights(w13, w2, shape, shape.experts, "MegaMoE");
      !status)
    return status;
  if (Status status = validateBias(config.bias, shape.experts, shape, "MegaMoE");
      !status)
    return status;
  std::vector<ReceivePlan> plans;
  if (Status status = planDispatch(config, ranks, plans); !status)
    return status;
  const int64_t ep = config.ep;
  const int64_t hidden = shape.hidden;
  const int64_t blocks = hidden / kBlockSize;
  const bool faithful = config.mode == OracleMode::QuantFaithful;

  std::vector<MegaMoeRankResult> out(ep);
  // Source side: every rank quantises its own tokens before dispatch.
  if (faithful)
    for (int64_t rank = 0; rank < ep; ++rank)
      quantizeBf16Rows(ranks[rank].hiddenBf16, ranks[rank].tokens, hidden,
                       out[rank].stages.inputCodes,
                       out[rank].stages.inputScales);

  // Destination side: gather the payload into the receive buffer, then the
  // two GEMM stages over receive rows.
  GluConfig glu{/*interleave=*/0, config.swigluLimit, config.gptOssSwiglu,
                biasData(config.bias.w13)};
  std::vector<std::vector<uint8_t>> recvCodes(ep), recvScales(ep);
  std::vector<std::vector<uint16_t>> recvBf16(ep);
  parallelFor(ep, std::min<int64_t>(ep, resolveThreadCount(config.numThreads)),
              [&](int, int64_t dest) {
                const ReceivePlan &plan = plans[dest];
                allocateStageArrays(plan.numRows, shape.intermediate, hidden,
                                    config.mode, out[dest].stages);
                if (faithful) {
                  recvCodes[dest].assign(plan.numRows * hidden, 0);
                  recvScales[dest].assign(plan.numRows * blocks, 0);
                } else {
                  recvBf16[dest].assign(plan.numRows * hidden, 0);
                }
                for (int64_t row = 0; row < plan.numRows; ++row) {
                  if (plan.sourceRank[row] < 0)
                    continue;
                  int64_t source = plan.sourceRank[row];
                  int64_t token = plan.sourceRoute[row] / shape.topk;
                  if (faithful) {
                    const StageResults &src = out[source].stages;
                    std::copy_n(src.inputCodes.begin() + token * hidden, hidden,
                                recvCodes[dest].begin() + row * hidden);
                    std::copy_n(src.inputScales.begin() + token * blocks, blocks,
                                recvScales[dest].begin() + row * blocks);
                  } else {
                    std::copy_n(ranks[source].hiddenBf16.begin() + token * hidden,
                                hidden, recvBf16[dest].begin() + row * hidden);
                  }
                }
              });
  for (int64_t dest = 0; dest < ep; ++dest) {
    ReceivePlan &plan = plans[dest];
    StageResults &stages = out[dest].stages;
    ActivationRows input =
        faithful ? ActivationRows::fp8(recvCodes[dest].data(),
                                       recvScales[dest].data(), plan.numRows,
                                       hidden)
                 : ActivationRows::bfloat16(recvBf16[dest].data(), plan.numRows,
                                            hidden);
    stages.routes = plan.rows;
    if (Status status = runGemmStages(input, 1, plan.numRows, w13, w2, glu,
                                      biasData(config.bias.w2), config.mode,
                                      config.outputTolerance, config.numThreads,
                                      stages);
        !status)
      return status;
    recvCodes[dest] = {};
    recvScales[dest] = {};
    recvBf16[dest] = {};
  }

  // Combine on each source rank, over its routes in slot order.
  for (int64_t source = 0; source < ep; ++source) {
    const TokenBatch &batch = ranks[source];
    const int64_t routes = batch.tokens * shape.topk;
    // Where each of this rank's routes landed: (destination, receive row).
    std::vector<const double *> routeRow(routes, nullptr);
    std::vector<const double *> routeTolerance(routes, nullptr);
    for (int64_t dest = 0; dest < ep; ++dest) {
      const ReceivePlan &plan = plans[dest];
      const StageResults &stages = out[dest].stages;
      for (int64_t row = 0; row < plan.numRows; ++row) {
        if (plan.sourceRank[row] != source)
          continue;
        routeRow[plan.sourceRoute[row]] = stages.downRows.data() + row * hidden;
        if (!stages.downRowTolerance.empty())
          routeTolerance[plan.sourceRoute[row]] =
              stages.downRowTolerance.data() + row * hidden;
      }
    }
    std::vector<double> sum(batch.tokens * hidden, 0.0);
    if (config.payload == PeerPayload::Fp8) {
      combineFp8Payload(
          batch, shape.topk, hidden,
          [&](int64_t route) {
            const bool valid =
                isValidExpert(batch.topkIds[size_t(route)], shape.experts);
            return std::make_pair(valid ? routeRow[size_t(route)] : nullptr,
                                  valid ? routeTolerance[size_t(route)]
                                        : nullptr);
          },
          sum,
          config.outputTolerance && faithful
              ? &out[source].stages.outputTolerance
              : nullptr);
      roundOutputs(sum, out[source].stages);
      continue;
    }
    for (int64_t token = 0; token < batch.tokens; ++token) {
      double *target = sum.data() + token * hidden;
      for (int64_t k = 0; k < shape.topk; ++k) {
        int64_t route = token * shape.topk + k;
        if (!isValidExpert(batch.topkIds[route], shape.experts))
          continue;
        double weight = batch.topkWeights[route];
        const double *row = routeRow[route];
        for (int64_t n = 0; n < hidden; ++n)
          target[n] += weight * row[n];
      }
    }
    roundOutputs(sum, out[source].stages);
    if (config.outputTolerance && faithful)
      out[source].stages.outputTolerance = combinedTolerance(
          batch, shape.topk, hidden, sum, [&](int64_t route) {
            const bool valid =
                isValidExpert(batch.topkIds[size_t(route)], shape.experts);
            return std::make_pair(valid ? routeRow[size_t(route)] : nullptr,
                                  valid ? routeTolerance[size_t(route)]
                                        : nullptr);
          });
  }
  for (int64_t rank = 0; rank < ep; ++rank)
    out[rank].plan = std::move(plans[rank]);
  results = std::move(out);
  return Status();
}

} // namespace moec::ref
