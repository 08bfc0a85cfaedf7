//===- LayerRunner.cpp - a configuration's stages as one layer ------------===//

#include "moec/Harness/LayerRunner.h"

#include "moec/Harness/PeerHarness.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <ostream>

using namespace mlir;

namespace moec::emu {
namespace {

/// One line per kernel: "counters KERNEL: name value ...", summed over
/// ranks (and launches).
void printCounters(const KernelStatsList &kernelStats, std::ostream &out) {
  for (const auto &[name, stats] : kernelStats)
    out << "counters " << name << ": " << formatCounters(stats) << "\n";
}


const char *verdict(bool pass) { return pass ? "PASS" : "FAIL"; }

/// Builds every kernel of `kernels` into `built` (sized to match), or loads
/// it as stored when `stored` allows. Fails, reporting to `err`, when a
/// kernel does not build or load.
bool buildKernels(MLIRContext &context, const std::vector<LayerKernel> &kernels,
                  bool stored, std::vector<BuiltKernel> &built,
                  std::ostream &err) {
  built.resize(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::string error;
    const LayerKernel &kernel = kernels[i];
    if (stored && kernel.load
            ? failed(kernel.load(context, built[i], error))
            : failed(buildKernelIR(context, kernel.spec, built[i], error))) {
      err << "moec: kernel " << kernels[i].name << ": " << error << "\n";
      return false;
    }
  }
  return true;
}

/// Whether the emulator decodes every op of `kernel`; reports to `out`.
bool reportSupported(const LayerKernel &kernel, const BuiltKernel &built,
                     std::ostream &out) {
  std::string unsupported;
  if (succeeded(checkSupported(cast<gpu::GPUFuncOp>(built.func), unsupported)))
    return true;
  out << abi::stageName(kernel.spec.stage) << " " << kernel.name << ": "
      << unsupported
      << " -> FAIL\n";
  return false;
}

/// A fused MegaMoE config: stage 1, stage 2 and the peer-rows combine on
/// every rank at once, in one emulated memory.
LayerVerdict runFused(std::vector<LayerKernel> kernels,
                      const LayerOptions &options, std::ostream &out,
                      std::ostream &err) {
  int64_t tokens = options.tokens;
  if (options.small)
    tokens = std::min<int64_t>(tokens, 16);
  else
    for (LayerKernel &kernel : kernels)
      fitPeerCapacity(kernel.spec, tokens);
  MLIRContext context;
  prepareContext(context);
  std::vector<BuiltKernel> built;
  if (!buildKernels(context, kernels, /*stored=*/false, built, err))
    return LayerVerdict::BadInput;
  const BuiltKernel *stage1 = nullptr, *stage2 = nullptr, *combine = nullptr,
                    *dispatch = nullptr, *quant = nullptr;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!reportSupported(kernels[i], built[i], out))
      return LayerVerdict::Fail;
    const StageSpec &spec = kernels[i].spec;
    (specText(spec, "dispatch") == "only" ? dispatch
     : spec.stage == abi::Stage::Quant    ? quant
     : spec.stage == abi::Stage::W13      ? stage1
     : spec.stage == abi::Stage::W2       ? stage2
                                          : combine) = &built[i];
  }
  if (!stage1 || !stage2 || !combine) {
    out << "a fused config needs a w13, a w2 and a combine stage -> FAIL\n";
    return LayerVerdict::Fail;
  }
  StageShape shape;
  if (ref::Status status = parseStageShape(*stage1, shape); !status) {
    out << "fused layer: " << status.message() << " -> FAIL\n";
    return LayerVerdict::Fail;
  }
  const int64_t ep = shape.ep;
  out << "problem H " << shape.hidden << " I " << shape.intermediate << " E "
      << shape.experts << " top_k " << shape.topK << " ep " << ep
      << (options.small ? " (--small, fused, " : " (fused, ") << tokens
      << " tokens per rank, capacity " << shape.capacity << "), seed "
      << options.seed << "\n";
  PeerLayerOptions peer;
  peer.seed = options.seed;
  peer.tokensPerRank.assign(size_t(ep), tokens);
  peer.invalidFraction = options.invalidFraction;
  // Two launches on the same control buffers at --small; one at the real
  // shape, where the emulation time is the GEMMs'.
  peer.epochs = options.small ? 2 : 1;
  peer.saveDir = options.saveDir;
  PeerLayerOutcome outcome;
  std::string error;
  // A leading quant kernel runs on every rank before stage 1, which then
  // reads its FP8 rows.
  if (failed(runPeerLayer(*stage1, *stage2, *combine, peer, outcome, error,
                          dispatch, quant))) {
    out << "fused layer: " << error << " -> FAIL\n";
    return LayerVerdict::Fail;
  }
  out << outcome.summary;
  if (!options.saveDir.empty()) {
    if (ref::Status status =
            saveLayer(options.saveDir, shape, options.seed, outcome.ranks);
        !status) {
      out << "--save: " << status.message() << " -> FAIL\n";
      return LayerVerdict::Fail;
    }
  }
  if (options.counters)
    printCounters(outcome.kernelStats, out);
  out << verdict(outcome.pass) << ": " << outcome.stats.mfmas
      << " emulated MFMAs over " << ep << " ranks and " << peer.epochs
      << (peer.epochs == 1 ? " launch in " : " launches in ")
      << outcome.stats.seconds << " s\n";
  return outcome.pass ? LayerVerdict::Pass : LayerVerdict::Fail;
}

/// An unfused config: every stage through its harness, in config order.
LayerVerdict runUnfused(const std::vector<LayerKernel> &kernels,
                        const LayerOptions &options, std::ostream &out,
                        std::ostream &err) {
  MLIRContext context;
  prepareContext(context);
  std::vector<BuiltKernel> built;
  if (!buildKernels(context, kernels, /*stored=*/!options.small, built, err))
    return LayerVerdict::BadInput;
  std::vector<std::unique_ptr<StageHarness>> harnesses;
  bool allSupported = true;
  for (size_t i = 0; i < kernels.size(); ++i) {
    allSupported &= reportSupported(kernels[i], built[i], out);
    std::string error;
    std::unique_ptr<StageHarness> harness =
        StageHarness::create(built[i], error);
    if (!harness) {
      out << abi::stageName(kernels[i].spec.stage) << " " << kernels[i].name
          << ": " << error
          << " -> FAIL (not checked)\n";
      allSupported = false;
      continue;
    }
    harnesses.push_back(std::move(harness));
  }
  if (!allSupported)
    return LayerVerdict::Fail;

  // One problem for every stage; one route list serves every tiled stage.
  // Quant, sort and combine do not read I (a bundle shares them between
  // problems that differ only in I): the GEMM stages give it.
  auto readsIntermediate = [](const StageShape &s) {
    return abi::isGemmStage(s.stage);
  };
  StageShape problem = harnesses.front()->shape();
  for (const auto &harness : harnesses)
    if (readsIntermediate(harness->shape())) {
      problem.intermediate = harness->shape().intermediate;
      break;
    }
  for (const auto &harness : harnesses) {
    problem.sharedFp8 |= harness->shape().sharedFp8;
    const StageShape &s = harness->shape();
    if (s.hidden != problem.hidden ||
        (readsIntermediate(s) && s.intermediate != problem.intermediate) ||
        s.experts != problem.experts || s.topK != problem.topK ||
        s.ep != problem.ep) {
      out << abi::stageName(s.stage) << " has another problem than "
          << abi::stageName(problem.stage)
          << " -> FAIL\n";
      return LayerVerdict::Fail;
    }
    for (const auto &other : harnesses)
      if (s.tileM > 0 && other->shape().tileM > 0 &&
          s.tileM != other->shape().tileM) {
        out << abi::stageName(s.stage) << " tile m " << s.tileM
            << " differs from " << abi::stageName(other->shape().stage)
            << "'s " << other->shape().tileM
            << ": one route list cannot serve both -> FAIL\n";
        return LayerVerdict::Fail;
      }
    if (s.sharedFp8 && s.ep != 1) {
      out << "a shared FP8 expert with ep " << s.ep
          << " is not modelled by the emulator's driver -> FAIL\n";
      return LayerVerdict::Fail;
    }
  }
  const int64_t ep = problem.ep;
  if (options.ep != ep)
    out << "note: the kernels are built for ep " << ep << "\n";
  out << "problem H " << problem.hidden << " I " << problem.intermediate
      << " E " << problem.experts << " top_k " << problem.topK << " ep " << ep
      << (options.small ? " (--small)" : "") << ", " << options.tokens
      << " tokens per rank, seed " << options.seed << "\n";

  // The tokens every rank serves: each rank's experts compute the routes
  // that reach them, the combine adds every rank's rows.
  const auto start = std::chrono::steady_clock::now();
  DataOptions dataOptions;
  dataOptions.seed = options.seed;
  dataOptions.tokens = options.tokens;
  dataOptions.invalidFraction = options.invalidFraction;
  LayerData data;
  for (int64_t rank = 0; rank < ep; ++rank)
    data.rank(rank);
  // FHMoE: the batch (generated by the first stage, quant) already has the
  // shared slot the sort and combine expect.
  for (const auto &harness : harnesses)
    data.sharedLastRoute = data.sharedLastRoute || harness->shape().sharedLastRoute;
  if (!options.saveDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.saveDir, ec);
  }

  bool pass = true;
  uint64_t mfmas = 0;
  double emulatedSeconds = 0.0;
  KernelStatsList kernelStats;
  const LaunchConfig launch;
  // Runs stage `i` on `rank` (per-rank stages) and reports it; false on a
  // hard error.
  auto runStage = [&](size_t i, int64_t rank) {
    const StageHarness &harness = *harnesses[i];
    const std::string stage = abi::stageName(kernels[i].spec.stage);
    const std::string tag =
        harness.perRank() ? "rank " + std::to_string(rank) + " " : "";
    StageOutcome outcome;
    std::string error;
    if (failed(
            harness.check(data, rank, dataOptions, launch, outcome, error))) {
      out << tag << stage << ": " << error << " -> FAIL\n";
      return false;
    }
    mfmas += outcome.run.stats.mfmas;
    emulatedSeconds += outcome.run.stats.seconds;
    if (outcome.launched)
      addKernelStats(kernelStats, kernels[i].name, outcome.run.stats);
    out << tag << stage << " " << kernels[i].name << ": " << outcome.summary
        << " -> " << verdict(outcome.pass) << "\n";
    pass &= outcome.pass;
    if (!options.saveDir.empty()) {
      const std::string prefix =
          (harness.perRank() ? "rank" + std::to_string(rank) + "_" : "") +
          stage + "_";
      if (ref::Status status = saveArrays(options.saveDir, prefix,
                                          harness.arrays(data, rank, outcome));
          !status) {
        out << "--save: " << status.message() << " -> FAIL\n";
        return false;
      }
    }
    return true;
  };
  // Consecutive per-rank stages run rank by rank, so each rank's weights
  // are generated and dropped in turn.
  for (size_t i = 0; i < harnesses.size();) {
    if (!harnesses[i]->perRank()) {
      if (!runStage(i, 0))
        return LayerVerdict::Fail;
      ++i;
      continue;
    }
    size_t end = i;
    while (end < harnesses.size() && harnesses[end]->perRank())
      ++end;
    for (int64_t rank = 0; rank < ep; ++rank) {
      for (size_t k = i; k < end; ++k)
        if (!runStage(k, rank))
          return LayerVerdict::Fail;
      data.ranks[size_t(rank)].releaseWeights();
    }
    i = end;
  }

  if (data.hasOutput) {
    double errSq = 0.0, refSq = 0.0;
    for (size_t i = 0; i < data.outBits.size(); ++i) {
      const double got = ref::decodeBf16(data.outBits[i]);
      errSq += (got - data.chainOut[i]) * (got - data.chainOut[i]);
      refSq += data.chainOut[i] * data.chainOut[i];
    }
    const double relL2 = relativeL2(errSq, refSq);
    // The all-oracle layer requantises the W13 intermediate from double,
    // the emulated one from FP32: the few codes at a rounding tie that
    // differ by one FP8 step move the L2 far less than the BF16 output's
    // own rounding, which the bound allows.
    const bool ok = relL2 <= kLayerRelL2Bound;
    char line[160];
    std::snprintf(line, sizeof(line),
                  "final output vs all-oracle layer: rel L2 %.3e (bound "
                  "%.4f) -> %s\n",
                  relL2, kLayerRelL2Bound, verdict(ok));
    out << line;
    pass &= ok;
  }
  if (!options.saveDir.empty() && data.hasBatch) {
    // Every rank serves the same tokens and ends with the same output.
    RankLayerIo io;
    io.batch = data.batch;
    io.tokens = data.tokens;
    io.outBits = data.outBits;
    io.oracleOut = data.chainOut;
    if (ref::Status status =
            saveLayer(options.saveDir, problem, options.seed,
                      std::vector<RankLayerIo>(size_t(ep), io));
        !status) {
      out << "--save: " << status.message() << " -> FAIL\n";
      return LayerVerdict::Fail;
    }
  }
  if (options.counters)
    printCounters(kernelStats, out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s: %llu emulated MFMAs in %.2f s (emulator %.2f s, %.0f "
                "MFMA/s; the rest is data generation and the oracle)\n",
                verdict(pass), (unsigned long long)mfmas, seconds,
                emulatedSeconds,
                emulatedSeconds > 0 ? double(mfmas) / emulatedSeconds : 0.0);
  out << line;
  return pass ? LayerVerdict::Pass : LayerVerdict::Fail;
}

} // namespace

LayerVerdict runLayer(const std::vector<LayerKernel> &kernels,
                      const LayerOptions &options, std::ostream &out,
                      std::ostream &err) {
  if (kernels.empty()) {
    err << "moec: a configuration without kernels\n";
    return LayerVerdict::BadInput;
  }
  std::vector<LayerKernel> shaped = kernels;
  const bool fused =
      std::any_of(shaped.begin(), shaped.end(),
                  [](const LayerKernel &k) { return specIsFused(k.spec); });
  if (options.small) {
    std::vector<StageSpec> specs;
    for (const LayerKernel &kernel : shaped)
      specs.push_back(kernel.spec);
    smallConfigSpecs(specs);
    for (size_t i = 0; i < shaped.size(); ++i)
      shaped[i].spec = specs[i];
  }
  return fused ? runFused(std::move(shaped), options, out, err)
               : runUnfused(shaped, options, out, err);
}

ref::Status saveLayer(const std::string &dir, const StageShape &shape,
                      uint64_t seed, const std::vector<RankLayerIo> &ranks) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const int64_t H = shape.hidden, I = shape.intermediate, K = shape.topK,
                E = shape.routedExperts();
  // Checkpoint layout, global expert ids: every expert, generated from the
  // same seed as the experts the kernels read.
  const LayerWeights weights(seed, shape);
  std::vector<uint8_t> elements, scales;
  ref::materializeWeights(weights.w13(), elements, scales);
  if (ref::Status status =
          saveArrays(dir, "",
                     {{"w13_weight", npyOf({E, 2 * I, H / 2}, elements)},
                      {"w13_scale", npyOf({E, 2 * I, H / 32}, scales)}});
      !status)
    return status;
  ref::materializeWeights(weights.w2(), elements, scales);
  if (ref::Status status =
          saveArrays(dir, "",
                     {{"w2_weight", npyOf({E, H, I / 2}, elements)},
                      {"w2_scale", npyOf({E, H, I / 32}, scales)}});
      !status)
    return status;
  if (shape.sharedFp8) {
    std::vector<uint8_t> codes13, scales13, codes2, scales2;
    weights.sharedW13(codes13, scales13);
    weights.sharedW2(codes2, scales2);
    if (ref::Status status =
            saveArrays(dir, "shared_",
                       {{"w13_weight", npyOf({2 * I, H}, codes13)},
                        {"w13_scale", npyOf({2 * I, H / 32}, scales13)},
                        {"w2_weight", npyOf({H, I}, codes2)},
                        {"w2_scale", npyOf({H, I / 32}, scales2)}});
        !status)
      return status;
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankLayerIo &io = ranks[r];
    const int64_t T = io.batch.tokens;
    NamedArrays arrays = {
        {"tokens_bf16", npyOf({T, H}, io.batch.hiddenBf16)},
        {"a_codes", npyOf({T, ref::activationRowBytes(io.tokens.format, H)},
                          io.tokens.codes)},
        {"a_scales", npyOf({T, H / 32}, io.tokens.scales)},
        {"topk_ids", npyOf({T, K}, io.batch.topkIds)},
        {"topk_weights", npyOf({T, K}, io.batch.topkWeights)}};
    // A layer without a combine has no final output.
    if (int64_t(io.outBits.size()) == T * H) {
      arrays.push_back({"out_bf16", npyOf({T, H}, io.outBits)});
      arrays.push_back({"oracle_out", npyOf({T, H}, io.oracleOut)});
    }
    if (ref::Status status =
            saveArrays(dir, "rank" + std::to_string(r) + "_", arrays);
        !status)
      return status;
  }
  return {};
}

} // namespace moec::emu
