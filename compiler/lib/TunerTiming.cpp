//===- TunerTiming.cpp - timing the best candidates on a device ----------===//
///
/// \file
/// `moec tune --device` (docs/tuning.md, "Timing on a device"): the
/// model's best candidates go into one table, each selected alone, which
/// is compiled to a bundle and timed by TuneOptions::timeCandidates; the
/// fastest measured candidate then wins each key it was timed at.
///
//===----------------------------------------------------------------------===//

#include "TunerInternal.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace moec {
namespace tuner {
namespace {

/// Per selection: candidate -> the indices of the keys to time it at.
using KeysToTime = std::vector<std::map<size_t, std::vector<size_t>>>;

/// The table of the candidates to time and, per timed configuration, what
/// the timer is given and the (selection, candidate) it stands for.
struct TimingPlan {
  std::string table;
  std::vector<TimedConfig> timed;
  std::vector<std::pair<size_t, size_t>> timedCandidate; // (s, c)
};

/// The candidates of selection `s` to time at one key: the model's best
/// TuneOptions::timedPerKey of its choice's handshake group, its choice,
/// the refinements of the choice it ties, and every other group's choice.
std::vector<size_t> candidatesToTime(const Search &search,
                                     const std::vector<size_t> &winners,
                                     size_t s, size_t key) {
  const TuneOptions &options = search.options;
  const std::vector<Candidate> &candidates = search.candidatesOf[s];
  // Only the model's handshake group can share the selection.
  const std::string handshake = search.handshakeOf(candidates[winners[key]]);
  std::vector<size_t> order;
  for (size_t c = 0; c < candidates.size(); ++c)
    if (candidates[c].rejectionClass.empty() &&
        search.handshakeOf(candidates[c]) == handshake)
      order.push_back(c);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return candidates[a].predictedUs[key] < candidates[b].predictedUs[key];
  });
  order.resize(std::min(order.size(), std::max<size_t>(1, options.timedPerKey)));
  const size_t winner = winners[key];
  if (std::find(order.begin(), order.end(), winner) == order.end())
    order.push_back(winner);
  // The refinements the model cannot tell from its choice (the knobs
  // its counts do not see among them): the device decides.
  for (size_t c = 0; c < candidates.size(); ++c)
    if (candidates[c].parent == winner &&
        candidates[c].rejectionClass.empty() &&
        candidates[c].predictedUs[key] <=
            candidates[winner].predictedUs[key] *
                (1 + options.space.tieMargin) &&
        std::find(order.begin(), order.end(), c) == order.end())
      order.push_back(c);
  // Every other handshake group's choice (fused selections): the
  // device also decides the selection-wide knobs the model ties.
  for (const Search::GroupChoice &group :
       search.groupChoices(s, options.space.tieMargin))
    if (std::find(order.begin(), order.end(), group.chosen[key]) ==
        order.end())
      order.push_back(group.chosen[key]);
  return order;
}

/// Which candidates to time at which keys, for every selection.
KeysToTime keysToTimeOf(const Search &search,
                        const std::vector<std::vector<size_t>> &winnerOf) {
  KeysToTime keysToTime(search.spec.selections.size());
  for (size_t s = 0; s < search.spec.selections.size(); ++s)
    for (size_t key = 0; key < search.keysOf[s].size(); ++key)
      for (size_t c : candidatesToTime(search, winnerOf[s], s, key))
        keysToTime[s][c].push_back(key);
  return keysToTime;
}

/// One table holding each timed candidate alone (docs/tuning.md, "Timing
/// on a device").
CompileStatus planTiming(const Search &search, const KeysToTime &keysToTime,
                         TimingPlan &plan, std::string &error) {
  const TuningTable &spec = search.spec;
  std::ostringstream table;
  table << "moec-table 1\n# Candidates of " << search.specPath
        << " to time, one selection each (moec tune --device).\n";
  for (const TableProblem &problem : spec.problems)
    table << problemLine(problem) << "\n";
  std::map<std::string, std::string> kernelNames; // name -> identity
  std::ostringstream configs, selections;
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    for (const auto &[c, keys] : keysToTime[s]) {
      const Candidate &candidate = search.candidatesOf[s][c];
      const std::string config = "t" + std::to_string(s) + "_" + std::to_string(c);
      configs << "config " << config << " kernels=";
      for (size_t i = 0; i < candidate.kernels.size(); ++i) {
        const CandidateKernel &kernel = search.kernels[candidate.kernels[i]];
        auto [it, added] = kernelNames.emplace(kernel.kernel.name, kernel.identity);
        if (added)
          table << kernelLine(kernel.kernel) << "\n";
        else if (it->second != kernel.identity) {
          error = search.specPath + ": two different candidate kernels are both "
                              "named '" + kernel.kernel.name + "'";
          return CompileStatus::CheckFailed;
        }
        configs << (i ? "," : "") << kernel.kernel.name;
      }
      configs << "\n";
      TimedConfig entry;
      entry.network = "timing-" + std::to_string(s) + "-" + std::to_string(c);
      entry.ep = uint32_t(selection.ep);
      entry.workspace = uint32_t(selection.workspace);
      entry.maxTokens = uint32_t(search.keysOf[s].back());
      for (size_t key : keys)
        entry.keys.push_back(search.keysOf[s][key]);
      selections << "\nselect network=" << entry.network
                 << " family=" << selection.family << " ep=" << selection.ep
                 << " workspace=" << selection.workspace
                 << " transport=" << selection.transport
                 << " above_max=largest\nrow m=1 config=" << config << "\n";
      plan.timed.push_back(entry);
      plan.timedCandidate.push_back({s, c});
    }
  }
  table << "\n" << configs.str() << selections.str();
  plan.table = table.str();
  return CompileStatus::Ok;
}

/// Writes the plan's table to a temporary directory, compiles it to a
/// bundle and hands that to the timer; `timedAny` says whether it timed.
CompileStatus compileAndTime(const Search &search, const TimingPlan &plan,
                             DeviceTimings &timings, bool &timedAny,
                             std::string &reason, std::string &error) {
  const TuneOptions &options = search.options;
  char directory[] = "/tmp/moec-tune-XXXXXX";
  if (!::mkdtemp(directory)) {
    error = std::string("cannot create a temporary directory in /tmp: ") +
            std::strerror(errno);
    return CompileStatus::CheckFailed;
  }
  const std::string tablePath = std::string(directory) + "/timed.table";
  const std::string bundlePath = std::string(directory) + "/timed.moeb";
  auto cleanUp = [&] {
    std::remove(tablePath.c_str());
    std::remove(bundlePath.c_str());
    ::rmdir(directory);
  };
  {
    std::ofstream out(tablePath, std::ios::binary);
    out << plan.table;
    if (!out.flush()) {
      error = tablePath + ": cannot write";
      cleanUp();
      return CompileStatus::CheckFailed;
    }
  }
  CompileOptions compileOptions;
  compileOptions.target = &search.target;
  compileOptions.jobs = options.jobs;
  compileOptions.cacheDirectory = options.cacheDirectory;
  compileOptions.cacheMaxBytes = options.cacheMaxBytes;
  CompileSummary summary;
  CompileStatus status =
      compileTableToBundle(tablePath, bundlePath, compileOptions, summary, error);
  if (status != CompileStatus::Ok) {
    error = "the candidates to time: " + error;
    cleanUp();
    return CompileStatus::CheckFailed;
  }
  timedAny = options.timeCandidates(bundlePath, plan.timed, timings, reason);
  cleanUp();
  return CompileStatus::Ok;
}

/// Stores the timer's times on the candidates they belong to; refuses
/// times that do not match the plan.
CompileStatus recordMeasurements(Search &search, const TimingPlan &plan,
                                 const KeysToTime &keysToTime,
                                 const DeviceTimings &timings,
                                 TuneResult &result, std::string &error) {
  const std::vector<TimedConfig> &timed = plan.timed;
  if (timings.us.size() != timed.size()) {
    error = "the device timer returned " + std::to_string(timings.us.size()) +
            " configurations' times for " + std::to_string(timed.size());
    return CompileStatus::CheckFailed;
  }
  result.timingNotes = timings.skipped;
  result.timedConfigs = timed.size();
  for (size_t t = 0; t < timed.size(); ++t) {
    auto [s, c] = plan.timedCandidate[t];
    Candidate &candidate = search.candidatesOf[s][c];
    candidate.measuredUs.assign(search.keysOf[s].size(), -1);
    const std::vector<size_t> &keys = keysToTime[s].at(c);
    if (timings.us[t].size() != keys.size()) {
      error = "the device timer returned " +
              std::to_string(timings.us[t].size()) + " times for " +
              timed[t].network + ", which has " + std::to_string(keys.size()) +
              " keys";
      return CompileStatus::CheckFailed;
    }
    for (size_t i = 0; i < keys.size(); ++i)
      candidate.measuredUs[keys[i]] = timings.us[t][i];
  }
  return CompileStatus::Ok;
}

/// The fastest measured candidate of selection `s` in one handshake group
/// at a key; SIZE_MAX: none was timed there.
size_t fastestMeasured(const Search &search, size_t s,
                       const std::string &handshake, size_t key) {
  const std::vector<Candidate> &candidates = search.candidatesOf[s];
  size_t best = SIZE_MAX;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const std::vector<double> &measured = candidates[c].measuredUs;
    if (!measured.empty() && measured[key] >= 0 &&
        search.handshakeOf(candidates[c]) == handshake &&
        (best == SIZE_MAX || measured[key] < candidates[best].measuredUs[key]))
      best = c;
  }
  return best;
}

/// The handshake group of selection `s` measured fastest summed over every
/// key (all of its keys timed), ties to the earlier; false: none was.
bool fastestMeasuredGroup(const Search &search, size_t s, std::string &group) {
  const std::vector<Candidate> &candidates = search.candidatesOf[s];
  const size_t keys = search.keysOf[s].size();
  bool grouped = false;
  double groupUs = 0;
  for (const Search::GroupChoice &choice :
       search.groupChoices(s, search.options.space.tieMargin)) {
    double total = 0;
    bool complete = true;
    for (size_t key = 0; key < keys && complete; ++key) {
      const size_t best = fastestMeasured(search, s, choice.handshake, key);
      complete = best != SIZE_MAX;
      if (complete)
        total += candidates[best].measuredUs[key];
    }
    if (complete && (!grouped || total < groupUs)) {
      group = choice.handshake;
      grouped = true;
      groupUs = total;
    }
  }
  return grouped;
}

/// Chooses the fastest measured candidate at every key it was timed at
/// (within the group measured fastest, or else the model's group at that
/// key) and writes every measurement to TuneResult::measurementsCsv.
void chooseMeasured(const Search &search,
                    std::vector<std::vector<size_t>> &winnerOf,
                    TuneResult &result) {
  const TuningTable &spec = search.spec;
  std::ostringstream csv;
  csv << "selection,m,candidate,predicted_us,measured_us,chosen\n";
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const std::vector<Candidate> &candidates = search.candidatesOf[s];
    std::string group;
    const bool grouped = fastestMeasuredGroup(search, s, group);
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const size_t best = fastestMeasured(
          search, s,
          grouped ? group : search.handshakeOf(candidates[winnerOf[s][key]]),
          key);
      if (best != SIZE_MAX)
        winnerOf[s][key] = best;
      for (size_t c = 0; c < candidates.size(); ++c) {
        const std::vector<double> &measured = candidates[c].measuredUs;
        if (measured.empty() || measured[key] < 0)
          continue;
        csv << selectionKey(spec.selections[s]) << "," << search.keysOf[s][key]
            << "," << candidates[c].configName << ","
            << formatUs(candidates[c].predictedUs[key]) << ","
            << formatUs(measured[key]) << "," << (c == best ? "yes" : "no")
            << "\n";
      }
    }
  }
  result.measurementsCsv = csv.str();
}

} // namespace

CompileStatus timeOnDevice(Search &search,
                           std::vector<std::vector<size_t>> &winnerOf,
                           DeviceTimings &timings, TuneResult &result,
                           std::string &error) {
  const KeysToTime keysToTime = keysToTimeOf(search, winnerOf);
  TimingPlan plan;
  CompileStatus status = planTiming(search, keysToTime, plan, error);
  if (status != CompileStatus::Ok)
    return status;
  bool timedAny = false;
  std::string reason;
  status = compileAndTime(search, plan, timings, timedAny, reason, error);
  if (status != CompileStatus::Ok)
    return status;
  if (!timedAny) {
    result.timingUnavailable = reason.empty() ? "the device did not time" : reason;
    timings = DeviceTimings();
    return CompileStatus::Ok;
  }
  status = recordMeasurements(search, plan, keysToTime, timings, result, error);
  if (status != CompileStatus::Ok)
    return status;
  chooseMeasured(search, winnerOf, result);
  return CompileStatus::Ok;
}

} // namespace tuner
} // namespace moec
