//===- TableRunner.cpp - a bundle's tables on a device --------------------===//

#include "SelftestRunner.h"

#include "moec/reference/Generate.h"

#include <algorithm>
#include <map>

namespace moec::selftest {

using harness::activationName;
using harness::DeviceMemory;
using harness::Rank;
using harness::TableFacts;

SelftestStatus SelftestRunner::run() {
  const rt::Manifest &manifest = bundle_.manifest();
  // Every table's facts first, so that a table the oracle cannot model
  // is refused before any device is opened or any case runs.
  if (SelftestStatus status = checkTables(); status != SelftestStatus::Passed)
    return status;
  if (SelftestStatus status = probeDevices(); status != SelftestStatus::Passed)
    return status;
  for (size_t t = 0; t < manifest.selection.size(); ++t) {
    if (!options_.network.empty() &&
        manifest.selection[t].network != options_.network)
      continue;
    SelftestStatus status = runTable(uint32_t(t));
    if (status == SelftestStatus::NoDevice || status == SelftestStatus::BadInput)
      return status;
  }
  // The last line says whether everything asked for ran: a skip is not a
  // pass, and a script reading only the exit status must be able to tell.
  std::string verdict =
      formatLine("%d passed, %d failed, %d skipped", passed_, failed_, skipped_);
  if (skipped_ && !failed_)
    verdict += formatLine(": INCOMPLETE, %d table(s) not run (exit %d)",
                          skipped_, int(SelftestStatus::Incomplete));
  line(verdict);
  if (failed_)
    return SelftestStatus::Failed;
  return skipped_ ? SelftestStatus::Incomplete : SelftestStatus::Passed;
}

SelftestStatus SelftestRunner::checkTables() const {
  const rt::Manifest &manifest = bundle_.manifest();
  for (size_t t = 0; t < manifest.selection.size(); ++t) {
    if (!options_.network.empty() &&
        manifest.selection[t].network != options_.network)
      continue;
    TableFacts facts;
    std::string message;
    if (!harness::tableFacts(manifest, bundle_.selector().tables()[t], facts,
                             message)) {
      error(message);
      return SelftestStatus::BadInput;
    }
  }
  return SelftestStatus::Passed;
}

SelftestStatus SelftestRunner::probeDevices() {
  std::string message;
  std::unique_ptr<rt::HipLibrary> library =
      rt::HipLibrary::load({libraryPath_}, message);
  std::unique_ptr<rt::HipDevice> device;
  if (library)
    device = rt::HipDevice::create(std::move(library), firstOrdinal_, message);
  if (device) {
    rt::hip::Error status = device->hipApi().hipGetDeviceCount(&deviceCount_);
    if (status != rt::hip::kSuccess) {
      message = "hipGetDeviceCount failed: " + device->library().describe(status);
      device.reset();
    }
  }
  if (!device) {
    error(message);
    return SelftestStatus::NoDevice;
  }
  return SelftestStatus::Passed;
}

bool SelftestRunner::placeRanks(uint32_t ep, bool fused,
                                std::vector<int> &ordinals,
                                std::string &skip) const {
  ordinals.clear();
  bool ownDevices = true;
  for (uint32_t r = 0; r < ep; ++r) {
    const int ordinal = devices_.empty() ? firstOrdinal_ + int(r)
                        : r < devices_.size() ? devices_[r]
                                              : -1;
    ownDevices &= ordinal >= 0 && ordinal < deviceCount_;
    ordinals.push_back(ordinal);
  }
  if (ownDevices)
    return true;
  // Unfused ranks are independent layers: one device serves them in turn.
  // Fused ranks wait on each other's kernels, so they cannot share one
  // device's queue.
  if (!fused) {
    ordinals.assign(ep, firstOrdinal_);
    return true;
  }
  const std::string wanted =
      devices_.empty()
          ? "devices " + std::to_string(firstOrdinal_) + " to " +
                std::to_string(firstOrdinal_ + int(ep) - 1)
          : "--devices lists " + std::to_string(devices_.size());
  skip = "fused ranks need a device each: " + std::to_string(ep) +
         " devices (" + wanted + "), the HIP library reports " +
         std::to_string(deviceCount_) +
         " (--device N takes N and the devices after it, --devices a list)";
  return false;
}

void SelftestRunner::describeTable(const std::string &name,
                                   const TableFacts &facts,
                                   const std::vector<int> &ordinals) const {
  if (ordinals.size() > 1) {
    std::string list;
    for (int ordinal : ordinals)
      list += (list.empty() ? "" : ",") + std::to_string(ordinal);
    line(name + ": ranks on devices " + list);
  }
  // SiLU is every shipped table's activation; anything else is said.
  if ((facts.gptOssSwiglu || !options_.activation.empty()) && !facts.situV2) {
    const bool oracle = oracleGptOss(facts);
    line(formatLine("%s: W13 kernels %s (clamp %g), oracle %s%s", name.c_str(),
                    activationName(facts.gptOssSwiglu), facts.swigluLimit,
                    activationName(oracle),
                    oracle == facts.gptOssSwiglu ? "" : " (--activation)"));
  }
  if (facts.situV2)
    line(formatLine("%s: W13 kernels SiTUv2 (betas %g, %g; clamp %g), oracle "
                    "%s",
                    name.c_str(), facts.situBeta, facts.situLinearBeta,
                    facts.swigluLimit,
                    options_.activation.empty() ? "SiTUv2"
                                                : options_.activation.c_str()));
  if (facts.bias)
    line(name + ": W13 and W2 kernels take per-expert biases: seeded N(0, 1) "
                "FP32, bound and given to the oracle");
}

bool SelftestRunner::openRanks(uint32_t tableIndex, const TableFacts &facts,
                               const std::vector<int> &ordinals,
                               TableRanks &table, SelftestStatus &status) {
  const rt::SelectionTable &selection = bundle_.selector().tables()[tableIndex];
  const std::string name = rt::describeTableKey(
      selection.network, selection.ep, selection.workspace);
  std::string message;
  table.ranks.resize(selection.ep);
  for (uint32_t r = 0; r < selection.ep; ++r) {
    Rank &rank = table.ranks[r];
    std::unique_ptr<rt::HipLibrary> library =
        rt::HipLibrary::load({libraryPath_}, message);
    if (library)
      rank.device = rt::HipDevice::create(std::move(library), ordinals[r], message);
    if (!rank.device) {
      error(message);
      status = SelftestStatus::NoDevice;
      return false;
    }
    rank.loader = std::make_unique<rt::KernelLoader>(*rank.device, bundle_);
    table.memory.push_back(std::make_unique<DeviceMemory>(*rank.device));
    rt::LayerProblem problem = facts.problem;
    problem.epRank = r;
    // --max-m: a workspace for that many tokens, or for the smallest M of
    // a configuration only larger M select.
    if (options_.maxM)
      problem.maxTokens = std::min(
          std::max(options_.maxM,
                   coverageM(bundle_.selector().rowRanges({tableIndex}),
                             options_.maxM)),
          selection.workspace);
    if (!rank.device->makeCurrent(message) ||
        !(rank.layer = rt::Layer::create(*rank.loader,
                                         rt::TableHandle{tableIndex}, problem,
                                         message))) {
      report(false, name + ": layer: " + message);
      status = SelftestStatus::Passed;
      return false;
    }
  }
  return true;
}

bool SelftestRunner::setUpRanks(const rt::SelectionTable &table,
                                const TableFacts &facts, TableRanks &ranks) {
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  const rt::LayerMemory &layerMemory = ranks.ranks[0].layer->memory();
  // Weights: routed experts in checkpoint numbering, sliced per rank.
  harness::HostLayerWeights host;
  generateWeights(options_.seed, facts, weights_, host);
  if (saver_)
    saveTableWeights(table, facts, host);
  if (options_.faults.uploadedWeights)
    options_.faults.uploadedWeights(facts, host);
  std::string message;
  for (uint32_t r = 0; r < table.ep; ++r)
    if (!harness::setUpRank(ranks.ranks[r], *ranks.memory[r], facts, table.ep,
                            r, host, layerMemory, message)) {
      report(false, name + ": set-up: " + message);
      return false;
    }
  if (layerMemory.peerBytes && !harness::bindRankPeers(ranks.ranks, message)) {
    report(false, name + ": set-up: " + message);
    return false;
  }
  return true;
}

void SelftestRunner::saveTableWeights(const rt::SelectionTable &table,
                                      const TableFacts &facts,
                                      const harness::HostLayerWeights &host) {
  weightsDirectory_.clear();
  if (runsAsCompiled(options_) && !options_.saveWeights)
    return;
  const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
  const int64_t E = host.experts;
  SavedCase saved;
  saved.saver = saver_;
  saved.directory = weightsDirectory_ = saver_->beginWeights();
  saved.entry = {{"weights", weightsDirectory_},
                 {"table", rt::describeTableKey(table.network, table.ep,
                                                table.workspace)},
                 {"gate_up_interleave", facts.interleave},
                 {"files", nlohmann::json::array()}};
  using ref::NpyArray;
  using ref::NpyDtype;
  saved.save("w13_weight",
             NpyArray::fromVector(NpyDtype::UInt8, {E, 2 * I, H / 2}, host.w13));
  saved.save("w13_scale", NpyArray::fromVector(NpyDtype::UInt8,
                                               {E, 2 * I, H / 32},
                                               host.w13Scales));
  saved.save("w2_weight",
             NpyArray::fromVector(NpyDtype::UInt8, {E, H, I / 2}, host.w2));
  saved.save("w2_scale", NpyArray::fromVector(NpyDtype::UInt8, {E, H, I / 32},
                                              host.w2Scales));
  if (facts.shared) {
    saved.save("shared_w13_weight",
               npyOf(NpyDtype::UInt8, 2 * I, H, host.sharedW13));
    saved.save("shared_w13_scale",
               npyOf(NpyDtype::UInt8, 2 * I, H / 32, host.sharedW13Scales));
    saved.save("shared_w2_weight", npyOf(NpyDtype::UInt8, H, I, host.sharedW2));
    saved.save("shared_w2_scale",
               npyOf(NpyDtype::UInt8, H, I / 32, host.sharedW2Scales));
  }
  if (facts.bias) {
    const int64_t rows = int64_t(host.w2Bias.size()) / H;
    saved.save("w13_bias", npyOf(NpyDtype::Float32, rows, 2 * I, host.w13Bias));
    saved.save("w2_bias", npyOf(NpyDtype::Float32, rows, H, host.w2Bias));
  }
  saver_->addWeights(std::move(saved.entry));
}

SelftestStatus SelftestRunner::runTable(uint32_t tableIndex) {
  const rt::Manifest &manifest = bundle_.manifest();
  const rt::SelectionTable &table = bundle_.selector().tables()[tableIndex];
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  TableFacts facts;
  std::string message;
  if (!harness::tableFacts(manifest, table, facts, message)) {
    error(message);
    return SelftestStatus::BadInput;
  }
  std::vector<int> ordinals;
  std::string skip;
  if (!placeRanks(table.ep, facts.fused, ordinals, skip)) {
    ++skipped_;
    line("SKIP " + name + ": " + skip);
    if (saver_)
      saver_->skipped(name, skip);
    return SelftestStatus::Passed;
  }
  describeTable(name, facts, ordinals);
  TableRanks ranks;
  SelftestStatus status = SelftestStatus::Passed;
  if (!openRanks(tableIndex, facts, ordinals, ranks, status))
    return status;
  if (!setUpRanks(table, facts, ranks))
    return SelftestStatus::Passed;
  const rt::LayerMemory &layerMemory = ranks.ranks[0].layer->memory();

  const rt::Selector &selector = bundle_.selector();
  CaseLimits limits;
  limits.ep = table.ep;
  limits.maxTokens = layerMemory.maxTokens;
  limits.maxM = options_.maxM;
  limits.clamp = facts.gptOssSwiglu && facts.swigluLimit > 0;
  const std::vector<Case> cases = selftestCases(
      selector.rowRanges({tableIndex}),
      [&](uint32_t m) { return selector.select({tableIndex}, m).config; },
      limits);
  for (size_t i = 0; i < cases.size(); ++i)
    runCase(table, facts, ranks.ranks, cases[i], options_.seed * 1000 + i,
            nullptr, true);

  // A fused fixed-slot table: routes beyond an expert's receive rows must
  // be reported, never dropped silently (when the layer's M can overflow
  // them: every route of every rank goes to one expert).
  if (facts.fused && !facts.compact &&
      uint64_t(layerMemory.maxTokens) * facts.problem.topK * table.ep >
          uint64_t(facts.fixedSlotCapacity))
    runCase(table, facts, ranks.ranks, {layerMemory.maxTokens, "overflow"},
            options_.seed * 1000 + 999, nullptr, true);
  if (options_.repeat > 0)
    runRepeats(table, facts, ranks.ranks, cases);
  return SelftestStatus::Passed;
}

void SelftestRunner::runRepeats(const rt::SelectionTable &table,
                                const TableFacts &facts,
                                std::vector<Rank> &ranks,
                                const std::vector<Case> &cases) {
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  std::map<std::pair<uint32_t, std::string>, std::vector<std::vector<uint16_t>>>
      firstOutput;
  int transitions = 0, mismatches = 0;
  uint32_t previous = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options_.repeat; ++i) {
    const Case &c =
        cases[size_t(ref::mixBits(options_.seed + uint64_t(i)) % cases.size())];
    std::vector<std::vector<uint16_t>> outputs;
    if (!runCase(table, facts, ranks, c, options_.seed * 1000 + c.m, &outputs,
                 false)) {
      ++mismatches;
      break;
    }
    transitions += i > 0 && c.m != previous;
    previous = c.m;
    auto [it, inserted] =
        firstOutput.emplace(std::make_pair(c.m, c.scenario), outputs);
    if (!inserted && it->second != outputs)
      ++mismatches;
  }
  report(mismatches == 0,
         formatLine<256>("%s repeat: %d forwards, %d shape transitions, %d "
                         "mismatching repeats, %.2f s",
                         name.c_str(), options_.repeat, transitions, mismatches,
                         secondsSince(start)));
}

void SelftestRunner::report(bool pass, const std::string &text) {
  (pass ? passed_ : failed_)++;
  line(std::string(pass ? "PASS " : "FAIL ") + text);
  if (saver_)
    saver_->addLine(std::string(pass ? "PASS " : "FAIL ") + text);
}

} // namespace moec::selftest
