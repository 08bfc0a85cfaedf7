//===- Tuner.cpp - candidates, resource gate, model ranking ---------------===//
///
/// \file
/// docs/tuning.md describes the spec, the search space, the keys and the
/// outputs. Everything is ordered by the spec and the search space, never
/// by thread timing or pointer values, so the same inputs give the same
/// table and CSV byte for byte.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/Tuner.h"

#include "moec/Compiler/CostModel.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/target/occupancy.h"
#include "moec/target/target_info.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace mlir;

namespace moec {
namespace {

/// The last M of the seed's speculative-decode sweep: M = 6c, c = 1..192.
constexpr int64_t kDecodeStep = 6, kDecodeSteps = 192, kSmallM = 64;

std::string formatUs(double us) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", us);
  return text;
}

std::string knobOr(const TableKernel &kernel, const char *name,
                   const std::string &fallback) {
  auto it = kernel.knobs.find(name);
  return it == kernel.knobs.end() ? fallback : it->second;
}

/// A count as a whole number (the analytic ones may have a fraction).
std::string formatCount(double count) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", count);
  return text;
}

int64_t knobInt(const TableKernel &kernel, const char *name, int64_t fallback) {
  auto it = kernel.knobs.find(name);
  return it == kernel.knobs.end() ? fallback : std::atoll(it->second.c_str());
}

/// One knob of one GEMM stage set to a value other than its parent's: a
/// refinement (docs/tuning.md, "Refinement").
struct Refinement {
  /// "w13", "w2", "combine", or "fused": every fused kernel (of
  /// `onlyStage` when set, of the compact transport when `compactOnly`).
  std::string stage;
  std::string knob, value;
  std::string alsoKnob, alsoValue; ///< a second knob it needs, or empty
  std::string tag;                 ///< name part of its kernel
  std::string onlyStage;
  bool compactOnly = false;
  std::string text() const {
    return stage + ":" + knob + "=" + value +
           (alsoKnob.empty() ? "" : "+" + alsoKnob + "=" + alsoValue);
  }
};

/// The knob values a refinement tries on each stage kernel of a winner,
/// and the values a kernel has when its table line does not set the knob
/// (the dialect's defaults). The model predicts the same time for the
/// knobs its per-tile counts do not see (the combine's grid, W2's output
/// staging); they are searched so that `--device` can time them
/// (docs/tuning.md). The fused stages' grid, dispatch CUs, planning CUs
/// and work shards are the selection's, not a configuration's (see
/// handshakeOf), so they are not refined.
struct KnobChoice {
  const char *stage; ///< the stage kernel it applies to; nullptr: W13, W2
  const char *knob, *value, *tag, *defaultValue;
  const char *alsoKnob = nullptr, *alsoValue = nullptr;
  /// Only for kernels that set this knob (the fused stages' `transport`).
  const char *onlyWith = nullptr;
  /// Not for kernels that set this knob.
  const char *notWith = nullptr;
};
const KnobChoice kKnobChoices[] = {
    {nullptr, "orientation", "a_major", "oa", "a_major"},
    {nullptr, "orientation", "b_major", "ob", "a_major"},
    {nullptr, "b_cache", "nt", "nt", "cached"},
    {nullptr, "b_cache", "cached", "cached", "cached"},
    {nullptr, "waves_per_eu", "2", "wpe2", "0"},
    {nullptr, "waves_per_eu", "4", "wpe4", "0"},
    {nullptr, "a_swizzle", "true", "asw", "false"},
    {nullptr, "async_a", "true", "async", "false"},
    {nullptr, "b_prefetch", "true", "bpf", "false"},
    {nullptr, "scale_prefetch", "true", "spf", "false"},
    {nullptr, "scale_prefetch", "false", "nospf", "false"},
    {nullptr, "xcd_swizzle", "true", "xcd", "false"},
    {nullptr, "group_m", "4", "gm4", "0"},
    {"w2", "persist_cu", "256", "p256s", "0", "persist_strided", "true",
     nullptr, "workgroups"},
    {"w2", "bf16_lds", "true", "bf16lds", "false"},
    // Routes a fused stage 1's producer wave dispatches at a time.
    {"w13", "chunk_routes", "4", "cr4", "1", nullptr, nullptr, "transport"},
    // The combine's grid and waves.
    {"combine", "blocks", "256", "b256", "0", nullptr, nullptr, nullptr,
     "peer_rows"},
    {"combine", "waves", "8", "w8", "4", nullptr, nullptr, nullptr, "peer_rows"},
};

/// The fused stages' selection-wide knobs (their handshake counts,
/// handshakeOf): a variant changes one of them on every fused kernel of a
/// configuration, forming another handshake group, which the model cannot
/// tell from its parent's and `--device` can.
struct ClassChoice {
  const char *knob, *value, *tag, *defaultValue;
  const char *onlyStage = nullptr; ///< nullptr: W13 and W2
  bool compactOnly = false;
};
const ClassChoice kClassChoices[] = {
    {"workgroups", "256", "wg256", "256"},
    {"workgroups", "512", "wg512", "256"},
    {"dispatch_cus", "16", "dc16", "16", "w13"},
    {"dispatch_cus", "64", "dc64", "16", "w13"},
    {"work_shards", "2", "sh2", "0", nullptr, true},
    {"work_shards", "8", "sh8", "0", nullptr, true},
    {"plan_cus", "8", "pc8", "1", "w13", true},
};

/// Whether refinement `r` changes `kernel`: a stage refinement the kernel
/// of its stage, a selection-wide one every fused kernel it names.
bool refinementApplies(const Refinement &r, const TableKernel &kernel) {
  if (r.stage != "fused")
    return r.stage == kernel.stage;
  if (!kernel.knobs.count("transport"))
    return false;
  if (!r.onlyStage.empty() && r.onlyStage != kernel.stage)
    return false;
  return !r.compactOnly || knobOr(kernel, "transport", "") == "compact";
}

/// One candidate tiling of a template configuration.
struct Tiling {
  int64_t m = 0, w13N = 0, w2N = 0, waves = 0;
  bool bDirect = false;      ///< tile.b_direct on both GEMM stages
  bool fromTemplate = false; ///< the template's own kernels, unchanged
  std::vector<Refinement> refinements; ///< applied after the tiles
  std::string tag() const {
    if (fromTemplate)
      return "";
    std::string text = "m" + std::to_string(m) + "_n" + std::to_string(w13N) +
                       "x" + std::to_string(w2N) + "_w" +
                       std::to_string(waves) + (bDirect ? "_bdir" : "");
    for (const Refinement &r : refinements)
      text += "_" + r.stage + r.tag;
    return text;
  }
  std::string refinementText() const {
    std::string text;
    for (const Refinement &r : refinements)
      text += (text.empty() ? "" : " ") + r.text();
    return text;
  }
};

/// A kernel of a candidate: its table kernel and its identity.
struct CandidateKernel {
  TableKernel kernel;
  std::string identity; ///< stage, problem and knobs: equal -> one binary
};

struct Candidate {
  Tiling tiling;
  std::string configName;
  std::vector<size_t> kernels; ///< indices into the unique kernel list
  std::string rejection;       ///< empty: survives
  std::string rejectionClass;
  std::vector<double> predictedUs; ///< per key
  /// The candidate this one refines (index in its selection), or SIZE_MAX
  /// for a candidate of the grid.
  size_t parent = SIZE_MAX;
  /// Per key, microseconds measured on a device; negative: not timed.
  std::vector<double> measuredUs;
};

/// A kernel the cost model times as a GEMM stage (a dispatch-only stage 1
/// computes nothing and costs a launch).
bool isGemm(const TableKernel &kernel) {
  return (kernel.stage == "w13" || kernel.stage == "w2") &&
         knobOr(kernel, "dispatch", "") != "only";
}

std::string identityOf(const TableKernel &kernel) {
  std::string id = kernel.stage + "|" + kernel.problem;
  for (const auto &[name, value] : kernel.knobs)
    id += "|" + name + "=" + value;
  return id;
}

/// Whether a template's GEMM kernels are tiled by the search (a split
/// dispatch pairs its kernels' knobs, so it is ranked as written).
bool searchable(const TuningTable &spec, const TableConfig &config) {
  bool w13 = false, w2 = false;
  for (const std::string &name : config.kernels) {
    const TableKernel *kernel = spec.findKernel(name);
    if (kernel->knobs.count("dispatch"))
      return false;
    w13 |= kernel->stage == "w13";
    w2 |= kernel->stage == "w2";
  }
  return w13 && w2;
}

TableKernel tiledKernel(const TableKernel &base, const Tiling &t) {
  TableKernel kernel = base;
  if (t.fromTemplate)
    return kernel;
  const std::string suffix = "_m" + std::to_string(t.m);
  if (kernel.stage == "w13" || kernel.stage == "w2") {
    const int64_t n = kernel.stage == "w13" ? t.w13N : t.w2N;
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
  } else if (kernel.stage == "sort") {
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

GemmStageShape shapeOf(const TuningTable &spec, const TableKernel &kernel) {
  const TableProblem *problem = spec.findProblem(kernel.problem);
  GemmStageShape shape;
  shape.stage = kernel.stage;
  shape.hidden = problem->hidden;
  shape.intermediate = problem->intermediate;
  shape.experts = problem->experts;
  shape.topK = problem->topK;
  shape.ep = problem->ep;
  shape.tileM = knobInt(kernel, "m", 16);
  shape.tileN = knobInt(kernel, "n", 64);
  shape.waves = knobInt(kernel, "waves", 4);
  shape.mfma32 = knobOr(kernel, "mfma", "m16n16k128") == "m32n32k64";
  shape.bDirect = knobOr(kernel, "b_direct", "false") == "true";
  return shape;
}

std::string problemLine(const TableProblem &p) {
  std::string line = "problem " + p.name + " family=" + p.family +
                     " hidden=" + std::to_string(p.hidden) +
                     " intermediate=" + std::to_string(p.intermediate) +
                     " experts=" + std::to_string(p.experts) +
                     " top_k=" + std::to_string(p.topK);
  if (p.ep != 1)
    line += " ep=" + std::to_string(p.ep);
  return line;
}

std::string kernelLine(const TableKernel &k) {
  std::string line = "kernel " + k.name + " stage=" + k.stage +
                     " problem=" + k.problem;
  for (const auto &[name, value] : k.knobs)
    line += " " + name + "=" + value;
  return line;
}

/// Why the gate refuses a compiled kernel, as (class, detail); empty class:
/// it passes.
std::pair<std::string, std::string> gateOf(const CompiledKernel &compiled,
                                           const std::string &error,
                                           const TableKernel &kernel) {
  if (!error.empty()) {
    if (error.find(" spills ") != std::string::npos)
      return {"spills", error.substr(error.find("spills"))};
    if (error.find("scratch") != std::string::npos)
      return {"scratch", error.substr(error.find("uses"))};
    if (error.find("bytes of LDS") != std::string::npos ||
        error.find("local memory") != std::string::npos)
      return {"lds-overflow", "LDS " + std::to_string(compiled.resources.ldsBytes) +
                                  " bytes over the chip's " +
                                  std::to_string(target::defaultTarget().ldsBytesPerCu)};
    return {"compile-failed", error};
  }
  const target::OccupancyEstimate occupancy = target::estimateOccupancy(
      target::defaultTarget(),
      resourceUse(compiled.resources, compiled.abi.workgroupSize));
  if (occupancy.workgroupsPerCu == 0)
    return {"no-occupancy", occupancy.problem ? occupancy.problem : "cannot launch"};
  // A persistent, handshaking grid must be resident at once on every rank.
  if (kernel.knobs.count("workgroups")) {
    const int64_t grid = knobInt(kernel, "workgroups", 0);
    const int64_t budget = int64_t(occupancy.workgroupsPerCu) *
                           target::defaultTarget().computeUnits;
    if (grid > budget)
      return {"grid-over-resident-budget",
              "workgroups=" + std::to_string(grid) + " > " +
                  std::to_string(occupancy.workgroupsPerCu) + " per CU x " +
                  std::to_string(target::defaultTarget().computeUnits) +
                  " CUs = " + std::to_string(budget)};
  }
  return {"", ""};
}

} // namespace

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

namespace {

/// The search of one spec: candidates per selection, their kernels
/// (deduplicated across all of them), and what is known of each kernel.
/// Candidates are added in rounds (the grid, then refinements of the
/// winners); evaluate() builds, compiles, gates and counts what is new.
class Search {
public:
  Search(const TuningTable &spec, const std::string &specPath,
         const TuneOptions &options)
      : spec(spec), specPath(specPath), options(options),
        candidatesOf(spec.selections.size()), keysOf(spec.selections.size()) {}

  const TuningTable &spec;
  const std::string &specPath;
  const TuneOptions &options;
  std::vector<CandidateKernel> kernels;
  std::map<std::string, size_t> kernelByIdentity;
  std::vector<std::vector<Candidate>> candidatesOf;
  std::vector<std::vector<int64_t>> keysOf;
  /// Per kernel: the dialect's refusal, the compile or gate error, the
  /// resources and workgroup size, the model's per-tile counts.
  std::vector<std::string> invalid, compileError, countError;
  std::vector<rt::KernelResources> resources;
  std::vector<uint32_t> workgroupSize;
  std::vector<bool> compiled;
  std::vector<TileCounts> tileCounts;
  std::vector<bool> counted;
  /// Per kernel: its fused handshake (fusedHandshakeOf), "" unless fused.
  std::vector<std::string> handshake;
  size_t compiledKernels = 0, countedKernels = 0, countFallbacks = 0;
  CostModelParameters parameters;

  /// Adds a candidate of selection `s` unless one with the same name is
  /// there; returns its index.
  size_t addCandidate(size_t s, const Tiling &tiling, size_t parent) {
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

  CompileStatus evaluate(std::string &error);
  void predict();
  /// Adds the candidates `variantsOf(s, c)` makes of every configuration c
  /// the model chooses somewhere in each selection s (as refinements of c
  /// when `refines`), then evaluates and predicts the new ones; `added`
  /// says whether there were any.
  CompileStatus
  extendChosen(const std::function<std::vector<Tiling>(size_t, size_t)> &variantsOf,
               bool refines, bool &added, std::string &error);
  /// The fused stages' handshake counts of a candidate (empty for an
  /// unfused one): one selection's configurations must agree on them
  /// (checkSelections), so the choice is made within one such group.
  std::string handshakeOf(const Candidate &candidate) const;
  /// The model's choice within each handshake group of selection `s` that
  /// has a candidate at every key (one group unless the selection is
  /// fused), in order of first appearance.
  struct GroupChoice {
    std::string handshake;
    std::vector<size_t> chosen; ///< per key
    double predictedUs = 0;     ///< summed over the keys
  };
  std::vector<GroupChoice> groupChoices(size_t s, double margin) const;
  std::vector<size_t> choose(size_t s, double margin) const;
  /// The chosen configurations of a fused selection with one of the
  /// selection-wide knobs of its fused stages changed (kClassChoices).
  std::vector<Tiling> classVariantsOf(size_t s, size_t c) const;
  std::vector<Tiling> refinementsOf(size_t s, size_t c) const;

private:
  void gate(Candidate &candidate) const;
  void countTiles();
};

/// Builds every new kernel's stage op (the dialect's verifiers refuse
/// illegal knob combinations), compiles the valid ones in parallel through
/// the compile cache, gates every candidate and counts the tiles of the
/// GEMM kernels survivors launch.
CompileStatus Search::evaluate(std::string &error) {
  const size_t from = invalid.size();
  const size_t total = kernels.size();
  invalid.resize(total);
  compileError.resize(total);
  countError.resize(total);
  resources.resize(total);
  workgroupSize.resize(total, 0);
  compiled.resize(total, false);
  tileCounts.resize(total);
  counted.resize(total, false);
  handshake.resize(total);
  {
    DialectRegistry registry;
    registerMoecDialects(registry);
    MLIRContext context(registry);
    context.loadAllAvailableDialects();
    std::string diagnostic;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (diagnostic.empty())
        diagnostic = diag.str();
      return success();
    });
    OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
    OpBuilder builder(&context);
    builder.setInsertionPointToEnd(module->getBody());
    for (size_t k = from; k < total; ++k) {
      StageDescription description;
      std::string buildError;
      diagnostic.clear();
      Operation *op = buildStageOp(builder, stageSpecOf(spec, kernels[k].kernel),
                                   description, buildError);
      if (!op) {
        invalid[k] = buildError.empty() ? diagnostic : buildError;
        continue;
      }
      const FusedHandshake fused = fusedHandshakeOf(op);
      if (!fused.stage.empty())
        handshake[k] = fused.stage + " " + fused.counts + ";";
      op->erase();
    }
  }
  TuningTable batch;
  batch.path = specPath;
  batch.text = spec.text;
  batch.problems = spec.problems;
  std::vector<size_t> batchKernel;
  for (size_t k = from; k < total; ++k)
    if (invalid[k].empty()) {
      TableKernel kernel = kernels[k].kernel;
      kernel.name = "candidate" + std::to_string(k);
      batch.kernels.push_back(kernel);
      batchKernel.push_back(k);
    }
  if (!batch.kernels.empty()) {
    CompileOptions compileOptions;
    compileOptions.jobs = options.jobs;
    compileOptions.cacheDirectory = options.cacheDirectory;
    compileOptions.cacheMaxBytes = options.cacheMaxBytes;
    compileOptions.progress = options.progress;
    CompiledTable table;
    const CompileStatus status = compileTable(batch, compileOptions, table, error);
    if (status == CompileStatus::BadInput ||
        table.kernelErrors.size() != table.kernels.size())
      return status == CompileStatus::Ok ? CompileStatus::CheckFailed : status;
    error.clear();
    compiledKernels += table.kernels.size();
    for (size_t b = 0; b < batchKernel.size(); ++b) {
      const size_t index = table.kernelIndex.at(batch.kernels[b].name);
      const size_t k = batchKernel[b];
      compiled[k] = true;
      resources[k] = table.kernels[index].resources;
      workgroupSize[k] = table.kernels[index].abi.workgroupSize;
      compileError[k] = table.kernelErrors[index];
    }
  }
  for (std::vector<Candidate> &candidates : candidatesOf)
    for (Candidate &candidate : candidates)
      if (candidate.rejectionClass.empty())
        gate(candidate);
  countTiles();
  return CompileStatus::Ok;
}

/// A candidate is rejected for its first kernel the chip refuses.
void Search::gate(Candidate &candidate) const {
  for (size_t k : candidate.kernels) {
    const TableKernel &kernel = kernels[k].kernel;
    if (!invalid[k].empty()) {
      candidate.rejectionClass = "invalid-knobs";
      candidate.rejection = kernel.stage + ": " + invalid[k];
      return;
    }
    CompiledKernel view;
    view.resources = resources[k];
    view.abi.workgroupSize = workgroupSize[k];
    auto [cls, detail] = gateOf(view, compileError[k], kernel);
    if (!cls.empty()) {
      candidate.rejectionClass = cls;
      candidate.rejection = kernel.stage + ": " + detail;
      return;
    }
  }
}

/// The model's per-tile inputs of every GEMM kernel a surviving candidate
/// launches: counted once per kernel (in parallel, each result stored at
/// its kernel's index, so the order of the threads does not matter), or
/// analytic.
void Search::countTiles() {
  std::vector<size_t> toCount;
  for (const std::vector<Candidate> &candidates : candidatesOf)
    for (const Candidate &candidate : candidates)
      if (candidate.rejectionClass.empty())
        for (size_t k : candidate.kernels)
          if (isGemm(kernels[k].kernel) && !counted[k]) {
            counted[k] = true;
            toCount.push_back(k);
          }
  std::sort(toCount.begin(), toCount.end());
  for (size_t k : toCount)
    tileCounts[k] = countTile(shapeOf(spec, kernels[k].kernel));
  if (!options.countTile || toCount.empty())
    return;
  std::atomic<size_t> next{0}, done{0};
  std::mutex progressMutex;
  auto worker = [&] {
    for (size_t i = next++; i < toCount.size(); i = next++) {
      const size_t k = toCount[i];
      const TableKernel &kernel = kernels[k].kernel;
      TileCounts counts;
      std::string error;
      if (options.countTile(stageSpecOf(spec, kernel), shapeOf(spec, kernel),
                            counts, error))
        tileCounts[k] = counts;
      else
        countError[k] = error.empty() ? "not counted" : error;
      const size_t finished = ++done;
      if (options.countProgress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        options.countProgress(finished, toCount.size());
      }
    }
  };
  unsigned threads =
      options.jobs ? options.jobs : std::thread::hardware_concurrency();
  threads = std::max(1u, std::min<unsigned>(threads, toCount.size()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &thread : pool)
    thread.join();
  for (size_t k : toCount)
    ++(countError[k].empty() ? countedKernels : countFallbacks);
}

/// The model's time of every surviving candidate at every key of its
/// selection (computed once per candidate).
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
                               target::defaultTarget(), &tileCounts[k])
                      .totalUs;
          else
            us += parameters.launchOverheadUs;
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
  for (const char *stage : {"w13", "w2", "combine"}) {
    const TableKernel *kernel = nullptr;
    for (size_t k : candidate.kernels)
      if (kernels[k].kernel.stage == stage &&
          (isGemm(kernels[k].kernel) || kernels[k].kernel.stage == "combine"))
        kernel = &kernels[k].kernel;
    if (!kernel)
      continue;
    for (const KnobChoice &choice : kKnobChoices) {
      if (choice.stage ? std::string(choice.stage) != stage
                       : std::string(stage) == "combine")
        continue;
      if ((choice.onlyWith && !kernel->knobs.count(choice.onlyWith)) ||
          (choice.notWith && kernel->knobs.count(choice.notWith)))
        continue;
      if (knobOr(*kernel, choice.knob, choice.defaultValue) == choice.value)
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
    r.stage = "fused";
    r.knob = choice.knob;
    r.value = choice.value;
    r.tag = choice.tag;
    r.onlyStage = choice.onlyStage ? choice.onlyStage : "";
    r.compactOnly = choice.compactOnly;
    // Only where it changes some fused kernel.
    bool changes = false;
    for (size_t k : candidate.kernels) {
      const TableKernel &kernel = kernels[k].kernel;
      changes |= refinementApplies(r, kernel) &&
                 knobOr(kernel, choice.knob, choice.defaultValue) != choice.value;
    }
    if (!changes)
      continue;
    Tiling tiling = candidate.tiling;
    tiling.refinements.push_back(r);
    out.push_back(tiling);
  }
  return out;
}

std::string selectionKey(const TableSelection &selection) {
  return selection.network + " ep" + std::to_string(selection.ep) + " ws" +
         std::to_string(selection.workspace);
}

/// Times, on the device behind TuneOptions::timeCandidates, the model's
/// best TuneOptions::timedPerKey candidates at every key (and the model's
/// choice), then chooses the fastest measured one at every key it timed.
CompileStatus timeOnDevice(Search &search,
                           std::vector<std::vector<size_t>> &winnerOf,
                           DeviceTimings &timings, TuneResult &result,
                           std::string &error) {
  const TuningTable &spec = search.spec;
  const TuneOptions &options = search.options;
  // Which candidates to time at which keys.
  std::vector<std::map<size_t, std::vector<size_t>>> keysToTime(
      spec.selections.size()); // candidate -> key indices
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const std::vector<Candidate> &candidates = search.candidatesOf[s];
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      // Only the model's handshake group can share the selection.
      const std::string handshake = search.handshakeOf(candidates[winnerOf[s][key]]);
      std::vector<size_t> order;
      for (size_t c = 0; c < candidates.size(); ++c)
        if (candidates[c].rejectionClass.empty() &&
            search.handshakeOf(candidates[c]) == handshake)
          order.push_back(c);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return candidates[a].predictedUs[key] < candidates[b].predictedUs[key];
      });
      order.resize(std::min(order.size(), std::max<size_t>(1, options.timedPerKey)));
      const size_t winner = winnerOf[s][key];
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
      for (size_t c : order)
        keysToTime[s][c].push_back(key);
    }
  }
  // One table holding each timed candidate alone (docs/tuning.md, "Timing
  // on a device").
  std::ostringstream table;
  table << "moec-table 1\n# Candidates of " << search.specPath
        << " to time, one selection each (moec tune --device).\n";
  for (const TableProblem &problem : spec.problems)
    table << problemLine(problem) << "\n";
  std::map<std::string, std::string> kernelNames; // name -> identity
  std::ostringstream configs, selections;
  std::vector<TimedConfig> timed;
  std::vector<std::pair<size_t, size_t>> timedCandidate; // (s, c)
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
      timed.push_back(entry);
      timedCandidate.push_back({s, c});
    }
  }
  table << "\n" << configs.str() << selections.str();

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
    out << table.str();
    if (!out.flush()) {
      error = tablePath + ": cannot write";
      cleanUp();
      return CompileStatus::CheckFailed;
    }
  }
  CompileOptions compileOptions;
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
  std::string reason;
  const bool timedAny = options.timeCandidates(bundlePath, timed, timings, reason);
  cleanUp();
  if (!timedAny) {
    result.timingUnavailable = reason.empty() ? "the device did not time" : reason;
    timings = DeviceTimings();
    return CompileStatus::Ok;
  }
  if (timings.us.size() != timed.size()) {
    error = "the device timer returned " + std::to_string(timings.us.size()) +
            " configurations' times for " + std::to_string(timed.size());
    return CompileStatus::CheckFailed;
  }
  result.timingNotes = timings.skipped;
  result.timedConfigs = timed.size();
  for (size_t t = 0; t < timed.size(); ++t) {
    auto [s, c] = timedCandidate[t];
    Candidate &candidate = search.candidatesOf[s][c];
    candidate.measuredUs.assign(search.keysOf[s].size(), -1);
    const std::vector<size_t> &keys = keysToTime[s][c];
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
  // The fastest measured candidate at every key it was timed at.
  std::ostringstream csv;
  csv << "selection,m,candidate,predicted_us,measured_us,chosen\n";
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    std::vector<Candidate> &candidates = search.candidatesOf[s];
    const size_t keys = search.keysOf[s].size();
    // The fastest measured candidate of one handshake group at a key.
    auto fastestOf = [&](const std::string &handshake, size_t key) {
      size_t best = SIZE_MAX;
      for (size_t c = 0; c < candidates.size(); ++c) {
        const std::vector<double> &measured = candidates[c].measuredUs;
        if (!measured.empty() && measured[key] >= 0 &&
            search.handshakeOf(candidates[c]) == handshake &&
            (best == SIZE_MAX || measured[key] < candidates[best].measuredUs[key]))
          best = c;
      }
      return best;
    };
    // The group measured fastest summed over every key (all of its keys
    // timed), ties to the earlier; none: each key keeps the model's group.
    std::string group;
    bool grouped = false;
    double groupUs = 0;
    for (const Search::GroupChoice &choice :
         search.groupChoices(s, options.space.tieMargin)) {
      double total = 0;
      bool complete = true;
      for (size_t key = 0; key < keys && complete; ++key) {
        const size_t best = fastestOf(choice.handshake, key);
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
    for (size_t key = 0; key < keys; ++key) {
      const size_t best = fastestOf(
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
  return CompileStatus::Ok;
}

/// One line per candidate of every selection (docs/tuning.md, "Output").
void writeCsv(const Search &search,
              const std::vector<std::vector<size_t>> &winnerOf,
              TuneResult &result) {
  const TuningTable &spec = search.spec;
  std::ostringstream csv;
  csv << "selection,candidate,tile_m,w13_n,w2_n,waves,b_direct,refinement,"
         "parent";
  for (const char *stage : {"w13", "w2"})
    csv << "," << stage << "_vgpr," << stage << "_agpr," << stage << "_sgpr,"
        << stage << "_lds_bytes," << stage << "_vgpr_spill," << stage
        << "_sgpr_spill," << stage << "_workgroups_per_cu";
  for (const char *stage : {"w13", "w2"})
    csv << "," << stage << "_counts," << stage << "_global_bytes_read,"
        << stage << "_global_bytes_written," << stage << "_lds_bytes_read,"
        << stage << "_lds_bytes_written," << stage << "_lds_bank_conflicts,"
        << stage << "_scaled_mfmas," << stage << "_other_instructions";
  csv << ",rejected,reason,keys_won,predicted_us_first_key,"
         "predicted_us_last_key,count_fallback\n";
  auto clean = [](std::string text) {
    std::replace(text.begin(), text.end(), ',', ';');
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  };
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    const std::vector<Candidate> &candidates = search.candidatesOf[s];
    TuneClassSummary summary;
    summary.key = selectionKey(selection);
    summary.keys = search.keysOf[s].size();
    summary.candidates = candidates.size();
    std::vector<size_t> keysWon(candidates.size(), 0);
    for (size_t c : winnerOf[s])
      ++keysWon[c];
    for (const Candidate &candidate : candidates) {
      if (candidate.rejectionClass.empty())
        continue;
      ++summary.rejected;
      ++summary.rejections[candidate.rejectionClass];
    }
    for (size_t c = 0; c < candidates.size(); ++c) {
      const Candidate &candidate = candidates[c];
      summary.refinements += candidate.parent != SIZE_MAX;
      summary.selectionWide +=
          !candidate.tiling.refinements.empty() &&
          candidate.tiling.refinements.back().stage == "fused";
      summary.distinctConfigs += keysWon[c] > 0;
      const Tiling &t = candidate.tiling;
      csv << summary.key << "," << candidate.configName << "," << t.m << ","
          << t.w13N << "," << t.w2N << "," << t.waves << ","
          << (t.bDirect ? 1 : 0) << "," << t.refinementText() << ","
          << (candidate.parent == SIZE_MAX ? ""
                                           : candidates[candidate.parent].configName);
      auto gemmOf = [&](const char *stage) {
        size_t found = SIZE_MAX;
        for (size_t k : candidate.kernels)
          if (search.kernels[k].kernel.stage == stage &&
              isGemm(search.kernels[k].kernel))
            found = k;
        return found;
      };
      for (const char *stage : {"w13", "w2"}) {
        const size_t found = gemmOf(stage);
        if (found == SIZE_MAX || !search.compiled[found]) {
          csv << ",,,,,,,";
          continue;
        }
        const rt::KernelResources &r = search.resources[found];
        csv << "," << r.vgpr << "," << r.agpr << "," << r.sgpr << ","
            << r.ldsBytes << "," << r.vgprSpill << "," << r.sgprSpill << ","
            << target::estimateOccupancy(
                   target::defaultTarget(),
                   resourceUse(r, search.workgroupSize[found]))
                   .workgroupsPerCu;
      }
      // The counts the model ranked this candidate with (none: rejected).
      std::string fallback;
      for (const char *stage : {"w13", "w2"}) {
        const size_t found = gemmOf(stage);
        if (found == SIZE_MAX || !candidate.rejectionClass.empty()) {
          csv << ",,,,,,,,";
          continue;
        }
        const TileCounts &counts = search.tileCounts[found];
        csv << "," << counts.source;
        for (double value :
             {counts.globalBytesRead, counts.globalBytesWritten,
              counts.ldsBytesRead, counts.ldsBytesWritten,
              counts.ldsBankConflicts, counts.scaledMfmas,
              counts.otherInstructions})
          csv << "," << formatCount(value);
        if (!search.countError[found].empty())
          fallback += std::string(fallback.empty() ? "" : " ") + stage + ": " +
                      search.countError[found];
      }
      csv << "," << (candidate.rejectionClass.empty() ? "no" : "yes") << ","
          << (candidate.rejectionClass.empty()
                  ? ""
                  : candidate.rejectionClass + ": " + clean(candidate.rejection))
          << "," << keysWon[c] << ","
          << (candidate.predictedUs.empty()
                  ? ""
                  : formatUs(candidate.predictedUs.front()))
          << ","
          << (candidate.predictedUs.empty()
                  ? ""
                  : formatUs(candidate.predictedUs.back()))
          << "," << clean(fallback) << "\n";
    }
    result.classes.push_back(std::move(summary));
  }
  result.csv = csv.str();
}

/// The table: the winners' configurations (one per kernel list) and kernels
/// (one per identity), in name order, and one row per key.
CompileStatus writeTable(const Search &search,
                         const std::vector<std::vector<size_t>> &winnerOf,
                         const DeviceTimings &timings, TuneResult &result,
                         std::string &error) {
  const TuningTable &spec = search.spec;
  std::map<std::string, std::string> configOfKernels; // kernel list -> name
  std::map<std::string, std::vector<std::string>> configs; // name -> kernels
  std::map<std::string, std::string> kernelName;           // identity -> name
  std::map<std::string, const TableKernel *> kernelLines;  // name -> kernel
  std::vector<std::vector<std::string>> rowConfig(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s)
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      std::string list;
      for (size_t k : candidate.kernels)
        list += search.kernels[k].identity + "\n";
      auto [it, added] = configOfKernels.emplace(list, candidate.configName);
      if (added) {
        std::vector<std::string> names;
        for (size_t k : candidate.kernels) {
          const CandidateKernel &kernel = search.kernels[k];
          auto [named, fresh] =
              kernelName.emplace(kernel.identity, kernel.kernel.name);
          if (fresh) {
            // Two different kernels under one name would make the table
            // name the wrong one: a naming bug of the search, refused.
            auto [line, unique] =
                kernelLines.emplace(named->second, &kernel.kernel);
            if (!unique) {
              error = search.specPath + ": two different candidate kernels "
                                        "are both named '" + named->second + "'";
              return CompileStatus::CheckFailed;
            }
          }
          names.push_back(named->second);
        }
        configs[candidate.configName] = names;
      }
      rowConfig[s].push_back(it->second);
    }
  result.distinctConfigs = configs.size();

  const std::string &specPath = search.specPath;
  const bool measured = !timings.device.empty();
  std::ostringstream out;
  out << "moec-table 1\n"
      << "# Generated by `moec tune " << specPath.substr(specPath.rfind('/') + 1)
      << "` (scripts/regenerate-tables.sh); edit the spec, not this file.\n";
  if (measured)
    out << "# Rows are measured on " << timings.device << " (" << timings.method
        << ", " << timings.date << ") among the cost model's best\n"
        << "# candidates where the device timed them, and ranked by the cost "
           "model " << kCostModelName << " elsewhere\n# (docs/tuning.md).\n\n";
  else
    out << "# Every row is ranked by the cost model " << kCostModelName
        << " (docs/cost-model.md) among\n"
        << "# the candidates of the search space that passed the resource gate\n"
        << "# (docs/tuning.md); none is measured on gfx950 hardware.\n\n";
  for (const TableProblem &problem : spec.problems)
    out << problemLine(problem) << "\n";
  out << "\n";
  for (const auto &[name, kernel] : kernelLines) {
    TableKernel line = *kernel;
    line.name = name;
    out << kernelLine(line) << "\n";
  }
  out << "\n";
  std::set<std::string> measuredConfigs;
  for (size_t s = 0; s < spec.selections.size(); ++s)
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      if (!candidate.measuredUs.empty() && candidate.measuredUs[key] >= 0)
        measuredConfigs.insert(rowConfig[s][key]);
    }
  for (const auto &[name, list] : configs) {
    out << "config " << name << " kernels=";
    for (size_t i = 0; i < list.size(); ++i)
      out << (i ? "," : "") << list[i];
    out << " provenance="
        << (measuredConfigs.count(name) ? "measured" : "model-ranked") << "\n";
  }
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    out << "\nselect network=" << selection.network
        << " family=" << selection.family << " ep=" << selection.ep
        << " workspace=" << selection.workspace
        << " transport=" << selection.transport
        << " above_max=" << selection.aboveMax << "\n";
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      out << "row m=" << search.keysOf[s][key] << " config=" << rowConfig[s][key];
      if (!candidate.measuredUs.empty() && candidate.measuredUs[key] >= 0) {
        out << " provenance=measured device=" << timings.device
            << " method=" << timings.method << " date=" << timings.date
            << " measured_us=" << formatUs(candidate.measuredUs[key]);
        ++result.measuredRows;
      } else {
        out << " provenance=model-ranked";
      }
      out << " model=" << kCostModelName
          << " predicted_us=" << formatUs(candidate.predictedUs[key]) << "\n";
    }
    result.rows += search.keysOf[s].size();
  }
  result.table = out.str();
  return CompileStatus::Ok;
}

} // namespace

CompileStatus tuneSpec(const TuningTable &spec, const std::string &specPath,
                       const TuneOptions &options, TuneResult &result,
                       std::string &error) {
  result = TuneResult();
  Search search(spec, specPath, options);
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
