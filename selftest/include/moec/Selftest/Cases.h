//===- Cases.h - the self-test's cases and their tokens ---------*- C++ -*-===//
///
/// \file
/// Which cases a table runs (M around every boundary where the selected
/// configuration changes, plus the fixed list) and the tokens and routing
/// of one case on every rank.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_SELFTEST_CASES_H
#define MOEC_SELFTEST_CASES_H

#include "moec/Harness/LayerSetup.h"
#include "moec/reference/Families.h"
#include "moec/selection.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moec::selftest {

/// The "clamp" case of a GPT-OSS table scales the hidden states by this
/// power of two (exact in BF16 and in the FP8 input quantisation), so that
/// gate and up values pass AITER's clamp at 7, which the generated data
/// alone rarely reaches.
inline constexpr double kClampInputScale = 8.0;

/// One case: M for every rank and how its tokens are routed.
struct Case {
  uint32_t m = 0;
  /// "random", "hot-rank", "unequal", "empty-rank", "overflow", "clamp"
  std::string scenario;
};

/// The largest M needed to reach every configuration of a table (its row
/// ranges, `ranges`) that M <= `maxM` does not select (0: none).
uint32_t coverageM(const std::vector<rt::RowRange> &ranges, uint32_t maxM);

/// What the cases of one table are chosen from.
struct CaseLimits {
  uint32_t ep = 1;
  /// The largest M the layer accepts.
  uint32_t maxTokens = 0;
  /// --max-m (0: none).
  uint32_t maxM = 0;
  /// A GPT-OSS table with a clamp: one "clamp" case.
  bool clamp = false;
};

/// The cases of a table: the fixed list and M on both sides of every
/// boundary of `ranges` where the selected configuration changes, within
/// the limits (expert-parallel tables cycle through the routing
/// scenarios); then, for every configuration none of them selects
/// (`configAt(m)`: the configuration M selects), its smallest M; then the
/// clamp case. Rows that keep the configuration launch the same kernels,
/// so a tuned table with a row at every M costs no more cases than its
/// configurations do.
std::vector<Case> selftestCases(const std::vector<rt::RowRange> &ranges,
                                const std::function<uint32_t(uint32_t)> &configAt,
                                const CaseLimits &limits);

/// Every rank's tokens of case `c` (seeded by `caseSeed`): its own batch
/// when the table is fused, else one batch every rank serves. Routes are
/// generated with 10% invalid ids; rows past a rank's real tokens
/// ("unequal", "empty-rank") and every seventh token carry no valid route;
/// "hot-rank" routes to rank 0 only, "overflow" every route to expert 0,
/// and "clamp" scales the hidden states by kClampInputScale.
std::vector<ref::TokenBatch> caseBatches(const harness::TableFacts &facts,
                                         uint32_t ep, const Case &c,
                                         uint64_t caseSeed);

} // namespace moec::selftest

#endif // MOEC_SELFTEST_CASES_H
