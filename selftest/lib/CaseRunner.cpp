//===- CaseRunner.cpp - one case on a table's ranks -----------------------===//

#include "SelftestRunner.h"

namespace moec::selftest {

using harness::DeviceMemory;
using harness::Rank;
using harness::TableFacts;

void SelftestRunner::SavedCase::save(const std::string &file,
                                     const ref::NpyArray &array) {
  auto begin = std::chrono::steady_clock::now();
  saver->save(directory, file, array, entry);
  savingSeconds += secondsSince(begin);
}

bool SelftestRunner::runForwards(const std::string &name,
                                 std::vector<Rank> &ranks,
                                 const std::vector<ref::TokenBatch> &batches,
                                 uint32_t m, const TableFacts &facts,
                                 std::vector<std::vector<uint16_t>> &got,
                                 uint64_t &overflow) {
  const size_t M = m, H = facts.problem.hidden, K = facts.problem.topK;
  const uint32_t ep = uint32_t(ranks.size());
  std::string message;
  // Inputs and poisoned outputs on every rank first: a copy is a
  // synchronising point, and the fused ranks' launches must all be queued
  // before any of them runs (they wait on each other).
  for (uint32_t r = 0; r < ep; ++r) {
    Rank &rank = ranks[r];
    DeviceMemory mem(*rank.device);
    const ref::TokenBatch &batch = batches[r];
    if (!rank.device->makeCurrent(message) ||
        !mem.upload(rank.hidden, batch.hiddenBf16.data(), M * H * 2, message) ||
        !mem.upload(rank.ids, batch.topkIds.data(), M * K * 4, message) ||
        !mem.upload(rank.weights, batch.topkWeights.data(), M * K * 4, message) ||
        !mem.fill(rank.out, 0xFF, M * H * 2, message)) {
      report(false, name + " m=" + std::to_string(m) + ": " + message);
      return false;
    }
  }
  for (uint32_t r = 0; r < ep; ++r) {
    Rank &rank = ranks[r];
    const rt::LayerInputs inputs = harness::rankInputs(rank, m);
    if (!rank.device->makeCurrent(message) ||
        rank.layer->forward(inputs, nullptr, message) !=
            rt::Layer::ForwardStatus::Ok) {
      report(false, name + " m=" + std::to_string(m) + " rank " +
                        std::to_string(r) + ": forward: " + message);
      return false;
    }
  }
  if (options_.faults.afterForwards &&
      !options_.faults.afterForwards(ranks, batches, m, facts, message)) {
    report(false, name + " m=" + std::to_string(m) + ": " + message);
    return false;
  }
  // Read back (a blocking copy runs every pending launch).
  got.assign(ep, std::vector<uint16_t>(M * H));
  overflow = 0;
  for (uint32_t r = 0; r < ep; ++r) {
    DeviceMemory mem(*ranks[r].device);
    rt::LayerStatus status;
    if (!ranks[r].device->makeCurrent(message) ||
        !mem.download(got[r].data(), ranks[r].out, M * H * 2, message) ||
        !ranks[r].layer->readStatus(status, message)) {
      report(false, name + " m=" + std::to_string(m) + " rank " +
                        std::to_string(r) + ": " + message);
      return false;
    }
    overflow += status.overflowRoutes;
  }
  return true;
}

void SelftestRunner::saveCaseInputs(SavedCase &saved,
                                    const rt::SelectionTable &table,
                                    const TableFacts &facts, const Case &c,
                                    const std::string &configId,
                                    const std::vector<ref::TokenBatch> &batches,
                                    const std::vector<std::vector<uint16_t>> &got) {
  const uint32_t ep = table.ep;
  const int64_t M = c.m, H = facts.problem.hidden, K = facts.problem.topK;
  const bool ownBatches = facts.fused;
  saved.saver = saver_;
  saved.directory = saver_->beginCase();
  saved.entry = {{"case", saved.directory},
                 {"table", rt::describeTableKey(table.network, table.ep,
                                                table.workspace)},
                 {"network", table.network},
                 {"ep", ep},
                 {"workspace", table.workspace},
                 {"m", c.m},
                 {"scenario", c.scenario},
                 {"config", configId},
                 {"activation", harness::activationName(oracleGptOss(facts))},
                 {"files", nlohmann::json::array()}};
  if (!weightsDirectory_.empty())
    saved.entry["weights"] = weightsDirectory_;
  for (uint32_t r = 0; r < (ownBatches ? ep : 1); ++r) {
    const std::string prefix = ownBatches ? "rank" + std::to_string(r) + "_" : "";
    saved.save(prefix + "hidden",
               npyOf(ref::NpyDtype::UInt16, M, H, batches[r].hiddenBf16));
    saved.save(prefix + "topk_ids",
               npyOf(ref::NpyDtype::Int32, M, K, batches[r].topkIds));
    saved.save(prefix + "topk_weights",
               npyOf(ref::NpyDtype::Float32, M, K, batches[r].topkWeights));
  }
  for (uint32_t r = 0; r < ep; ++r)
    saved.save("rank" + std::to_string(r) + "_out",
               npyOf(ref::NpyDtype::UInt16, M, H, got[r]));
}

bool SelftestRunner::checkOverflow(const std::string &name,
                                   const TableFacts &facts,
                                   std::vector<Rank> &ranks, const Case &c,
                                   const std::vector<ref::TokenBatch> &batches,
                                   uint64_t overflow, SavedCase *saved,
                                   std::chrono::steady_clock::time_point start) {
  // Every route of every rank names local expert 0 of rank 0.
  int64_t routes = 0;
  for (const ref::TokenBatch &batch : batches)
    for (int32_t id : batch.topkIds)
      routes += id == 0;
  const int64_t expected = std::max<int64_t>(0, routes - facts.fixedSlotCapacity);
  const std::string text = formatLine<256>(
      "%s m=%u overflow: %lld routes into %lld receive rows, "
      "%llu reported (expected %lld)",
      name.c_str(), c.m, (long long)routes, (long long)facts.fixedSlotCapacity,
      (unsigned long long)overflow, (long long)expected);
  const bool pass = expected > 0 && int64_t(overflow) == expected;
  std::string message;
  for (Rank &rank : ranks)
    if (!rank.layer->clearStatus(message))
      return false;
  if (saved) {
    saved->entry["result"] = pass ? "PASS" : "FAIL";
    saved->entry["routes"] = routes;
    saved->entry["receive_rows"] = facts.fixedSlotCapacity;
    saved->entry["overflow"] = overflow;
    saved->entry["expected_overflow"] = expected;
    saved->entry["time_s"] = secondsSince(start) - saved->savingSeconds;
    saver_->addCase(std::move(saved->entry));
  }
  report(pass, text);
  return pass;
}

void SelftestRunner::reportCase(const std::string &name, const Case &c,
                                const std::string &configId, bool pass,
                                uint64_t overflow,
                                const OracleComparison &comparison,
                                bool clampCase, bool bias, SavedCase *saved,
                                std::chrono::steady_clock::time_point start) {
  const double seconds =
      secondsSince(start) - (saved ? saved->savingSeconds : 0.0);
  if (saved) {
    nlohmann::json &entry = saved->entry;
    entry["result"] = pass ? "PASS" : "FAIL";
    entry["rel_l2"] = comparison.distance.relL2;
    entry["bound"] = kLayerRelL2Bound;
    entry["zero_rows_wrong"] = comparison.zeroRowsWrong;
    entry["unwritten"] = comparison.unwritten;
    entry["non_finite"] = comparison.distance.nonFinite;
    entry["over_bound"] = comparison.overBound;
    entry["worst_error_over_bound"] = comparison.worstOverBound;
    entry["overflow"] = overflow;
    entry["time_s"] = seconds;
    if (clampCase)
      entry["unclamped_rel_l2"] = comparison.unclampedRelL2;
    if (bias)
      entry["unbiased_rel_l2"] = comparison.unbiasedRelL2;
    saver_->addCase(std::move(entry));
  }
  std::string mustExceed =
      clampCase ? formatLine<64>(" unclamped_rel_l2=%.2e (must exceed the bound)",
                                 comparison.unclampedRelL2)
                : "";
  if (bias)
    mustExceed += formatLine<64>(" unbiased_rel_l2=%.2e (must exceed the bound)",
                                 comparison.unbiasedRelL2);
  report(pass, formatLine("%s m=%u %s config=%s rel_l2=%.2e (bound %.3g)%s "
                          "zero_rows_wrong=%lld unwritten=%lld non_finite=%lld "
                          "over_bound=%lld (worst %.2f) overflow=%llu %.2f s",
                          name.c_str(), c.m, c.scenario.c_str(),
                          configId.c_str(), comparison.distance.relL2,
                          kLayerRelL2Bound, mustExceed.c_str(),
                          (long long)comparison.zeroRowsWrong,
                          (long long)comparison.unwritten,
                          (long long)comparison.distance.nonFinite,
                          (long long)comparison.overBound,
                          comparison.worstOverBound,
                          (unsigned long long)overflow, seconds));
}

bool SelftestRunner::runCase(const rt::SelectionTable &table,
                             const TableFacts &facts, std::vector<Rank> &ranks,
                             const Case &c, uint64_t caseSeed,
                             std::vector<std::vector<uint16_t>> *outputs,
                             bool print) {
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  const auto start = std::chrono::steady_clock::now();
  // Each rank's tokens: its own batch (fused), or one batch every rank
  // serves (unfused expert parallel: the outputs are partial sums).
  const std::vector<ref::TokenBatch> batches =
      caseBatches(facts, table.ep, c, caseSeed);
  std::vector<std::vector<uint16_t>> got;
  uint64_t overflow = 0;
  if (!runForwards(name, ranks, batches, c.m, facts, got, overflow))
    return false;
  const uint32_t config = ranks[0].layer->lastForward().config;
  const std::string &configId = bundle_.manifest().configs[config].id;

  // --save: this case's inputs (each rank's when ranks have their own
  // batches) and every rank's output, then the oracle's.
  SavedCase saved;
  SavedCase *saving = saver_ && print ? &saved : nullptr;
  if (saving)
    saveCaseInputs(saved, table, facts, c, configId, batches, got);
  if (c.scenario == "overflow")
    return checkOverflow(name, facts, ranks, c, batches, overflow, saving, start);

  OracleCase oracle;
  oracle.facts = &facts;
  oracle.weights = &weights_;
  oracle.gptOssSwiglu = oracleGptOss(facts);
  // --activation names SiLU or GPT-OSS's SwiGLU; without it the kernels'
  // own activation, SiTUv2 included.
  oracle.situV2 = options_.activation.empty() && facts.situV2;
  oracle.tokensFp4 =
      options_.aFormat.empty() ? facts.tokensFp4 : options_.aFormat == "fp4";
  oracle.intermediateFp4 = options_.midFormat.empty()
                               ? facts.intermediateFp4
                               : options_.midFormat == "fp4";
  // A16W4 tables: BF16 in and between, unless --a-format names another.
  oracle.bf16 = facts.bf16Activations && options_.aFormat.empty();
  oracle.clampCase = c.scenario == "clamp";
  oracle.ep = table.ep;
  OracleComparison comparison;
  if (ref::Status status = compareWithOracle(oracle, batches, got, comparison);
      !status.ok()) {
    report(false, name + ": oracle: " + status.message());
    return false;
  }
  if (saving) {
    const bool ownBatches = facts.fused;
    for (size_t r = 0; r < comparison.oracleOutputs.size(); ++r)
      saved.save(ownBatches ? "rank" + std::to_string(r) + "_oracle" : "oracle",
                 npyOf(ref::NpyDtype::Float32, c.m, facts.problem.hidden,
                       comparison.oracleOutputs[r]));
  }
  const bool pass = overflow == 0 && comparison.pass;
  if (outputs)
    *outputs = got;
  if (print)
    reportCase(name, c, configId, pass, overflow, comparison, oracle.clampCase,
               facts.bias, saving, start);
  return pass;
}

} // namespace moec::selftest
