//===- EmulatedTileCounter.cpp - the cost model's inputs, counted ---------===//
//
// docs/cost-model.md, "Per-tile counts": one workgroup tile of a GEMM
// kernel, with its own knobs at the real K, run on the emulator.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/EmulatedTileCounter.h"

#include "moec/Harness/StageHarness.h"
#include "moec/Harness/StageKernel.h"

#include "mlir/IR/MLIRContext.h"

namespace moec::harness {

StageSpec oneTileSpec(const StageSpec &spec) {
  StageSpec one = spec;
  static const char *const kDropped[] = {
      // The peer transport of a fused stage: its work list and exchange
      // (with the payload the exchange's format: the counted tile stores
      // BF16 rows either way).
      "transport", "capacity", "max_tokens", "workgroups", "dispatch_cus",
      "dispatch", "work_shards", "plan_cus", "chunk_routes", "payload",
      // The persistent grid: one tile is one workgroup.
      "persist_cu", "persist_strided", "persist_skew", "residency_cap",
      // With one expert the shared FP8 expert would be the only one; the
      // routed MXFP4 tiles are the ones counted.
      "shared_fp8_expert"};
  for (const char *field : kDropped)
    one.fields.erase(field);
  const int64_t tileN = emu::specInteger(spec, "n", 64);
  one.fields["experts"] = "1";
  one.fields["top_k"] = "1";
  one.fields["ep"] = "1";
  // N is one tile; K (W13: hidden, W2: intermediate) stays the problem's.
  one.fields[spec.stage == abi::Stage::W13 ? "intermediate" : "hidden"] =
      std::to_string(tileN);
  one.where = SourceLine();
  return one;
}

EmulatedTileCounter::EmulatedTileCounter() = default;
EmulatedTileCounter::~EmulatedTileCounter() = default;

mlir::MLIRContext &EmulatedTileCounter::contextOfThisThread() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<mlir::MLIRContext> &context =
      contexts_[std::this_thread::get_id()];
  if (!context) {
    // The counting threads are the parallelism; no pool per context.
    context = std::make_unique<mlir::MLIRContext>(
        mlir::MLIRContext::Threading::DISABLED);
    emu::prepareContext(*context);
  }
  return *context;
}

namespace {

/// Runs one tile of `spec` and reads its counters.
bool countOnce(mlir::MLIRContext &context, const StageSpec &spec,
               TileCounts &counts, std::string &error) {
  emu::BuiltKernel kernel;
  if (mlir::failed(emu::buildKernelIR(context, spec, kernel, error)))
    return false;
  std::unique_ptr<emu::StageHarness> harness =
      emu::StageHarness::create(kernel, error);
  if (!harness)
    return false;
  // Tile M tokens routed to the one expert: one M tile with every row valid.
  emu::DataOptions options;
  options.seed = kTileCountSeed;
  options.tokens = harness->shape().tileM;
  options.invalidFraction = 0;
  emu::LayerData data;
  if (ref::Status status = harness->generate(options, data, /*rank=*/0);
      !status) {
    error = status.message();
    return false;
  }
  emu::LaunchConfig launch;
  launch.threads = 1;
  emu::StageOutcome outcome;
  if (mlir::failed(harness->run(data, /*rank=*/0, launch, outcome, error)))
    return false;
  const emu::RunStats &stats = outcome.run.stats;
  if (!outcome.launched || stats.workgroups != 1) {
    error = "the one-tile problem launched " +
            std::to_string(stats.workgroups) + " workgroups, not 1";
    return false;
  }
  if (outcome.run.totalFindings() != 0) {
    error = "the one-tile run reported " +
            std::to_string(outcome.run.totalFindings()) + " findings: " +
            (outcome.run.findings.empty() ? std::string()
                                          : outcome.run.findings.front().str());
    return false;
  }
  counts = TileCounts();
  counts.source = "emulator";
  // Distinct lines: what the tile moves through HBM when the lanes' repeated
  // reads of the same bytes (scales, fragments shared by waves) hit in cache.
  counts.globalBytesRead = double(stats.globalLinesRead) * 64;
  counts.globalBytesWritten = double(stats.globalLinesWritten) * 64;
  counts.ldsBytesRead = double(stats.ldsBytesRead);
  counts.ldsBytesWritten = double(stats.ldsBytesWritten);
  counts.ldsBankConflicts = double(stats.ldsBankConflicts);
  counts.scaledMfmas = double(stats.scaledMfmas);
  counts.otherInstructions = double(stats.otherInstructions);
  return true;
}

std::string keyOf(const StageSpec &spec) {
  std::string key = abi::stageName(spec.stage);
  for (const auto &[name, value] : spec.fields)
    key += " " + name + "=" + value;
  return key;
}

} // namespace

bool EmulatedTileCounter::count(const StageSpec &spec, TileCounts &counts,
                                std::string &error) {
  const StageSpec one = oneTileSpec(spec);
  const std::string key = keyOf(one);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      counts = it->second.first;
      error = it->second.second;
      return error.empty();
    }
  }
  TileCounts counted;
  std::string countError;
  if (!countOnce(contextOfThisThread(), one, counted, countError) &&
      countError.empty())
    countError = "not counted";
  std::lock_guard<std::mutex> lock(mutex_);
  cache_.emplace(key, std::make_pair(counted, countError));
  counts = counted;
  error = countError;
  return error.empty();
}

} // namespace moec::harness
