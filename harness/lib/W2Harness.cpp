//===- W2Harness.cpp - the W2 stage on the emulator vs the oracle ---------===//
//
// The down projection of every listed route: the kernel's BF16 rows (or FP32
// split-K partials) against the reference W2 stage on the same FP8
// intermediate and MXFP4 weights.
//
//===----------------------------------------------------------------------===//

#include "StageSupport.h"

#include "moec/reference/Formats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

using namespace mlir;

namespace moec::emu {
namespace {

/// The reference W2 stage of `shape` over `a` (read in the stage's A
/// format, FP8 or MXFP4) on `weights` and the routes
/// `view` lists, each result rounded once to FP32; unlisted rows NaN.
ref::Status w2Oracle(const StageShape &shape, const Fp8Rows &a,
                     const ExpertWeights &weights,
                     const ref::SortedRoutes &view, int64_t numRoutes,
                     std::vector<double> &out) {
  out.assign(size_t(numRoutes * shape.hidden),
             std::numeric_limits<double>::quiet_NaN());
  OracleWeights oracleWeights(weights, shape.mxfp4Experts(), shape.hidden,
                              shape.intermediate, shape.sharedFp8);
  ref::Status status =
      ref::runW2Stage(ref::ActivationRows::quantized(
                          shape.midFormat, a.codes.data(), a.scales.data(),
                          numRoutes, shape.intermediate),
                      oracleWeights.source(), view, out.data(),
                      /*numThreads=*/0,
                      shape.bias ? weights.bias.data() : nullptr);
  for (double &value : out)
    value = static_cast<float>(value);
  return status;
}

/// FP8 or MXFP4 intermediate -> one rank's route rows.
class W2Harness final : public StageHarness {
public:
  W2Harness(const BuiltKernel &kernel, const StageShape &shape)
      : StageHarness(kernel, shape) {}

  const char *tolerance() const override {
    return shape_.splitK > 1
               ? "|sum_z partial_z - oracle| <= ulp_f32 + (I/mfmaK + split_k "
                 "+ 1) 2^-24 sum_k |a_k b_k|; rel L2 <= 2^-12"
               : "|out - oracle| <= ulp_bf16 + (I/mfmaK + 1) 2^-24 sum_k "
                 "|a_k b_k|; rel L2 <= 2^-8";
  }

  std::vector<std::string> arguments() const override {
    return {"a",        "a_scale",       "b",
            "b_scale",  "sorted_routes", "tile_experts",
            "out",      "num_routes",    "num_sorted",
            "b_shared", "b_shared_scale", "bias"};
  }

  ref::Status generate(const DataOptions &options, LayerData &data,
                       int64_t rank) const override {
    const StageShape &s = shape_;
    if (ref::Status status = ensureBatch(s, options, data, rank); !status)
      return status;
    if (ref::Status status = ensureRoutes(s, options, data, rank); !status)
      return status;
    RankData &mine = data.rank(rank);
    if (!mine.hasIntermediate) {
      // No W13 ran: seeded rows in the stage's A format, which the
      // all-oracle layer reads too.
      generateFp8Rows(options.seed, data.numRoutes(), s.intermediate,
                      mine.intermediate, s.midFormat);
      mine.chainIntermediate = mine.intermediate;
      mine.hasIntermediate = true;
      if (ref::Status status =
              checkNotAllZero(mine.intermediate.codes, "W2 input codes");
          !status)
        return status;
    }
    return ensureWeights(s, options, mine, /*w13=*/false);
  }

  LogicalResult run(LayerData &data, int64_t rank, const LaunchConfig &launch,
                    StageOutcome &outcome, std::string &error) const override {
    const StageShape &s = shape_;
    RankData &mine = data.rank(rank);
    const int64_t hidden = s.hidden, numRoutes = data.numRoutes(),
                  splitK = s.splitK;
    KernelMemory km;
    // A produced by an emulated W13 keeps its shadow: rows W13 never wrote
    // stay poisoned, so a W2 read of them is a finding.
    km.input("a", mine.intermediate.codes, mine.intermediate.codesWritten);
    km.input("a_scale", mine.intermediate.scales,
             mine.intermediate.scalesWritten);
    km.weights("b", "b_scale", mine.w2);
    km.routes(mine.sorted);
    const size_t elements = size_t(numRoutes * hidden) * size_t(splitK);
    const size_t itemBytes = splitK > 1 ? 4 : 2;
    const unsigned out = km.output("out", elements * itemBytes);
    km.scalar("num_routes", numRoutes);
    if (s.bias)
      km.input("bias", mine.w2.bias);
    if (failed(km.runTiles(kernel_, s, mine.sorted, hidden / s.tileN, splitK,
                           launch, outcome, error)))
      return failure();
    // Every stored element with a flag: written when all its bytes are.
    RouteRows &rows = mine.rows;
    rows = RouteRows();
    rows.splitK = splitK;
    const uint8_t *written = km.memory.written(out);
    rows.written.resize(elements);
    for (size_t i = 0; i < elements; ++i)
      rows.written[i] =
          std::all_of(written + itemBytes * i, written + itemBytes * (i + 1),
                      [](uint8_t w) { return w != 0; });
    if (splitK > 1) {
      rows.partials.resize(elements);
      std::memcpy(rows.partials.data(), km.memory.data(out), elements * 4);
    } else {
      rows.bf16.resize(elements);
      std::memcpy(rows.bf16.data(), km.memory.data(out), elements * 2);
    }
    mine.hasRows = true;
    return success();
  }

  void compare(LayerData &data, int64_t rank, const DataOptions &options,
               StageOutcome &outcome) const override {
    const StageShape &s = shape_;
    RankData &mine = data.rank(rank);
    const int64_t hidden = s.hidden, inter = s.intermediate,
                  numRoutes = data.numRoutes(), splitK = s.splitK;
    outcome.relL2Bound = splitK > 1 ? kW2SplitRelL2Bound : kW2RelL2Bound;
    // Tiles a dispatcher left empty (expert -1 or past the local experts)
    // must hold only padding and are dropped from the oracle's view.
    ref::SortedRoutes view;
    if (ref::Status status =
            oracleRoutes(mine.sorted, s.tileM, s.localExperts, view);
        !status) {
      outcome.pass = false;
      outcome.summary = status.message();
      return;
    }
    if (ref::Status status = w2Oracle(s, mine.intermediate, mine.w2, view,
                                      numRoutes, outcome.oracle);
        !status) {
      outcome.pass = false;
      outcome.summary = "oracle failed: " + status.message();
      return;
    }
    // The all-oracle layer: W2 over its own intermediate, rounded as the
    // kernel's output (BF16, or FP32 partials).
    const bool sameInput =
        mine.chainIntermediate.codes == mine.intermediate.codes &&
        mine.chainIntermediate.scales == mine.intermediate.scales;
    std::vector<double> chain;
    if (!sameInput &&
        !w2Oracle(s, mine.chainIntermediate, mine.w2, view, numRoutes, chain)) {
      outcome.pass = false;
      outcome.summary = "all-oracle W2 failed";
      return;
    }
    const std::vector<double> &chainSource = sameInput ? outcome.oracle : chain;
    mine.chainRows.assign(chainSource.size(), 0.0);
    for (size_t i = 0; i < chainSource.size(); ++i)
      if (!std::isnan(chainSource[i]))
        mine.chainRows[i] =
            splitK > 1 ? chainSource[i]
                       : ref::decodeBf16(ref::encodeBf16(chainSource[i]));

    const RouteRows &rows = mine.rows;
    // Per output element: 1 every partial written, 2 some, 0 none.
    auto writtenState = [&](int64_t r, int64_t h) {
      bool all = true, any = false;
      for (int64_t z = 0; z < splitK; ++z) {
        const bool w = rows.written[size_t((r * splitK + z) * hidden + h)] != 0;
        all &= w;
        any |= w;
      }
      return all ? 1 : any ? 2 : 0;
    };
    const std::vector<int32_t> expertOf = expertOfRoutes(view, numRoutes);
    const std::set<int64_t> zeroExperts(options.zeroExperts.begin(),
                                        options.zeroExperts.end());
    // Accumulation error bound: each of the I / mfmaK instructions rounds its
    // FP32 result once (relative 2^-24 of a partial sum bounded by
    // sum |a_k b_k|), and the oracle's FP32 rounding adds one more.
    const double accumulationFactor =
        double(inter / s.mfmaK + 1) * std::ldexp(1.0, -24);
    // Unlisted routes: the kernel must leave their rows untouched.
    for (int64_t r = 0; r < numRoutes; ++r) {
      if (expertOf[size_t(r)] >= 0)
        continue;
      for (int64_t h = 0; h < hidden; ++h)
        if (writtenState(r, h)) {
          ++outcome.unlistedRowsWritten;
          break;
        }
    }
    // Listed routes, grouped by expert so each expert's weights are
    // dequantised once (the tolerance needs sum_k |a_k b_k|).
    std::vector<int64_t> order;
    for (int64_t r = 0; r < numRoutes; ++r)
      if (expertOf[size_t(r)] >= 0)
        order.push_back(r);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return expertOf[size_t(x)] < expertOf[size_t(y)];
    });
    OracleWeights weights(mine.w2, s.mxfp4Experts(), hidden, inter,
                          s.sharedFp8);
    std::vector<double> bDeq, aRow(static_cast<size_t>(inter));
    int32_t cachedExpert = -1;
    ElementCheck check(outcome);
    for (int64_t r : order) {
      const int32_t expert = expertOf[size_t(r)];
      if (expert != cachedExpert) {
        dequantizeExpert(weights.source(), expert, bDeq);
        cachedExpert = expert;
      }
      const size_t rowBase = size_t(r * hidden);
      bool unwritten = false, zeroMismatch = false;
      ref::ActivationRows::quantized(s.midFormat, mine.intermediate.codes.data(),
                                     mine.intermediate.scales.data(), numRoutes,
                                     inter)
          .dequantizeRow(r, aRow.data());
      for (double &value : aRow)
        value = std::fabs(value);
      for (int64_t h = 0; h < hidden; ++h) {
        const size_t i = rowBase + size_t(h);
        unwritten |= writtenState(r, h) != 1;
        const double *bRow = &bDeq[size_t(h * inter)];
        double absSum = 0.0;
        for (int64_t k = 0; k < inter; ++k)
          absSum += aRow[size_t(k)] * std::fabs(bRow[k]);
        const double expected = outcome.oracle[i];
        double got = 0.0;
        if (splitK > 1) {
          // The combine sums the partials in slice order.
          for (int64_t z = 0; z < splitK; ++z)
            got += rows.partials[size_t((r * splitK + z) * hidden + h)];
        } else {
          got = ref::decodeBf16(rows.bf16[i]);
        }
        const double magnitude = std::max(std::fabs(expected), std::fabs(got));
        // The bias is added in FP32: one more rounding of at most 2^-24
        // of |acc| + |bias|.
        const double biasRounding =
            s.bias ? std::ldexp(
                         absSum + std::fabs(mine.w2.bias[size_t(
                                      expert * hidden + h)]),
                         -24)
                   : 0.0;
        // BF16 output: one BF16 ulp; FP32 partials: one FP32 ulp (the
        // oracle's rounding) and one FP32 rounding per slice.
        const double tol =
            biasRounding +
            (splitK > 1 ? std::ldexp(ulpBf16(magnitude), -16) +
                              (accumulationFactor +
                               double(splitK) * std::ldexp(1.0, -24)) *
                                  absSum
                        : ulpBf16(magnitude) + accumulationFactor * absSum);
        if (!check.add(got, expected, tol))
          continue;
        // A zero-weight expert's row is its bias.
        zeroMismatch |= !s.bias && zeroExperts.count(expert) && got != 0.0;
        if (splitK == 1 && ref::encodeBf16(expected) == rows.bf16[i])
          ++outcome.elementsEqualRounded;
      }
      outcome.listedRowsUnwritten += unwritten;
      outcome.zeroExpertNonZero += zeroMismatch;
    }
    check.finish();
    char equal[96] = "FP32 split-K partials";
    if (splitK == 1)
      std::snprintf(equal, sizeof(equal),
                    "%lld/%lld elements equal to bf16(oracle)",
                    (long long)outcome.elementsEqualRounded,
                    (long long)outcome.elementsChecked);
    char text[256];
    std::snprintf(text, sizeof(text), "rel L2 %.3e, worst err/tol %.3f, %s",
                  outcome.relL2, outcome.worstErrorOverTolerance, equal);
    outcome.summary = text + rowCounts(outcome);
  }

  NamedArrays arrays(const LayerData &data, int64_t rank,
                     const StageOutcome &outcome) const override {
    const RankData &mine = data.ranks[size_t(rank)];
    const int64_t routes = data.numRoutes(), hidden = shape_.hidden;
    std::vector<float> oracle(outcome.oracle.begin(), outcome.oracle.end());
    return {
        shape_.splitK > 1
            ? NamedArrays::value_type{"out_partials_f32",
                                      npyOf({routes, shape_.splitK, hidden},
                                            mine.rows.partials)}
            : NamedArrays::value_type{"out_bf16",
                                      npyOf({routes, hidden}, mine.rows.bf16)},
        {"oracle_f32", npyOf({routes, hidden}, oracle)},
    };
  }
};

} // namespace

std::unique_ptr<StageHarness> makeW2Harness(const BuiltKernel &kernel,
                                            const StageShape &shape) {
  return std::make_unique<W2Harness>(kernel, shape);
}

} // namespace moec::emu
