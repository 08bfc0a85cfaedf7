//===- RunCommand.cpp - moec run BUNDLE --emulate ... ---------------------===//
//
// Runs one MoE layer, as a bundle's selection picks it, on the CPU emulator
// and checks every stage against the reference oracle (docs/emulator.md):
//
//   select (runtime selector) -> rebuild each kernel's IR from the manifest
//   -> seeded tokens, routing and weights -> per EP rank: sort -> W13 -> W2
//   (each fed by the previous stage's emulated output, each compared with the
//   oracle on the same inputs) -> combine of all ranks' rows -> final output
//   also compared with an all-oracle pipeline.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Emulator/BundleKernels.h"
#include "moec/Emulator/PeerHarness.h"
#include "moec/Emulator/StageHarness.h"
#include "moec/Emulator/W13Harness.h"
#include "moec/Emulator/W2Harness.h"
#include "moec/bundle.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Stages.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

using namespace moec;
using mlir::failed;

namespace {

struct RunArgs {
  std::string bundle, network, saveDir;
  uint32_t ep = 1, workspace = 0, m = 0;
  uint64_t seed = 1;
  double invalidFraction = 0.05;
  bool emulate = false, small = false;
};

int64_t fieldInt(const StageSpec &spec, const char *name, int64_t fallback) {
  auto it = spec.fields.find(name);
  if (it == spec.fields.end())
    return fallback;
  return std::strtoll(it->second.c_str(), nullptr, 10);
}

/// Experts [first, first + count) of `source` in dense device layout; only
/// those flagged in `present` are generated (the others stay zero and are
/// poisoned in the emulator), which keeps real shapes affordable.
void materializeSlice(const ref::WeightSource &source, int64_t first,
                      int64_t count, const std::vector<uint8_t> &present,
                      std::vector<uint8_t> &elements,
                      std::vector<uint8_t> &scales) {
  const int64_t rows = source.rows(), depth = source.depth();
  const size_t rowBytes = size_t(depth / 2), scaleBytes = size_t(depth / 32);
  elements.assign(size_t(count * rows) * rowBytes, 0);
  scales.assign(size_t(count * rows) * scaleBytes, 0);
  ref::WeightScratch scratch;
  for (int64_t e = 0; e < count; ++e) {
    if (!present[size_t(e)])
      continue;
    ref::ExpertRows expert = source.expertRows(first + e, 0, rows, scratch);
    std::memcpy(&elements[size_t(e * rows) * rowBytes], expert.elements,
                size_t(rows) * rowBytes);
    std::memcpy(&scales[size_t(e * rows) * scaleBytes], expert.scales,
                size_t(rows) * scaleBytes);
  }
}

struct Stage {
  std::string name, stage;
  emu::BuiltKernel kernel;
};

const char *verdict(bool pass) { return pass ? "PASS" : "FAIL"; }

/// A fused MegaMoE config (`#moe.peer` stages): stage 1, stage 2 and the
/// peer-rows combine on every rank at once, in one emulated memory.
int runPeerConfig(const RunArgs &args, std::vector<StageSpec> specs,
                  const std::vector<std::string> &names) {
  // The table's fixed-slot capacity (every rank's receive rows, local
  // experts x capacity x H bytes) does not fit in host memory at the real
  // shape; the same kernels are rebuilt for exactly m tokens per rank, with
  // the capacity that never overflows for them. Only that constant differs.
  int64_t tokens = args.m;
  if (args.small) {
    tokens = std::min<int64_t>(tokens, 16);
  } else {
    const int64_t ep = fieldInt(specs[0], "ep", 1);
    for (StageSpec &spec : specs)
      if (spec.fields.count("capacity")) {
        spec.fields["max_tokens"] = std::to_string(tokens);
        spec.fields["capacity"] =
            spec.fields.count("transport") && spec.fields.at("transport") == "compact"
                ? std::to_string(ep * tokens * fieldInt(spec, "top_k", 1))
                : std::to_string((ep * tokens + 127) / 128 * 128);
      }
  }
  mlir::MLIRContext context;
  emu::prepareContext(context);
  const emu::BuiltKernel *stage1 = nullptr, *stage2 = nullptr,
                         *combine = nullptr, *dispatch = nullptr;
  std::vector<emu::BuiltKernel> kernels(specs.size());
  std::string error;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (failed(emu::buildKernelIR(context, specs[i], kernels[i], error))) {
      std::cerr << "moec: kernel " << names[i] << ": " << error << "\n";
      return cli::kBadInput;
    }
    std::string unsupported;
    if (failed(emu::checkSupported(
            mlir::cast<mlir::gpu::GPUFuncOp>(kernels[i].func), unsupported))) {
      std::cout << specs[i].stage << " " << names[i] << ": " << unsupported
                << " -> FAIL\n";
      return cli::kCheckFailed;
    }
    const std::string &stage = specs[i].stage;
    auto mode = specs[i].fields.find("dispatch");
    const bool dispatchOnly = mode != specs[i].fields.end() && mode->second == "only";
    (dispatchOnly      ? dispatch
     : stage == "w13" ? stage1
     : stage == "w2"  ? stage2
                      : combine) = &kernels[i];
  }
  if (!stage1 || !stage2 || !combine) {
    std::cout << "a fused config needs a w13, a w2 and a combine stage -> FAIL\n";
    return cli::kCheckFailed;
  }
  const int64_t ep = fieldInt(specs[0], "ep", 1);
  std::cout << "problem H " << fieldInt(specs[0], "hidden", 0) << " I "
            << fieldInt(specs[0], "intermediate", 0) << " E "
            << fieldInt(specs[0], "experts", 0) << " top_k "
            << fieldInt(specs[0], "top_k", 0) << " ep " << ep
            << (args.small ? " (--small, fused, " : " (fused, ") << tokens
            << " tokens per rank, capacity "
            << fieldInt(specs[0], "capacity", 0) << "), seed " << args.seed
            << "\n";
  emu::PeerLayerOptions options;
  options.seed = args.seed;
  options.tokensPerRank.assign(size_t(ep), tokens);
  options.invalidFraction = args.invalidFraction;
  // Two launches on the same control buffers at --small; one at the real
  // shape, where the emulation time is the GEMMs'.
  options.epochs = args.small ? 2 : 1;
  options.saveDir = args.saveDir;
  emu::PeerLayerOutcome outcome;
  if (failed(emu::runPeerLayer(*stage1, *stage2, *combine, options, outcome,
                               error, dispatch))) {
    std::cout << "fused layer: " << error << " -> FAIL\n";
    return cli::kCheckFailed;
  }
  std::cout << outcome.summary;
  std::cout << (outcome.pass ? "PASS" : "FAIL") << ": " << outcome.stats.mfmas
            << " emulated MFMAs over " << ep << " ranks and " << options.epochs
            << (options.epochs == 1 ? " launch in " : " launches in ")
            << outcome.stats.seconds << " s\n";
  return outcome.pass ? cli::kSuccess : cli::kCheckFailed;
}

int runLayer(const RunArgs &args) {
  using namespace moec::rt;
  std::string error;
  auto bundle = Bundle::open(args.bundle, error);
  if (!bundle) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  if (!args.emulate) {
    std::cerr << "moec: run needs --emulate (no gfx950 device path exists "
                 "here; see docs/emulator.md)\n";
    return cli::kBadInput;
  }
  const Manifest &manifest = bundle->manifest();
  std::string network;
  if (!moec::cli::resolveNetwork(manifest, args.bundle, args.network, network,
                                 error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kBadInput;
  }
  TableHandle handle;
  if (!bundle->selector().resolveTable(network, args.ep, args.workspace, handle,
                                       error)) {
    std::cerr << "moec: " << args.bundle << ": " << error << "\n";
    return cli::kBadInput;
  }
  Selection selection = bundle->selector().select(handle, args.m);
  if (selection.status == SelectStatus::Miss) {
    std::cerr << "moec: " << args.bundle << ": m " << args.m
              << " selects no row (above the largest, policy error)\n";
    return cli::kBadInput;
  }
  const ConfigInfo &config = manifest.configs[selection.config];
  std::cout << "selected config " << config.id << " (row m=" << selection.rowM
            << (selection.status == SelectStatus::Fallback ? ", fallback" : "")
            << ") for " << network << " ep " << args.ep << " workspace "
            << args.workspace << " m " << args.m << "\n";

  // Specs from the manifest; --small shrinks every stage to one common
  // problem so the stages still chain (H and I agree across kernels).
  std::vector<StageSpec> specs;
  for (uint32_t k : config.kernels) {
    const KernelInfo &kernel = manifest.kernels[k];
    specs.push_back(stageSpecOfAttributes(kernel.stage, kernel.attributes));
  }
  if (specs.empty()) {
    std::cerr << "moec: config " << config.id << " has no kernels\n";
    return cli::kBadInput;
  }
  // A fused stage has a peer transport (whose capacity is required).
  const bool fused = std::any_of(specs.begin(), specs.end(), [](const StageSpec &spec) {
    return spec.fields.count("capacity") > 0;
  });
  // The emulator runs the kernel IR stored in the bundle; only a changed
  // shape (--small, or a fused config's capacity) rebuilds the kernels from
  // the manifest's attributes, and the output says so.
  const bool rebuild = args.small || fused;
  if (!rebuild)
    for (uint32_t k : config.kernels)
      if (!manifest.kernels[k].ir.present()) {
        std::cerr << "moec: " << args.bundle << ": kernel "
                  << manifest.kernels[k].name
                  << ": the bundle holds no kernel IR (compile it again with "
                     "this moec to emulate it)\n";
        return cli::kBadInput;
      }
  std::cout << (rebuild ? "kernel IR: rebuilt from the manifest's attributes ("
                        : "kernel IR: as stored in the bundle\n");
  if (rebuild)
    std::cout << (args.small ? "--small" : "fused: capacity for m tokens")
              << ")\n";
  if (args.small)
    emu::smallConfigSpecs(specs);
  if (fused) {
    std::vector<std::string> names;
    for (uint32_t k : config.kernels)
      names.push_back(manifest.kernels[k].name);
    return runPeerConfig(args, specs, names);
  }

  mlir::MLIRContext context;
  emu::prepareContext(context);
  Stage *sortStage = nullptr, *w13Stage = nullptr, *w2Stage = nullptr,
        *combineStage = nullptr;
  std::vector<Stage> stages(specs.size());
  bool allSupported = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    Stage &stage = stages[i];
    stage.name = manifest.kernels[config.kernels[i]].name;
    stage.stage = specs[i].stage;
    if (rebuild ? failed(emu::buildKernelIR(context, specs[i], stage.kernel, error))
                : failed(emu::loadBundleKernel(context, *bundle,
                                               config.kernels[i], stage.kernel,
                                               error))) {
      std::cerr << "moec: kernel " << stage.name << ": " << error << "\n";
      return cli::kBadInput;
    }
    std::string unsupported;
    if (failed(emu::checkSupported(
            mlir::cast<mlir::gpu::GPUFuncOp>(stage.kernel.func), unsupported))) {
      std::cout << stage.stage << " " << stage.name << ": " << unsupported
                << " -> FAIL\n";
      allSupported = false;
    }
    if (ref::Status driven = emu::checkHarnessSupports(stage.kernel.description);
        !driven) {
      std::cout << stage.stage << " " << stage.name << ": " << driven.message()
                << " -> FAIL (not checked)\n";
      allSupported = false;
    }
    Stage **slot = stage.stage == "sort"      ? &sortStage
                   : stage.stage == "w13"     ? &w13Stage
                   : stage.stage == "w2"      ? &w2Stage
                   : stage.stage == "combine" ? &combineStage
                                              : nullptr;
    if (!slot) {
      std::cout << "stage " << stage.stage << " (" << stage.name
                << "): the emulator has no driver for it -> FAIL\n";
      allSupported = false;
    } else {
      *slot = &stage;
    }
  }
  if (!allSupported)
    return cli::kCheckFailed;
  if (!w2Stage) {
    std::cout << "config " << config.id << " has no W2 stage: nothing to run "
              << "-> FAIL\n";
    return cli::kCheckFailed;
  }

  emu::W2Shape w2;
  if (ref::Status s = emu::parseW2Shape(w2Stage->kernel.description, w2); !s) {
    std::cerr << "moec: " << s.message() << "\n";
    return cli::kBadInput;
  }
  emu::W13Shape w13;
  if (w13Stage) {
    if (ref::Status s = emu::parseW13Shape(w13Stage->kernel.description, w13);
        !s) {
      std::cerr << "moec: " << s.message() << "\n";
      return cli::kBadInput;
    }
  }
  const int64_t hidden = w2.hidden, inter = w2.intermediate, topK = w2.topK,
                experts = w2.experts, ep = w2.ep, local = w2.localExperts;
  if ((w2.sharedFp8 || (w13Stage && w13.sharedFp8)) && ep != 1) {
    std::cout << "a shared FP8 expert with ep " << ep
              << " is not modelled by the emulator's driver -> FAIL\n";
    return cli::kCheckFailed;
  }
  if (int64_t(args.ep) != ep)
    std::cout << "note: the kernels are built for ep " << ep << "\n";
  std::cout << "problem H " << hidden << " I " << inter << " E " << experts
            << " top_k " << topK << " ep " << ep
            << (args.small ? " (--small)" : "") << ", " << args.m
            << " tokens per rank, seed " << args.seed << "\n";

  // Inputs of rank 0's batch; every rank's experts serve it (the routes to
  // rank r's experts are what rank r computes).
  const auto start = std::chrono::steady_clock::now();
  const int64_t tokens = args.m, numRoutes = tokens * topK;
  ref::RoutingOptions routing;
  routing.invalidFraction = args.invalidFraction;
  ref::TokenBatch batch = ref::generateBatch(
      args.seed, 0, tokens, ref::MoeShape{hidden, inter, experts, topK}, routing);
  std::vector<uint8_t> tokenCodes(size_t(tokens * hidden)),
      tokenScales(size_t(tokens * hidden / 32));
  {
    std::vector<double> row(static_cast<size_t>(hidden));
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h)
        row[size_t(h)] = ref::decodeBf16(batch.hiddenBf16[size_t(t * hidden + h)]);
      ref::quantizeFp8Row(row.data(), hidden, &tokenCodes[size_t(t * hidden)],
                          &tokenScales[size_t(t * hidden / 32)]);
    }
  }
  ref::GeneratedMxfp4Weights w13Weights(args.seed, 0xB13, experts, 2 * inter,
                                        hidden, ref::defaultScaleExponent(hidden));
  ref::GeneratedMxfp4Weights w2Weights(args.seed, 0xB2, experts, hidden, inter,
                                       ref::defaultScaleExponent(inter));
  if (!args.saveDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.saveDir, ec);
    using ref::NpyArray;
    using ref::NpyDtype;
    for (const auto &[name, array] : std::vector<std::pair<std::string, NpyArray>>{
             {"tokens_bf16", NpyArray::fromVector(NpyDtype::UInt16, {tokens, hidden}, batch.hiddenBf16)},
             {"topk_ids", NpyArray::fromVector(NpyDtype::Int32, {tokens, topK}, batch.topkIds)},
             {"topk_weights", NpyArray::fromVector(NpyDtype::Float32, {tokens, topK}, batch.topkWeights)}})
      if (ref::Status s = ref::writeNpy(args.saveDir + "/" + name + ".npy", array); !s) {
        std::cerr << "moec: " << s.message() << "\n";
        return cli::kBadInput;
      }
  }

  bool pass = true;
  emu::LaunchConfig launch;
  uint64_t mfmas = 0;
  double emulatedSeconds = 0.0;
  auto account = [&](const emu::RunResult &run) {
    mfmas += run.stats.mfmas;
    emulatedSeconds += run.stats.seconds;
  };
  // Route rows of all ranks (emulated and all-oracle), for the combine:
  // BF16 [routes, H], or FP32 partials [routes, split_k, H] with split-K.
  const int64_t splitK = w2.splitK;
  emu::CombineRows rows;
  rows.splitK = splitK;
  if (splitK > 1)
    rows.partials.assign(size_t(numRoutes * splitK * hidden), 0.0f);
  else
    rows.bf16.assign(size_t(numRoutes * hidden), 0);
  rows.written.assign(size_t(numRoutes * splitK * hidden), 0);
  std::vector<double> oracleRows(size_t(numRoutes * hidden), 0.0);
  auto report = [&](const std::string &what, bool ok, const std::string &summary) {
    std::cout << what << ": " << summary << " -> " << verdict(ok) << "\n";
    pass &= ok;
  };
  auto fail = [&](const std::string &what) {
    std::cout << what << ": " << error << " -> FAIL\n";
    return cli::kCheckFailed;
  };

  for (int64_t rank = 0; rank < ep; ++rank) {
    const std::string tag = "rank " + std::to_string(rank) + " ";
    // Sort: the emulated list feeds W13 and W2; without a sort stage the
    // oracle's list does.
    std::vector<int32_t> localIds(batch.topkIds);
    for (int32_t &id : localIds)
      id = (id >= rank * local && id < (rank + 1) * local)
               ? static_cast<int32_t>(id - rank * local)
               : -1;
    ref::SortedRoutes sorted;
    if (sortStage) {
      emu::SortOutcome out;
      const int64_t sortTile =
          fieldInt(specs[size_t(sortStage - stages.data())], "m_tile", w2.tileM);
      if (sortTile != w2.tileM) {
        std::cout << "sort tile m " << sortTile << " differs from W2's "
                  << w2.tileM << " -> FAIL\n";
        return cli::kCheckFailed;
      }
      if (failed(emu::runSort(sortStage->kernel.func, sortTile, local,
                              batch.topkIds, tokens, topK, rank * local, launch,
                              out, error)))
        return fail(tag + "sort");
      account(out.run);
      report(tag + "sort " + sortStage->name, out.pass, out.summary);
      sorted = out.sorted;
    } else if (ref::Status s = ref::buildSortedRoutes(
                   localIds.data(), tokens, topK, local, w2.tileM, sorted);
               !s) {
      std::cerr << "moec: " << s.message() << "\n";
      return cli::kBadInput;
    }
    sorted.numRoutes = numRoutes;
    sorted.mTile = w2.tileM;
    // MXFP4 experts some tile of this rank selects: only they are generated.
    const int64_t mxfp4Experts = local - (w2.sharedFp8 ? 1 : 0);
    std::vector<uint8_t> present(size_t(mxfp4Experts), 0);
    for (int32_t e : sorted.tileExperts)
      if (e >= 0 && e < mxfp4Experts)
        present[size_t(e)] = 1;

    // W13 (or, without one, the oracle's intermediate from random rows).
    emu::W2Data w2Data;
    w2Data.tokens = tokens;
    w2Data.numRoutes = numRoutes;
    w2Data.topkIds = batch.topkIds;
    w2Data.sorted = sorted;
    std::vector<uint8_t> oracleCodes, oracleScales;
    if (w13Stage) {
      if (w13.tileM != w2.tileM) {
        std::cout << "W13 and W2 tiles differ in m: the sorted list cannot "
                     "serve both -> FAIL\n";
        return cli::kCheckFailed;
      }
      emu::W13Data w13Data;
      w13Data.tokens = tokens;
      w13Data.numRoutes = numRoutes;
      w13Data.topkIds = batch.topkIds;
      w13Data.aCodes = tokenCodes;
      w13Data.aScales = tokenScales;
      w13Data.sorted = sorted;
      materializeSlice(w13Weights, rank * local, mxfp4Experts, present,
                       w13Data.bPacked, w13Data.bScales);
      w13Data.bExpertsPresent = present;
      if (w13.sharedFp8)
        ref::generateFp8Expert(args.seed, 0x5B13, 2 * inter, hidden,
                               w13Data.sharedCodes, w13Data.sharedScales);
      emu::W13Outcome out;
      if (failed(emu::runW13(w13Stage->kernel.func, w13, w13Data, launch, out,
                             error)))
        return fail(tag + "w13");
      emu::W2DataOptions noExtras;
      emu::compareW13(w13, w13Data, noExtras, out);
      account(out.run);
      report(tag + "w13 " + w13Stage->name, out.pass, out.summary);
      if (!args.saveDir.empty())
        (void)emu::saveW13Arrays(args.saveDir, "rank" + std::to_string(rank) + "_w13_",
                                 w13, w13Data, out);
      w2Data.aCodes = out.outCodes;
      w2Data.aScales = out.outScales;
      w2Data.aWritten = out.codesWritten;
      w2Data.aScalesWritten = out.scalesWritten;
      oracleCodes = out.oracleCodes;
      oracleScales = out.oracleScales;
    } else {
      emu::W2DataOptions options;
      options.seed = args.seed;
      options.tokens = tokens;
      emu::W2Data generated;
      if (ref::Status s = emu::generateW2Data(w2, options, generated); !s) {
        std::cerr << "moec: " << s.message() << "\n";
        return cli::kBadInput;
      }
      w2Data.aCodes = generated.aCodes;
      w2Data.aScales = generated.aScales;
      oracleCodes = generated.aCodes;
      oracleScales = generated.aScales;
    }

    materializeSlice(w2Weights, rank * local, mxfp4Experts, present,
                     w2Data.bPacked, w2Data.bScales);
    w2Data.bExpertsPresent = present;
    if (w2.sharedFp8)
      ref::generateFp8Expert(args.seed, 0x5B2, hidden, inter, w2Data.sharedCodes,
                             w2Data.sharedScales);
    emu::W2Outcome out;
    if (failed(emu::runW2(w2Stage->kernel.func, w2, w2Data, launch, out, error)))
      return fail(tag + "w2");
    emu::W2DataOptions noExtras;
    emu::compareW2(w2, w2Data, noExtras, out);
    account(out.run);
    report(tag + "w2 " + w2Stage->name, out.pass, out.summary);
    if (!args.saveDir.empty())
      (void)emu::saveW2Arrays(args.saveDir, "rank" + std::to_string(rank) + "_w2_",
                              w2, w2Data, out);

    // This rank's rows: the emulated W2 output, and the all-oracle chain
    // (oracle W2 over the oracle's own W13 intermediate).
    ref::SortedRoutes view;
    (void)emu::oracleRoutes(sorted, w2.tileM, local, view);
    std::vector<float> chain(size_t(numRoutes * hidden), 0.0f);
    ref::Status chainStatus;
    if (w2.sharedFp8) {
      ref::DenseWeights routed(ref::WeightFormat::Mxfp4, w2Data.bPacked.data(),
                               w2Data.bScales.data(), local - 1, hidden, inter);
      ref::DenseWeights shared(ref::WeightFormat::Fp8E4M3,
                               w2Data.sharedCodes.data(),
                               w2Data.sharedScales.data(), 1, hidden, inter);
      ref::AppendedExpertWeights all(routed, shared);
      std::vector<double> exact(chain.size(), 0.0);
      chainStatus = ref::runW2Stage(
          ref::ActivationRows::fp8(oracleCodes.data(), oracleScales.data(),
                                   numRoutes, inter),
          all, view, exact.data());
      for (size_t i = 0; i < chain.size(); ++i)
        chain[i] = static_cast<float>(exact[i]);
    } else {
      chainStatus = ref::runW2Stage(oracleCodes.data(), oracleScales.data(),
                                    w2Data.bPacked.data(), w2Data.bScales.data(),
                                    local, hidden, inter, view, chain.data());
    }
    if (ref::Status s = chainStatus; !s) {
      std::cout << tag << "all-oracle W2: " << s.message() << " -> FAIL\n";
      return cli::kCheckFailed;
    }
    for (int64_t t = 0; t < view.numTiles(); ++t)
      for (int64_t i = 0; i < w2.tileM; ++i) {
        const int32_t route = view.routeIds[size_t(t * w2.tileM + i)];
        if (view.isPadding(route))
          continue;
        for (int64_t h = 0; h < hidden; ++h) {
          const size_t e = size_t(route) * size_t(hidden) + size_t(h);
          if (splitK > 1) {
            for (int64_t z = 0; z < splitK; ++z) {
              const size_t p = size_t((route * splitK + z) * hidden + h);
              rows.partials[p] = out.partials[p];
              rows.written[p] = out.partialsWritten[p];
            }
            oracleRows[e] = chain[e];
          } else {
            rows.bf16[e] = out.outBits[e];
            rows.written[e] = out.outWritten[e];
            oracleRows[e] = ref::decodeBf16(ref::encodeBf16(chain[e]));
          }
        }
      }
  }

  // Combine over every rank's rows; the final output is compared with the
  // combine of the all-oracle rows as well.
  std::vector<double> finalOut(size_t(tokens * hidden), 0.0);
  if (combineStage) {
    const std::string &gridRule = combineStage->kernel.description.abi.gridX;
    int64_t gridX = std::strtoll(gridRule.c_str(), nullptr, 10);
    if (gridX <= 0) {
      const int64_t waves = fieldInt(specs[size_t(combineStage - stages.data())],
                                     "waves", 4);
      gridX = (tokens + waves - 1) / waves;
    }
    emu::CombineOutcome out;
    if (failed(emu::runCombine(combineStage->kernel.func, hidden, experts, gridX,
                               rows, batch.topkIds,
                               batch.topkWeights, tokens, topK, launch, out,
                               error)))
      return fail("combine");
    account(out.run);
    report("combine " + combineStage->name, out.pass, out.summary);
    for (size_t i = 0; i < finalOut.size(); ++i)
      finalOut[i] = ref::decodeBf16(out.outBits[i]);
    if (!args.saveDir.empty()) {
      (void)ref::writeNpy(args.saveDir + "/out_bf16.npy",
                          ref::NpyArray::fromVector(ref::NpyDtype::UInt16,
                                                    {tokens, hidden}, out.outBits));
    }
  }
  std::vector<double> oracleFinal(size_t(tokens * hidden), 0.0);
  if (combineStage)
    ref::combineRoutes(oracleRows.data(), batch.topkIds.data(),
                       batch.topkWeights.data(), tokens, topK, experts, hidden,
                       oracleFinal.data());
  double errSq = 0.0, refSq = 0.0;
  if (combineStage)
    for (size_t i = 0; i < finalOut.size(); ++i) {
      errSq += (finalOut[i] - oracleFinal[i]) * (finalOut[i] - oracleFinal[i]);
      refSq += oracleFinal[i] * oracleFinal[i];
    }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (combineStage) {
    const double relL2 = refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
    // The all-oracle chain requantises the W13 intermediate from double, the
    // emulated one from FP32: codes at rounding ties may differ by one FP8
    // step, so the bound is the FP8 unit roundoff.
    const bool ok = relL2 <= emu::kW13RelL2Bound;
    std::printf("final output vs all-oracle layer: rel L2 %.3e (bound %.4f) -> %s\n",
                relL2, emu::kW13RelL2Bound, verdict(ok));
    pass &= ok;
    if (!args.saveDir.empty())
      (void)ref::writeNpy(args.saveDir + "/oracle_out_f64.npy",
                          ref::NpyArray::fromVector(ref::NpyDtype::Float64,
                                                    {tokens, hidden}, oracleFinal));
  }
  std::printf("%s: %llu emulated MFMAs in %.2f s (emulator %.2f s, %.0f MFMA/s; "
              "the rest is data generation and the oracle)\n",
              verdict(pass), (unsigned long long)mfmas, seconds, emulatedSeconds,
              emulatedSeconds > 0 ? double(mfmas) / emulatedSeconds : 0.0);
  return pass ? cli::kSuccess : cli::kCheckFailed;
}

} // namespace

void addRunCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<RunArgs>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Run the layer a key selects on the CPU emulator and check every "
             "stage against the reference oracle");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_option("--network", args->network,
                  "network name (optional when the bundle serves one)");
  cmd->add_option("--ep", args->ep, "expert-parallel size")->required();
  cmd->add_option("--workspace", args->workspace, "workspace capacity (rows)")
      ->required();
  cmd->add_option("--m", args->m, "source tokens per rank")->required();
  cmd->add_flag("--emulate", args->emulate,
                "execute on the CPU emulator (the only mode today)");
  cmd->add_option("--seed", args->seed, "seed of the generated data");
  cmd->add_option("--save", args->saveDir,
                  "write inputs, weights, stage outputs and the final output "
                  "as .npy into this directory");
  cmd->add_flag("--small", args->small,
                "same knobs at a small problem (H = I = 2 max(n, k), 4 experts "
                "per rank, top_k <= 4)");
  cmd->add_option("--invalid-fraction", args->invalidFraction,
                  "fraction of routing slots made invalid")
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([args, &exitStatus] { exitStatus = runLayer(*args); });
}
