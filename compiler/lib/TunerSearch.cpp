//===- TunerSearch.cpp - the grid, refinements, choosing ------------------===//
///
/// \file
/// docs/tuning.md describes the spec, the search space, the keys and the
/// outputs. Everything is ordered by the spec and the search space, never
/// by thread timing or pointer values, so the same inputs give the same
/// table and CSV byte for byte. TunerInternal.h says where the rest of the
/// tuner is.
///
//===----------------------------------------------------------------------===//

#include "TunerInternal.h"

#include "moec/Dialect/Moe/MoeKnobs.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <set>

namespace moec {
namespace tuner {

std::string knobOr(const TableKernel &kernel, const char *name,
                   const std::string &fallback) {
  auto it = kernel.knobs.find(name);
  return it == kernel.knobs.end() ? fallback : it->second;
}

int64_t knobInt(const TableKernel &kernel, const char *name, int64_t fallback) {
  auto it = kernel.knobs.find(name);
  return it == kernel.knobs.end() ? fallback : std::atoll(it->second.c_str());
}

std::string knobOrDefault(const TableKernel &kernel, const char *name) {
  const moe::KnobInfo *knob =
      moe::lookupKnob(abi::stageName(kernel.stage), name);
  return knobOr(kernel, name, knob ? knob->defaultValue : "");
}

bool isGemm(const TableKernel &kernel) {
  return abi::isGemmStage(kernel.stage) &&
         knobOr(kernel, "dispatch", "") != "only";
}

std::string identityOf(const TableKernel &kernel) {
  std::string id = std::string(abi::stageName(kernel.stage)) + "|" +
                   kernel.problem;
  for (const auto &[name, value] : kernel.knobs)
    id += "|" + name + "=" + value;
  return id;
}


GemmStageShape shapeOf(const TuningTable &spec, const TableKernel &kernel) {
  const TableProblem *problem = spec.findProblem(kernel.problem);
  GemmStageShape shape;
  shape.stage = kernel.stage;
  shape.hidden = problem->hidden;
  shape.intermediate = problem->intermediate;
  shape.experts = problem->experts;
  shape.topK = problem->topK;
  shape.ep = problem->ep;
  // m and n have no default: ODS requires them on every GEMM kernel line.
  shape.tileM = knobInt(kernel, "m", 16);
  shape.tileN = knobInt(kernel, "n", 64);
  shape.waves = std::atoll(knobOrDefault(kernel, "waves").c_str());
  shape.mfma32 = knobOrDefault(kernel, "mfma") == "m32n32k64";
  shape.bDirect = knobOrDefault(kernel, "b_direct") == "true";
  return shape;
}

namespace {

/// The last M of the seed's speculative-decode sweep: M = 6c, c = 1..192.
constexpr int64_t kDecodeStep = 6, kDecodeSteps = 192, kSmallM = 64;


/// The knob values a refinement tries on each stage kernel of a winner; a
/// kernel whose line does not set the knob has its ODS default
/// (knobOrDefault). The model predicts the same time for the
/// knobs its per-tile counts do not see (the combine's grid, W2's output
/// staging); they are searched so that `--device` can time them
/// (docs/tuning.md). The fused stages' grid, dispatch CUs, planning CUs
/// and work shards are the selection's, not a configuration's (see
/// handshakeOf), so they are not refined.
struct KnobChoice {
  /// The stage kernel it applies to; nothing: W13 and W2.
  std::optional<abi::Stage> stage;
  const char *knob, *value, *tag;
  const char *alsoKnob = nullptr, *alsoValue = nullptr;
  /// Only for kernels that set this knob (the fused stages' `transport`).
  const char *onlyWith = nullptr;
  /// Not for kernels that set this knob.
  const char *notWith = nullptr;
};
const KnobChoice kKnobChoices[] = {
    {std::nullopt, "orientation", "a_major", "oa"},
    {std::nullopt, "orientation", "b_major", "ob"},
    {std::nullopt, "b_cache", "nt", "nt"},
    {std::nullopt, "b_cache", "cached", "cached"},
    {std::nullopt, "waves_per_eu", "2", "wpe2"},
    {std::nullopt, "waves_per_eu", "4", "wpe4"},
    {std::nullopt, "a_swizzle", "true", "asw"},
    {std::nullopt, "async_a", "true", "async"},
    {std::nullopt, "b_prefetch", "true", "bpf"},
    {std::nullopt, "scale_prefetch", "true", "spf"},
    {std::nullopt, "scale_prefetch", "false", "nospf"},
    {std::nullopt, "xcd_swizzle", "true", "xcd"},
    {std::nullopt, "group_m", "4", "gm4"},
    {abi::Stage::W2, "persist_cu", "256", "p256s", "persist_strided", "true",
     nullptr, "workgroups"},
    {abi::Stage::W2, "bf16_lds", "true", "bf16lds"},
    // Routes a fused stage 1's producer wave dispatches at a time.
    {abi::Stage::W13, "chunk_routes", "4", "cr4", nullptr, nullptr,
     "transport"},
    // The combine's grid and waves.
    {abi::Stage::Combine, "blocks", "256", "b256", nullptr, nullptr, nullptr,
     "peer_rows"},
    {abi::Stage::Combine, "waves", "8", "w8", nullptr, nullptr, nullptr,
     "peer_rows"},
};

/// The fused stages' selection-wide knobs (their handshake counts,
/// handshakeOf): a variant changes one of them on every fused kernel of a
/// configuration, forming another handshake group, which the model cannot
/// tell from its parent's and `--device` can.
struct ClassChoice {
  const char *knob, *value, *tag;
  std::optional<abi::Stage> onlyStage; ///< nothing: W13 and W2
  bool compactOnly = false;
};
const ClassChoice kClassChoices[] = {
    {"workgroups", "256", "wg256"},
    {"workgroups", "512", "wg512"},
    {"dispatch_cus", "16", "dc16", abi::Stage::W13},
    {"dispatch_cus", "64", "dc64", abi::Stage::W13},
    {"work_shards", "2", "sh2", std::nullopt, true},
    {"work_shards", "8", "sh8", std::nullopt, true},
    {"plan_cus", "8", "pc8", abi::Stage::W13, true},
};

/// Whether refinement `r` changes `kernel`: a stage refinement the kernel
/// of its stage, a selection-wide one every fused kernel it names.
bool refinementApplies(const Refinement &r, const TableKernel &kernel) {
  if (!r.selectionWide())
    return *r.stage == kernel.stage;
  if (!kernel.knobs.count("transport"))
    return false;
  if (r.onlyStage && *r.onlyStage != kernel.stage)
    return false;
  return !r.compactOnly || knobOr(kernel, "transport", "") == "compact";
}

/// dispatch pairs its kernels' knobs, so it is ranked as written).
bool searchable(const TuningTable &spec, const TableConfig &config) {
  bool w13 = false, w2 = false;
  for (const std::string &name : config.kernels) {
    const TableKernel *kernel = spec.findKernel(name);
    if (kernel->knobs.count("dispatch"))
      return false;
    w13 |= kernel->stage == abi::Stage::W13;
    w2 |= kernel->stage == abi::Stage::W2;
  }
  return w13 && w2;
}

TableKernel tiledKernel(const TableKernel &base, const Tiling &t) {
  TableKernel kernel = base;
  if (t.fromTemplate)
    return kernel;
  const std::string suffix = "_m" + std::to_string(t.m);
  if (abi::isGemmStage(kernel.stage)) {
    const int64_t n = kernel.stage == abi::Stage::W13 ? t.w13N : t.w2N;
    kernel.knobs["m"] = std::to_string(t.m);
    kernel.knobs["n"] = std::to_string(n);
    kernel.knobs["waves"] = std::to_string(t.waves);
    kernel.knobs["mfma"] = t.m >= 128 ? "m32n32k64" : "m16n16k128";
    if (t.bDirect)
      kernel.knobs["b_direct"] = "true";
    // The weights' path is part of the name: a b_direct kernel and its
    // LDS twin are two kernels of the written table.
    kernel.name = base.name + suffix + "n" + std::to_string(n) + "w" +
                  std::to_string(t.waves) + (t.bDirect ? "_bdir" : "");
  } else if (kernel.stage == abi::Stage::Sort) {
    kernel.knobs["m_tile"] = std::to_string(t.m);
    kernel.name = base.name + suffix;
  }
  for (const Refinement &r : t.refinements)
    if (refinementApplies(r, kernel)) {
      kernel.knobs[r.knob] = r.value;
      if (!r.alsoKnob.empty())
        kernel.knobs[r.alsoKnob] = r.alsoValue;
      kernel.name += "_" + r.tag;
    }
  return kernel;
}

} // namespace

/// Adds a candidate of selection `s` unless one with the same name is
/// there; returns its index.
size_t Search::addCandidate(size_t s, const Tiling &tiling, size_t parent) {
  const TableConfig *base = spec.findConfig(spec.selections[s].rows.front().config);
  Candidate candidate;
  candidate.tiling = tiling;
  candidate.parent = parent;
  candidate.configName =
      tiling.fromTemplate ? base->name : base->name + "_" + tiling.tag();
  std::vector<Candidate> &candidates = candidatesOf[s];
  for (size_t c = 0; c < candidates.size(); ++c)
    if (candidates[c].configName == candidate.configName)
      return c;
  for (const std::string &name : base->kernels) {
    TableKernel kernel = tiledKernel(*spec.findKernel(name), tiling);
    const std::string identity = identityOf(kernel);
    auto [it, added] = kernelByIdentity.emplace(identity, kernels.size());
    if (added)
      kernels.push_back({kernel, identity});
    candidate.kernels.push_back(it->second);
  }
  candidates.push_back(std::move(candidate));
  return candidates.size() - 1;
}


void Search::predict() {
  for (size_t s = 0; s < candidatesOf.size(); ++s)
    for (Candidate &candidate : candidatesOf[s]) {
      if (!candidate.rejectionClass.empty() || !candidate.predictedUs.empty())
        continue;
      for (int64_t m : keysOf[s]) {
        double us = 0;
        for (size_t k : candidate.kernels) {
          const TableKernel &kernel = kernels[k].kernel;
          if (isGemm(kernel))
            us += predictStage(shapeOf(spec, kernel), resources[k],
                               workgroupSize[k], m, parameters,
                               target.chip, &tileCounts[k])
                      .totalUs;
          else
            us += parameters.otherKernelUs;
        }
        candidate.predictedUs.push_back(us);
      }
    }
}

CompileStatus Search::extendChosen(
    const std::function<std::vector<Tiling>(size_t, size_t)> &variantsOf,
    bool refines, bool &added, std::string &error) {
  added = false;
  for (size_t s = 0; s < candidatesOf.size(); ++s) {
    std::vector<size_t> chosen = choose(s, options.space.tieMargin);
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    for (size_t c : chosen)
      if (c != SIZE_MAX)
        for (const Tiling &tiling : variantsOf(s, c)) {
          const size_t before = candidatesOf[s].size();
          addCandidate(s, tiling, refines ? c : SIZE_MAX);
          added |= candidatesOf[s].size() != before;
        }
  }
  if (!added)
    return CompileStatus::Ok;
  const CompileStatus status = evaluate(error);
  if (status == CompileStatus::Ok)
    predict();
  return status;
}

std::string Search::handshakeOf(const Candidate &candidate) const {
  std::string text;
  for (size_t k : candidate.kernels)
    text += handshake[k];
  return text;
}

std::vector<Search::GroupChoice> Search::groupChoices(size_t s,
                                                     double margin) const {
  const std::vector<Candidate> &candidates = candidatesOf[s];
  std::vector<std::string> handshakes;
  std::vector<std::string> groups; // in order of first appearance
  std::vector<size_t> parents;
  for (const Candidate &candidate : candidates) {
    handshakes.push_back(handshakeOf(candidate));
    parents.push_back(candidate.parent);
    if (std::find(groups.begin(), groups.end(), handshakes.back()) ==
        groups.end())
      groups.push_back(handshakes.back());
  }
  std::vector<GroupChoice> out;
  for (const std::string &group : groups) {
    std::vector<std::vector<double>> predicted;
    for (size_t c = 0; c < candidates.size(); ++c)
      predicted.push_back(candidates[c].rejectionClass.empty() &&
                                  handshakes[c] == group
                              ? candidates[c].predictedUs
                              : std::vector<double>());
    GroupChoice choice;
    choice.handshake = group;
    choice.chosen =
        chooseCandidates(predicted, parents, keysOf[s].size(), margin);
    bool complete = true;
    for (size_t key = 0; key < choice.chosen.size() && complete; ++key) {
      complete = choice.chosen[key] != SIZE_MAX;
      if (complete)
        choice.predictedUs += candidates[choice.chosen[key]].predictedUs[key];
    }
    if (complete)
      out.push_back(std::move(choice));
  }
  return out;
}

std::vector<size_t> Search::choose(size_t s, double margin) const {
  // The group whose choices the model predicts fastest over all keys, ties
  // to the earlier.
  const GroupChoice *best = nullptr;
  const std::vector<GroupChoice> groups = groupChoices(s, margin);
  for (const GroupChoice &group : groups)
    if (!best || group.predictedUs < best->predictedUs)
      best = &group;
  return best ? best->chosen
              : std::vector<size_t>(keysOf[s].size(), SIZE_MAX);
}

/// Candidate `c` of selection `s` with one more knob of one GEMM stage
/// changed (knobs it already refined are left alone).
std::vector<Tiling> Search::refinementsOf(size_t s, size_t c) const {
  const Candidate &candidate = candidatesOf[s][c];
  std::vector<Tiling> out;
  if (candidate.tiling.fromTemplate)
    return out;
  for (abi::Stage stage :
       {abi::Stage::W13, abi::Stage::W2, abi::Stage::Combine}) {
    const TableKernel *kernel = nullptr;
    for (size_t k : candidate.kernels)
      if (kernels[k].kernel.stage == stage &&
          (isGemm(kernels[k].kernel) || stage == abi::Stage::Combine))
        kernel = &kernels[k].kernel;
    if (!kernel)
      continue;
    for (const KnobChoice &choice : kKnobChoices) {
      if (choice.stage ? *choice.stage != stage
                       : !abi::isGemmStage(stage))
        continue;
      if ((choice.onlyWith && !kernel->knobs.count(choice.onlyWith)) ||
          (choice.notWith && kernel->knobs.count(choice.notWith)))
        continue;
      if (knobOrDefault(*kernel, choice.knob) == choice.value)
        continue;
      bool refinedAlready = false;
      for (const Refinement &r : candidate.tiling.refinements)
        refinedAlready |= r.stage == stage && r.knob == choice.knob;
      if (refinedAlready)
        continue;
      Tiling tiling = candidate.tiling;
      tiling.refinements.push_back(
          {stage, choice.knob, choice.value,
           choice.alsoKnob ? choice.alsoKnob : "",
           choice.alsoValue ? choice.alsoValue : "", choice.tag});
      out.push_back(tiling);
    }
  }
  return out;
}

std::vector<Tiling> Search::classVariantsOf(size_t s, size_t c) const {
  const Candidate &candidate = candidatesOf[s][c];
  std::vector<Tiling> out;
  if (candidate.tiling.fromTemplate)
    return out;
  for (const ClassChoice &choice : kClassChoices) {
    Refinement r;
    r.knob = choice.knob;
    r.value = choice.value;
    r.tag = choice.tag;
    r.onlyStage = choice.onlyStage;
    r.compactOnly = choice.compactOnly;
    // Only where it changes some fused kernel.
    bool changes = false;
    for (size_t k : candidate.kernels) {
      const TableKernel &kernel = kernels[k].kernel;
      changes |= refinementApplies(r, kernel) &&
                 knobOrDefault(kernel, choice.knob) != choice.value;
    }
    if (!changes)
      continue;
    Tiling tiling = candidate.tiling;
    tiling.refinements.push_back(r);
    out.push_back(tiling);
  }
  return out;
}

} // namespace tuner

using namespace tuner;

std::vector<RefinedKnob> refinedKnobs() {
  std::set<RefinedKnob> knobs;
  for (const KnobChoice &choice : kKnobChoices)
    for (abi::Stage stage : {abi::Stage::W13, abi::Stage::W2}) {
      const std::string on = abi::stageName(choice.stage.value_or(stage));
      knobs.insert({on, choice.knob, false});
      if (choice.alsoKnob)
        knobs.insert({on, choice.alsoKnob, false});
    }
  for (const ClassChoice &choice : kClassChoices)
    for (abi::Stage stage : {abi::Stage::W13, abi::Stage::W2})
      knobs.insert({abi::stageName(choice.onlyStage.value_or(stage)),
                    choice.knob, true});
  return {knobs.begin(), knobs.end()};
}

std::vector<int64_t> selectionKeys(const TuningTable &spec,
                                   const TableSelection &selection) {
  std::set<int64_t> keys;
  if (selection.family != "megamoe" || selection.transport == "none") {
    for (const TableRow &row : selection.rows)
      keys.insert(row.m);
    return {keys.begin(), keys.end()};
  }
  const int64_t capacity = selection.workspace;
  if (selection.transport == "fixed_slot") {
    for (int64_t c = 1; c <= kDecodeSteps && kDecodeStep * c <= capacity; ++c)
      keys.insert(kDecodeStep * c);
    for (int64_t m = 1; m <= std::min(kSmallM, capacity); ++m)
      keys.insert(m);
    for (int64_t m = 1; m <= capacity; m *= 2)
      keys.insert(m);
    return {keys.begin(), keys.end()};
  }
  // Compact: what the network's fixed-slot class cannot hold.
  int64_t fixedCapacity = 0;
  for (const TableSelection &other : spec.selections)
    if (other.network == selection.network && other.ep == selection.ep &&
        other.transport == "fixed_slot")
      fixedCapacity = std::max(fixedCapacity, other.workspace);
  for (int64_t c = 1; c <= kDecodeSteps; ++c)
    if (kDecodeStep * c > fixedCapacity && kDecodeStep * c <= capacity)
      keys.insert(kDecodeStep * c);
  for (int64_t m = 1; m <= capacity; m *= 2)
    if (m > fixedCapacity)
      keys.insert(m);
  return {keys.begin(), keys.end()};
}

std::vector<size_t>
chooseCandidates(const std::vector<std::vector<double>> &predictedUs,
                 const std::vector<size_t> &parent, size_t keys,
                 double margin) {
  auto alive = [&](size_t c) { return !predictedUs[c].empty(); };
  std::vector<size_t> chosen;
  for (size_t key = 0; key < keys; ++key) {
    size_t best = SIZE_MAX;
    for (size_t c = 0; c < predictedUs.size(); ++c)
      if (parent[c] == SIZE_MAX && alive(c) &&
          (best == SIZE_MAX || predictedUs[c][key] < predictedUs[best][key]))
        best = c;
    while (best != SIZE_MAX) {
      size_t child = SIZE_MAX;
      for (size_t c = 0; c < predictedUs.size(); ++c)
        if (parent[c] == best && alive(c) &&
            (child == SIZE_MAX || predictedUs[c][key] < predictedUs[child][key]))
          child = c;
      if (child == SIZE_MAX ||
          predictedUs[child][key] >= predictedUs[best][key] * (1 - margin))
        break;
      best = child;
    }
    if (best != SIZE_MAX && !chosen.empty() && chosen.back() != SIZE_MAX &&
        predictedUs[chosen.back()][key] <= predictedUs[best][key] * (1 + margin))
      best = chosen.back();
    chosen.push_back(best);
  }
  return chosen;
}

CompileStatus tuneSpec(const TuningTable &spec, const std::string &specPath,
                       const TuneOptions &options, TuneResult &result,
                       std::string &error) {
  result = TuneResult();
  Search search(spec, specPath, options);
  if (!costModelParameters(options.costModel, search.parameters)) {
    error = "--model: unknown cost model '" + options.costModel +
            "' (moec-cost-2, moec-cost-3)";
    return CompileStatus::BadInput;
  }
  // Round 0: the grid of every searchable template, or the template itself.
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    const TableConfig *base = spec.findConfig(selection.rows.front().config);
    search.keysOf[s] = selectionKeys(spec, selection);
    if (search.keysOf[s].empty()) {
      error = selection.where.file + ":" + std::to_string(selection.where.line) +
              ": field 'workspace': no keys within the class";
      return CompileStatus::BadInput;
    }
    if (!searchable(spec, *base)) {
      Tiling own;
      own.fromTemplate = true;
      search.addCandidate(s, own, SIZE_MAX);
      continue;
    }
    for (int64_t m : options.space.tileM)
      for (int64_t w13N : options.space.w13N)
        for (int64_t w2N : options.space.w2N)
          for (int64_t waves : options.space.waves)
            for (bool bDirect : options.space.bDirect)
              search.addCandidate(s, {m, w13N, w2N, waves, bDirect, false, {}},
                                  SIZE_MAX);
  }
  CompileStatus status = search.evaluate(error);
  if (status != CompileStatus::Ok)
    return status;
  search.predict();

  // Refinement rounds: one more knob on each configuration the model
  // chooses somewhere, kept only where it wins by the margin.
  for (unsigned round = 0; round < options.space.refinementRounds; ++round) {
    bool added = false;
    status = search.extendChosen(
        [&](size_t s, size_t c) {
          return search.candidatesOf[s][c].tiling.refinements.size() == round
                     ? search.refinementsOf(s, c)
                     : std::vector<Tiling>();
        },
        /*refines=*/true, added, error);
    if (status != CompileStatus::Ok)
      return status;
    if (!added)
      break;
  }
  // The fused selections' selection-wide knobs: every configuration the
  // model chose, with one of them changed, as a group of its own.
  bool added = false;
  status = search.extendChosen(
      [&](size_t s, size_t c) { return search.classVariantsOf(s, c); },
      /*refines=*/false, added, error);
  if (status != CompileStatus::Ok)
    return status;
  result.compiledKernels = search.compiledKernels;
  result.countedKernels = search.countedKernels;
  result.countFallbacks = search.countFallbacks;

  std::vector<std::vector<size_t>> winnerOf(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    winnerOf[s] = search.choose(s, options.space.tieMargin);
    for (size_t key = 0; key < winnerOf[s].size(); ++key)
      if (winnerOf[s][key] == SIZE_MAX) {
        const TableSelection &selection = spec.selections[s];
        error = selection.where.file + ":" +
                std::to_string(selection.where.line) + ": every candidate of " +
                selection.network + " ep" + std::to_string(selection.ep) +
                " ws" + std::to_string(selection.workspace) + " was rejected";
        return CompileStatus::CheckFailed;
      }
  }
  DeviceTimings timings;
  if (options.timeCandidates) {
    status = timeOnDevice(search, winnerOf, timings, result, error);
    if (status != CompileStatus::Ok)
      return status;
  }
  writeCsv(search, winnerOf, result);
  return writeTable(search, winnerOf, timings, result, error);
}

} // namespace moec
