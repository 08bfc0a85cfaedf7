//===- Cases.cpp - the self-test's cases and their tokens -----------------===//

#include "moec/Selftest/Cases.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include <algorithm>
#include <set>

namespace moec::selftest {

uint32_t coverageM(const std::vector<rt::RowRange> &ranges, uint32_t maxM) {
  std::set<uint32_t> covered;
  uint32_t needed = 0;
  for (const rt::RowRange &range : ranges) {
    const uint32_t m = std::max(1u, range.mLow);
    if (m <= maxM || covered.count(range.config)) {
      covered.insert(range.config);
      continue;
    }
    covered.insert(range.config);
    needed = std::max(needed, m);
  }
  return needed;
}

std::vector<Case> selftestCases(const std::vector<rt::RowRange> &ranges,
                                const std::function<uint32_t(uint32_t)> &configAt,
                                const CaseLimits &limits) {
  std::set<uint32_t> ms = {1, 31, 32, 33, 255, 256, 257};
  for (size_t i = 0; i < ranges.size(); ++i) {
    const bool changesConfig =
        i + 1 == ranges.size() || ranges[i + 1].config != ranges[i].config;
    if (i == 0 || ranges[i - 1].config != ranges[i].config)
      ms.insert(std::max(1u, ranges[i].mLow));
    if (changesConfig) {
      ms.insert(ranges[i].mHigh);
      ms.insert(ranges[i].mHigh + 1);
    }
  }
  std::vector<Case> cases;
  const char *scenarios[] = {"random", "hot-rank", "unequal", "empty-rank"};
  size_t next = 0;
  for (uint32_t m : ms) {
    if (m == 0 || m > limits.maxTokens || (limits.maxM && m > limits.maxM))
      continue;
    const bool expertParallel = limits.ep > 1;
    cases.push_back({m, expertParallel ? scenarios[next++ % 4] : "random"});
  }
  // Every configuration the table selects runs at least once: one above
  // --max-m runs at the smallest M that selects it.
  std::set<uint32_t> covered;
  for (const Case &c : cases)
    covered.insert(configAt(c.m));
  for (const rt::RowRange &range : ranges) {
    const uint32_t m = std::max(1u, range.mLow);
    if (covered.count(range.config) || m > limits.maxTokens)
      continue;
    covered.insert(range.config);
    cases.push_back({m, "random"});
  }
  // GPT-OSS kernels: one case whose inputs drive gate and up past the
  // clamp; it must match the oracle and be far from the unclamped one.
  if (limits.clamp) {
    uint32_t m = std::min<uint32_t>(32, limits.maxTokens);
    if (limits.maxM)
      m = std::min(m, limits.maxM);
    if (m > 0)
      cases.push_back({m, "clamp"});
  }
  return cases;
}

std::vector<ref::TokenBatch> caseBatches(const harness::TableFacts &facts,
                                         uint32_t ep, const Case &c,
                                         uint64_t caseSeed) {
  const int64_t H = facts.problem.hidden, E = facts.problem.experts;
  const int64_t K = facts.problem.topK;
  const uint32_t M = c.m;
  const ref::MoeShape shape{H, int64_t(facts.problem.intermediate), E, K};
  const bool ownBatches = facts.fused;
  std::vector<ref::TokenBatch> batches(ep);
  for (uint32_t r = 0; r < ep; ++r) {
    ref::RoutingOptions routing;
    routing.invalidFraction = 0.1;
    if (c.scenario == "hot-rank" || c.scenario == "overflow") {
      routing.ep = ep;
      routing.hotRank = 0;
    }
    batches[r] = ref::generateBatch(caseSeed, ownBatches ? r : 0, M, shape,
                                    routing);
    ref::TokenBatch &batch = batches[r];
    // Rows past this rank's real tokens carry no valid route (an engine
    // pads to the common M that way).
    int64_t real = M;
    if (c.scenario == "unequal")
      real = std::max<int64_t>(0, int64_t(M) - int64_t(r) * int64_t(M) / int64_t(ep));
    if (c.scenario == "empty-rank" && r == ep - 1)
      real = 0;
    for (int64_t t = real; t < M; ++t)
      for (int64_t k = 0; k < K; ++k)
        batch.topkIds[size_t(t * K + k)] = -1;
    // Every seventh token has no valid route at all: it must come out zero
    // (an FHMoE token keeps its shared expert). Slot 0 holds E, which an
    // FHMoE layer must not take for its shared expert.
    for (int64_t t = 3; t < M; t += 7)
      for (int64_t k = 0; k < K; ++k)
        batch.topkIds[size_t(t * K + k)] = (k % 2) ? -1 : int32_t(E + k);
    if (c.scenario == "overflow")
      for (int64_t t = 0; t < M; ++t)
        for (int64_t k = 0; k < K; ++k)
          batch.topkIds[size_t(t * K + k)] = 0;
    if (c.scenario == "clamp")
      for (uint16_t &bits : batch.hiddenBf16)
        bits = ref::encodeBf16(ref::decodeBf16(bits) * kClampInputScale);
    if (!ownBatches)
      break;
  }
  for (uint32_t r = 1; r < ep && !ownBatches; ++r)
    batches[r] = batches[0];
  return batches;
}

} // namespace moec::selftest
