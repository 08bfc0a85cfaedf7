//===- CombineHarness.cpp - the weighted combine vs the oracle ------------===//
//
// Route rows of every rank (BF16, or split-K FP32 partials) -> token rows,
// compared with ref::combineRoutes over the same rows: the kernel rounds an
// FP32 sum of top_k (x split_k) terms once to BF16.
//
//===----------------------------------------------------------------------===//

#include "SharedRoute.h"
#include "StageSupport.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace mlir;

namespace moec::emu {
namespace {

/// Stream of generated route rows.
constexpr uint64_t kRowsTag = 0xC0B1;

/// Every rank's route rows -> token rows.
class CombineHarness final : public StageHarness {
public:
  CombineHarness(const BuiltKernel &kernel, const StageShape &shape)
      : StageHarness(kernel, shape) {}

  bool perRank() const override { return false; }

  const char *tolerance() const override {
    return "|out - oracle| <= ulp_bf16 + (top_k + split_k) 2^-24 sum_k |w_k| "
           "sum_z |row_kz|; rel L2 <= 2^-8";
  }

  std::vector<std::string> arguments() const override {
    return {"rows", "topk_ids", "topk_weights", "out", "num_tokens"};
  }

  ref::Status generate(const DataOptions &options, LayerData &data,
                       int64_t rank) const override {
    const StageShape &s = shape_;
    if (ref::Status status = ensureBatch(s, options, data, rank); !status)
      return status;
    if (data.hasRows)
      return {};
    const int64_t hidden = s.hidden, splitK = s.splitK,
                  numRoutes = data.numRoutes();
    const size_t stored = size_t(numRoutes * splitK * hidden);
    RouteRows &rows = data.rows;
    rows = RouteRows();
    rows.splitK = splitK;
    rows.written.assign(stored, 0);
    if (splitK > 1)
      rows.partials.assign(stored, 0.0f);
    else
      rows.bf16.assign(stored, 0);
    data.chainRows.assign(size_t(numRoutes * hidden), 0.0);
    bool anyRank = false;
    for (const RankData &mine : data.ranks) {
      if (!mine.hasRows)
        continue;
      anyRank = true;
      if (mine.rows.splitK != splitK)
        return ref::Status::error(
            "the combine reads split_k " + std::to_string(splitK) +
            " slices, W2 wrote " + std::to_string(mine.rows.splitK));
      // The routes this rank lists are its rows; the others are other ranks'.
      const ref::SortedRoutes &sorted = mine.sorted;
      for (int64_t t = 0; t < sorted.numTiles(); ++t) {
        if (!ref::isValidExpert(sorted.tileExperts[size_t(t)], s.localExperts))
          continue;
        for (int64_t i = 0; i < sorted.mTile; ++i) {
          const int32_t route = sorted.routeIds[size_t(t * sorted.mTile + i)];
          if (sorted.isPadding(route))
            continue;
          const size_t first = size_t(route) * size_t(splitK * hidden);
          for (size_t p = first; p < first + size_t(splitK * hidden); ++p) {
            if (splitK > 1)
              rows.partials[p] = mine.rows.partials[p];
            else
              rows.bf16[p] = mine.rows.bf16[p];
            rows.written[p] = mine.rows.written[p];
          }
          for (int64_t h = 0; h < hidden; ++h) {
            const size_t e = size_t(route) * size_t(hidden) + size_t(h);
            data.chainRows[e] = mine.chainRows[e];
          }
        }
      }
    }
    if (!anyRank) {
      // No W2 ran: seeded rows for the valid routes, which the all-oracle
      // layer reads too; the others stay poisoned.
      const ref::CounterRandom random(options.seed, kRowsTag);
      const std::vector<int32_t> ids =
          sharedRuleIds(data.batch.topkIds, data.topK, s.experts,
                        s.sharedLastRoute || data.sharedLastRoute);
      for (int64_t r = 0; r < numRoutes; ++r) {
        if (!ref::isValidExpert(ids[size_t(r)], s.experts))
          continue;
        for (int64_t h = 0; h < hidden; ++h) {
          double sum = 0.0;
          for (int64_t z = 0; z < splitK; ++z) {
            const size_t i = size_t((r * splitK + z) * hidden + h);
            if (splitK > 1) {
              rows.partials[i] = static_cast<float>(random.normal(i));
              sum += rows.partials[i];
            } else {
              rows.bf16[i] = ref::encodeBf16(random.normal(i));
              sum += ref::decodeBf16(rows.bf16[i]);
            }
            rows.written[i] = 1;
          }
          data.chainRows[size_t(r * hidden + h)] = sum;
        }
      }
    }
    data.hasRows = true;
    return {};
  }

  LogicalResult run(LayerData &data, int64_t, const LaunchConfig &launchIn,
                    StageOutcome &outcome, std::string &error) const override {
    const int64_t tokens = data.batch.tokens, hidden = shape_.hidden;
    const RouteRows &rows = data.rows;
    const size_t itemBytes = rows.splitK > 1 ? 4 : 2;
    std::vector<uint8_t> written(rows.written.size() * itemBytes);
    for (size_t i = 0; i < rows.written.size(); ++i)
      std::memset(&written[i * itemBytes], rows.written[i], itemBytes);
    KernelMemory km;
    if (rows.splitK > 1)
      km.input("rows", rows.partials, written);
    else
      km.input("rows", rows.bf16, written);
    km.input("topk_ids", data.batch.topkIds);
    km.input("topk_weights", data.batch.topkWeights);
    const unsigned out = km.output("out", size_t(tokens * hidden) * 2);
    km.scalar("num_tokens", tokens);
    outcome = StageOutcome();
    if (tokens > 0) {
      // The ABI's grid rule: a fixed block count, or one workgroup per
      // `waves` tokens.
      int64_t gridX =
          std::strtoll(kernel_.description.abi.gridX.c_str(), nullptr, 10);
      if (gridX <= 0)
        gridX = (tokens + shape_.waves - 1) / shape_.waves;
      LaunchConfig launch = launchIn;
      launch.grid = {std::max<int64_t>(gridX, 1), 1, 1};
      if (failed(km.run(kernel_, launch, outcome, error)))
        return failure();
    }
    km.snapshot(outcome);
    const size_t elements = size_t(tokens * hidden);
    data.outBits.resize(elements);
    data.outWritten.resize(elements);
    std::memcpy(data.outBits.data(), km.memory.data(out), elements * 2);
    for (size_t i = 0; i < elements; ++i)
      data.outWritten[i] =
          km.memory.written(out)[2 * i] && km.memory.written(out)[2 * i + 1];
    data.hasOutput = true;
    return success();
  }

  void compare(LayerData &data, int64_t, const DataOptions &,
               StageOutcome &outcome) const override {
    const int64_t tokens = data.batch.tokens, topK = data.topK,
                  hidden = shape_.hidden, experts = shape_.experts,
                  numRoutes = data.numRoutes();
    const RouteRows &rows = data.rows;
    const int64_t splitK = rows.splitK;
    outcome.relL2Bound = kCombineRelL2Bound;
    // The ids as the layer's contract counts them (FHMoE: the shared slot
    // rule), independent of the kernel's reading.
    const std::vector<int32_t> ids =
        sharedRuleIds(data.batch.topkIds, topK, experts,
                      shape_.sharedLastRoute || data.sharedLastRoute);
    // Route rows as the kernel reduces them: BF16 values, or the partials
    // summed in slice order; |row| sums for the tolerance. Rows not produced
    // read as zero here (a valid route always has its row, which the
    // findings check).
    std::vector<double> rowValues(size_t(numRoutes * hidden), 0.0),
        rowMagnitudes(size_t(numRoutes * hidden), 0.0);
    for (int64_t r = 0; r < numRoutes; ++r)
      for (int64_t h = 0; h < hidden; ++h) {
        const size_t i = size_t(r * hidden + h);
        for (int64_t z = 0; z < splitK; ++z) {
          const size_t p = size_t((r * splitK + z) * hidden + h);
          if (!rows.written[p])
            continue;
          const double value = splitK > 1 ? double(rows.partials[p])
                                          : ref::decodeBf16(rows.bf16[p]);
          rowValues[i] += value;
          rowMagnitudes[i] += std::fabs(value);
        }
      }
    const size_t elements = size_t(tokens * hidden);
    outcome.oracle.assign(elements, 0.0);
    ref::combineRoutes(rowValues.data(), ids.data(),
                       data.batch.topkWeights.data(), tokens, topK, experts,
                       hidden, outcome.oracle.data());
    // The all-oracle layer's output.
    data.chainOut.assign(elements, 0.0);
    ref::combineRoutes(data.chainRows.data(), ids.data(),
                       data.batch.topkWeights.data(), tokens, topK, experts,
                       hidden, data.chainOut.data());
    ElementCheck check(outcome);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t h = 0; h < hidden; ++h) {
        const size_t i = size_t(t * hidden + h);
        outcome.elementsUnwritten += !data.outWritten[i];
        double absSum = 0.0;
        for (int64_t k = 0; k < topK; ++k)
          if (ref::isValidExpert(ids[size_t(t * topK + k)], experts))
            absSum += std::fabs(double(
                          data.batch.topkWeights[size_t(t * topK + k)])) *
                      rowMagnitudes[size_t((t * topK + k) * hidden + h)];
        const double want = outcome.oracle[i];
        const double got = ref::decodeBf16(data.outBits[i]);
        check.add(got, want,
                  ulpBf16(std::max(std::fabs(want), std::fabs(got))) +
                      double(topK + splitK) * std::ldexp(1.0, -24) * absSum);
      }
    check.finish();
    // A non-finite output element is out of tolerance too.
    char text[256];
    std::snprintf(
        text, sizeof(text),
        "rel L2 %.3e, worst err/tol %.3f, %lld over tolerance, %lld "
        "unwritten, %llu findings",
        outcome.relL2, outcome.worstErrorOverTolerance,
        (long long)(outcome.elementsOverTolerance + outcome.nonFinite),
        (long long)outcome.elementsUnwritten,
        (unsigned long long)outcome.run.totalFindings());
    outcome.summary = text;
  }

  NamedArrays arrays(const LayerData &data, int64_t,
                     const StageOutcome &outcome) const override {
    const int64_t tokens = data.batch.tokens, hidden = shape_.hidden,
                  routes = data.numRoutes();
    return {
        data.rows.splitK > 1
            ? NamedArrays::value_type{"rows_partials_f32",
                                      npyOf({routes, data.rows.splitK, hidden},
                                            data.rows.partials)}
            : NamedArrays::value_type{"rows_bf16",
                                      npyOf({routes, hidden}, data.rows.bf16)},
        {"oracle_f64", npyOf({tokens, hidden}, outcome.oracle)},
    };
  }
};

} // namespace

std::unique_ptr<StageHarness> makeCombineHarness(const BuiltKernel &kernel,
                                                 const StageShape &shape) {
  return std::make_unique<CombineHarness>(kernel, shape);
}

} // namespace moec::emu
