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
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

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

/// One candidate tiling of a template configuration.
struct Tiling {
  int64_t m = 0, w13N = 0, w2N = 0, waves = 0;
  bool bDirect = false;      ///< tile.b_direct on both GEMM stages
  bool fromTemplate = false; ///< the template's own kernels, unchanged
  std::string tag() const {
    if (fromTemplate)
      return "";
    return "m" + std::to_string(m) + "_n" + std::to_string(w13N) + "x" +
           std::to_string(w2N) + "_w" + std::to_string(waves) +
           (bDirect ? "_bdir" : "");
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
  size_t keysWon = 0;
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

CompileStatus tuneSpec(const TuningTable &spec, const std::string &specPath,
                       const TuneOptions &options, TuneResult &result,
                       std::string &error) {
  result = TuneResult();
  // Candidates per selection; kernels deduplicated across all of them.
  std::vector<CandidateKernel> kernels;
  std::map<std::string, size_t> kernelByIdentity;
  std::vector<std::vector<Candidate>> candidatesOf(spec.selections.size());
  std::vector<std::vector<int64_t>> keysOf(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    const TableConfig *base = spec.findConfig(selection.rows.front().config);
    keysOf[s] = selectionKeys(spec, selection);
    if (keysOf[s].empty()) {
      error = selection.where.file + ":" + std::to_string(selection.where.line) +
              ": field 'workspace': no keys within the class";
      return CompileStatus::BadInput;
    }
    std::vector<Tiling> tilings;
    if (searchable(spec, *base)) {
      for (int64_t m : options.space.tileM)
        for (int64_t w13N : options.space.w13N)
          for (int64_t w2N : options.space.w2N)
            for (int64_t waves : options.space.waves)
              for (bool bDirect : options.space.bDirect)
                tilings.push_back({m, w13N, w2N, waves, bDirect, false});
    } else {
      Tiling own;
      own.fromTemplate = true;
      tilings.push_back(own);
    }
    for (const Tiling &tiling : tilings) {
      Candidate candidate;
      candidate.tiling = tiling;
      candidate.configName =
          tiling.fromTemplate ? base->name : base->name + "_" + tiling.tag();
      for (const std::string &name : base->kernels) {
        TableKernel kernel = tiledKernel(*spec.findKernel(name), tiling);
        const std::string identity = identityOf(kernel);
        auto [it, added] = kernelByIdentity.emplace(identity, kernels.size());
        if (added)
          kernels.push_back({kernel, identity});
        candidate.kernels.push_back(it->second);
      }
      candidatesOf[s].push_back(std::move(candidate));
    }
  }

  // Build every kernel once: the dialect's verifiers refuse illegal knob
  // combinations (recorded as the candidate's reason).
  std::vector<std::string> invalid(kernels.size());
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
    for (size_t k = 0; k < kernels.size(); ++k) {
      StageDescription description;
      std::string buildError;
      diagnostic.clear();
      Operation *op = buildStageOp(builder, stageSpecOf(spec, kernels[k].kernel),
                                   description, buildError);
      if (!op)
        invalid[k] = buildError.empty() ? diagnostic : buildError;
      else
        op->erase();
    }
  }

  // Compile the valid ones in parallel through the compile cache.
  TuningTable batch;
  batch.path = specPath;
  batch.text = spec.text;
  batch.problems = spec.problems;
  std::vector<size_t> batchIndex(kernels.size(), SIZE_MAX);
  for (size_t k = 0; k < kernels.size(); ++k)
    if (invalid[k].empty()) {
      TableKernel kernel = kernels[k].kernel;
      kernel.name = "candidate" + std::to_string(k);
      batchIndex[k] = batch.kernels.size();
      batch.kernels.push_back(kernel);
    }
  CompileOptions compileOptions;
  compileOptions.jobs = options.jobs;
  compileOptions.cacheDirectory = options.cacheDirectory;
  compileOptions.cacheMaxBytes = options.cacheMaxBytes;
  compileOptions.progress = options.progress;
  CompiledTable compiled;
  const CompileStatus status = compileTable(batch, compileOptions, compiled, error);
  if (status == CompileStatus::BadInput ||
      compiled.kernelErrors.size() != compiled.kernels.size())
    return status == CompileStatus::Ok ? CompileStatus::CheckFailed : status;
  error.clear();
  result.compiledKernels = compiled.kernels.size();
  auto compiledOf = [&](size_t k) -> const CompiledKernel & {
    return compiled.kernels[compiled.kernelIndex.at(
        batch.kernels[batchIndex[k]].name)];
  };
  auto errorOf = [&](size_t k) -> const std::string & {
    return compiled.kernelErrors[compiled.kernelIndex.at(
        batch.kernels[batchIndex[k]].name)];
  };

  // Gate: a candidate is rejected for its first kernel the chip refuses.
  for (std::vector<Candidate> &candidates : candidatesOf)
    for (Candidate &candidate : candidates)
      for (size_t k : candidate.kernels) {
        const TableKernel &kernel = kernels[k].kernel;
        if (!invalid[k].empty()) {
          candidate.rejectionClass = "invalid-knobs";
          candidate.rejection = kernel.stage + ": " + invalid[k];
          break;
        }
        auto [cls, detail] = gateOf(compiledOf(k), errorOf(k), kernel);
        if (!cls.empty()) {
          candidate.rejectionClass = cls;
          candidate.rejection = kernel.stage + ": " + detail;
          break;
        }
      }

  // The model's per-tile inputs of every GEMM kernel a surviving candidate
  // launches: counted once per kernel (in parallel, each result stored at
  // its kernel's index, so the order of the threads does not matter), or
  // analytic.
  std::vector<TileCounts> tileCounts(kernels.size());
  std::vector<std::string> countErrors(kernels.size());
  {
    std::vector<size_t> toCount;
    std::vector<bool> needed(kernels.size(), false);
    for (const std::vector<Candidate> &candidates : candidatesOf)
      for (const Candidate &candidate : candidates)
        if (candidate.rejectionClass.empty())
          for (size_t k : candidate.kernels)
            if (isGemm(kernels[k].kernel) && !needed[k]) {
              needed[k] = true;
              toCount.push_back(k);
            }
    std::sort(toCount.begin(), toCount.end());
    for (size_t k : toCount)
      tileCounts[k] = countTile(shapeOf(spec, kernels[k].kernel));
    if (options.countTile && !toCount.empty()) {
      std::atomic<size_t> next{0}, done{0};
      std::mutex progressMutex;
      auto worker = [&] {
        for (size_t i = next++; i < toCount.size(); i = next++) {
          const size_t k = toCount[i];
          const TableKernel &kernel = kernels[k].kernel;
          TileCounts counts;
          std::string countError;
          if (options.countTile(stageSpecOf(spec, kernel), shapeOf(spec, kernel),
                                counts, countError))
            tileCounts[k] = counts;
          else
            countErrors[k] = countError.empty() ? "not counted" : countError;
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
        ++(countErrors[k].empty() ? result.countedKernels
                                  : result.countFallbacks);
    }
  }

  // Rank, choose.
  CostModelParameters parameters;
  std::ostringstream csv;
  csv << "selection,candidate,tile_m,w13_n,w2_n,waves,b_direct";
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

  std::vector<std::vector<size_t>> winnerOf(spec.selections.size());
  std::vector<std::vector<double>> winnerUs(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    TuneClassSummary summary;
    summary.key = selection.network + " ep" + std::to_string(selection.ep) +
                  " ws" + std::to_string(selection.workspace);
    summary.keys = keysOf[s].size();
    std::vector<Candidate> &candidates = candidatesOf[s];
    summary.candidates = candidates.size();
    for (Candidate &candidate : candidates) {
      if (!candidate.rejectionClass.empty()) {
        ++summary.rejected;
        ++summary.rejections[candidate.rejectionClass];
        continue;
      }
      for (int64_t m : keysOf[s]) {
        double us = 0;
        for (size_t k : candidate.kernels) {
          const TableKernel &kernel = kernels[k].kernel;
          if (isGemm(kernel))
            us += predictStage(shapeOf(spec, kernel), compiledOf(k).resources,
                               compiledOf(k).abi.workgroupSize, m, parameters,
                               target::defaultTarget(), &tileCounts[k])
                      .totalUs;
          else
            us += parameters.launchOverheadUs;
        }
        candidate.predictedUs.push_back(us);
      }
    }
    // The fastest survivor at every key; ties keep the earlier candidate.
    for (size_t key = 0; key < keysOf[s].size(); ++key) {
      size_t best = SIZE_MAX;
      for (size_t c = 0; c < candidates.size(); ++c)
        if (candidates[c].rejectionClass.empty() &&
            (best == SIZE_MAX ||
             candidates[c].predictedUs[key] < candidates[best].predictedUs[key]))
          best = c;
      if (best == SIZE_MAX) {
        error = selection.where.file + ":" + std::to_string(selection.where.line) +
                ": every candidate of " + summary.key + " was rejected";
        return CompileStatus::CheckFailed;
      }
      ++candidates[best].keysWon;
      winnerOf[s].push_back(best);
      winnerUs[s].push_back(candidates[best].predictedUs[key]);
    }
    std::set<size_t> distinct(winnerOf[s].begin(), winnerOf[s].end());
    summary.distinctConfigs = distinct.size();
    for (const Candidate &candidate : candidates) {
      const Tiling &t = candidate.tiling;
      csv << summary.key << "," << candidate.configName << "," << t.m << ","
          << t.w13N << "," << t.w2N << "," << t.waves << ","
          << (t.bDirect ? 1 : 0);
      auto gemmOf = [&](const char *stage) {
        size_t found = SIZE_MAX;
        for (size_t k : candidate.kernels)
          if (kernels[k].kernel.stage == stage && isGemm(kernels[k].kernel))
            found = k;
        return found;
      };
      for (const char *stage : {"w13", "w2"}) {
        const size_t found = gemmOf(stage);
        if (found == SIZE_MAX || batchIndex[found] == SIZE_MAX) {
          csv << ",,,,,,,";
          continue;
        }
        const rt::KernelResources &r = compiledOf(found).resources;
        csv << "," << r.vgpr << "," << r.agpr << "," << r.sgpr << ","
            << r.ldsBytes << "," << r.vgprSpill << "," << r.sgprSpill << ","
            << target::estimateOccupancy(
                   target::defaultTarget(),
                   resourceUse(r, compiledOf(found).abi.workgroupSize))
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
        const TileCounts &c = tileCounts[found];
        csv << "," << c.source;
        for (double value :
             {c.globalBytesRead, c.globalBytesWritten, c.ldsBytesRead,
              c.ldsBytesWritten, c.ldsBankConflicts, c.scaledMfmas,
              c.otherInstructions})
          csv << "," << formatCount(value);
        if (!countErrors[found].empty())
          fallback += std::string(fallback.empty() ? "" : " ") + stage + ": " +
                      countErrors[found];
      }
      std::replace(fallback.begin(), fallback.end(), ',', ';');
      std::replace(fallback.begin(), fallback.end(), '\n', ' ');
      std::string reason = candidate.rejection;
      std::replace(reason.begin(), reason.end(), ',', ';');
      std::replace(reason.begin(), reason.end(), '\n', ' ');
      csv << "," << (candidate.rejectionClass.empty() ? "no" : "yes") << ","
          << (candidate.rejectionClass.empty()
                  ? ""
                  : candidate.rejectionClass + ": " + reason)
          << "," << candidate.keysWon << ","
          << (candidate.predictedUs.empty() ? ""
                                            : formatUs(candidate.predictedUs.front()))
          << ","
          << (candidate.predictedUs.empty() ? ""
                                            : formatUs(candidate.predictedUs.back()))
          << "," << fallback << "\n";
    }
    result.classes.push_back(std::move(summary));
  }

  // The table: the winners' configurations (one per kernel list) and
  // kernels (one per identity), in name order.
  std::map<std::string, std::string> configOfKernels; // kernel list -> name
  std::map<std::string, std::vector<std::string>> configs; // name -> kernels
  std::map<std::string, std::string> kernelName;           // identity -> name
  std::map<std::string, const TableKernel *> kernelLines;  // name -> kernel
  std::vector<std::vector<std::string>> rowConfig(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s)
    for (size_t key = 0; key < keysOf[s].size(); ++key) {
      const Candidate &candidate = candidatesOf[s][winnerOf[s][key]];
      std::string list;
      for (size_t k : candidate.kernels)
        list += kernels[k].identity + "\n";
      auto [it, added] = configOfKernels.emplace(list, candidate.configName);
      if (added) {
        std::vector<std::string> names;
        for (size_t k : candidate.kernels) {
          auto [named, fresh] =
              kernelName.emplace(kernels[k].identity, kernels[k].kernel.name);
          if (fresh) {
            // Two different kernels under one name would make the table
            // name the wrong one: a naming bug of the search, refused.
            auto [line, unique] =
                kernelLines.emplace(named->second, &kernels[k].kernel);
            if (!unique) {
              error = specPath + ": two different candidate kernels are "
                                 "both named '" + named->second + "'";
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

  std::ostringstream out;
  out << "moec-table 1\n"
      << "# Generated by `moec tune " << specPath.substr(specPath.rfind('/') + 1)
      << "` (scripts/regenerate-tables.sh); edit the spec, not this file.\n"
      << "# Every row is ranked by the cost model " << kCostModelName
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
  for (const auto &[name, list] : configs) {
    out << "config " << name << " kernels=";
    for (size_t i = 0; i < list.size(); ++i)
      out << (i ? "," : "") << list[i];
    out << " provenance=model-ranked\n";
  }
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    out << "\nselect network=" << selection.network
        << " family=" << selection.family << " ep=" << selection.ep
        << " workspace=" << selection.workspace
        << " transport=" << selection.transport
        << " above_max=" << selection.aboveMax << "\n";
    for (size_t key = 0; key < keysOf[s].size(); ++key)
      out << "row m=" << keysOf[s][key] << " config=" << rowConfig[s][key]
          << " provenance=model-ranked model=" << kCostModelName
          << " predicted_us=" << formatUs(winnerUs[s][key]) << "\n";
    result.rows += keysOf[s].size();
  }
  result.table = out.str();
  result.csv = csv.str();
  return CompileStatus::Ok;
}

} // namespace moec
