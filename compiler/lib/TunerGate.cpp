//===- TunerGate.cpp - building, compiling and gating candidates ---------===//
///
/// \file
/// The resource gate (docs/tuning.md): every new kernel of a round is
/// built as a stage op (the dialect refuses illegal knobs), compiled, and
/// refused where the chip cannot run it (spills, scratch, LDS overflow, no
/// occupancy, a persistent grid beyond the resident-workgroup budget); the
/// survivors' GEMM tiles are counted for the model.
///
//===----------------------------------------------------------------------===//

#include "TunerInternal.h"

#include "moec/Compiler/Registration.h"
#include "moec/target/occupancy.h"
#include "moec/target/target_info.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

using namespace mlir;

namespace moec {
namespace tuner {
namespace {

/// Why the gate refuses a compiled kernel, as (class, detail); empty class:
/// it passes.
std::pair<std::string, std::string> gateOf(const CompiledKernel &compiled,
                                           const std::string &error,
                                           const TableKernel &kernel,
                                           const target::TargetInfo &chip) {
  if (!error.empty()) {
    if (error.find(" spills ") != std::string::npos)
      return {"spills", error.substr(error.find("spills"))};
    if (error.find("scratch") != std::string::npos)
      return {"scratch", error.substr(error.find("uses"))};
    if (error.find("bytes of LDS") != std::string::npos ||
        error.find("local memory") != std::string::npos)
      return {"lds-overflow", "LDS " + std::to_string(compiled.resources.ldsBytes) +
                                  " bytes over the chip's " +
                                  std::to_string(chip.ldsBytesPerCu)};
    return {"compile-failed", error};
  }
  const target::OccupancyEstimate occupancy = target::estimateOccupancy(
      chip, resourceUse(compiled.resources, compiled.abi.workgroupSize));
  if (occupancy.workgroupsPerCu == 0)
    return {"no-occupancy", occupancy.problem ? occupancy.problem : "cannot launch"};
  // A persistent, handshaking grid must be resident at once on every rank.
  if (kernel.knobs.count("workgroups")) {
    const int64_t grid = knobInt(kernel, "workgroups", 0);
    const int64_t budget =
        int64_t(occupancy.workgroupsPerCu) * chip.computeUnits;
    if (grid > budget)
      return {"grid-over-resident-budget",
              "workgroups=" + std::to_string(grid) + " > " +
                  std::to_string(occupancy.workgroupsPerCu) + " per CU x " +
                  std::to_string(chip.computeUnits) +
                  " CUs = " + std::to_string(budget)};
  }
  return {"", ""};
}

} // namespace

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
    compileOptions.target = &target;
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
      candidate.rejection =
          std::string(abi::stageName(kernel.stage)) + ": " + invalid[k];
      return;
    }
    CompiledKernel view;
    view.resources = resources[k];
    view.abi.workgroupSize = workgroupSize[k];
    auto [cls, detail] = gateOf(view, compileError[k], kernel, target.chip);
    if (!cls.empty()) {
      candidate.rejectionClass = cls;
      candidate.rejection =
          std::string(abi::stageName(kernel.stage)) + ": " + detail;
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

} // namespace tuner
} // namespace moec
