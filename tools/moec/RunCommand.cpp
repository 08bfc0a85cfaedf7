//===- RunCommand.cpp - moec run BUNDLE --emulate ... ---------------------===//
//
// Runs one MoE layer, as a bundle's selection picks it, on the CPU emulator
// and checks every stage against the reference oracle (docs/emulator.md):
// select exactly as the runtime does, take each kernel of the selected
// config as the bundle stores its IR (or rebuilt from its manifest
// attributes when the shape changes), and hand them to the emulator's layer
// runner (moec/Harness/LayerRunner.h), which runs the stages in config
// order and prints one line per stage.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "moec/Harness/BundleKernels.h"
#include "moec/Harness/LayerRunner.h"
#include "moec/bundle.h"

#include "mlir/IR/MLIRContext.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

using namespace moec;

namespace {

struct RunArgs {
  std::string bundle, network, saveDir, config;
  uint32_t ep = 1, workspace = 0, m = 0;
  uint64_t seed = 1;
  double invalidFraction = 0.05;
  bool emulate = false, small = false, counters = false;
};

int runConfig(const RunArgs &args, const rt::Bundle &bundle);
int emulateConfig(const RunArgs &args, const rt::Bundle &bundle,
                  const rt::ConfigInfo &config);

int runLayer(const RunArgs &args) {
  using namespace moec::rt;
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  if (!args.emulate) {
    std::cerr << "moec: run needs --emulate (no gfx950 device path exists "
                 "here; see docs/emulator.md)\n";
    return cli::kBadInput;
  }
  const Manifest &manifest = bundle->manifest();
  if (!args.config.empty())
    return runConfig(args, *bundle);
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
  return emulateConfig(args, *bundle, config);
}

/// --config ID: that configuration at --m tokens, whatever the selection
/// tables pick (AITER rows whose token bucket is far larger than a shape
/// the emulator runs in seconds, or a configuration no row selects).
int runConfig(const RunArgs &args, const rt::Bundle &bundle) {
  const rt::Manifest &manifest = bundle.manifest();
  for (const rt::ConfigInfo &config : manifest.configs)
    if (config.id == args.config) {
      std::cout << "config " << config.id << " (--config) at m " << args.m
                << " tokens\n";
      return emulateConfig(args, bundle, config);
    }
  std::string known;
  for (const rt::ConfigInfo &config : manifest.configs)
    known += (known.empty() ? "" : ", ") + config.id;
  std::cerr << "moec: " << args.bundle << ": no config '" << args.config
            << "' (the bundle has " << known << ")\n";
  return cli::kBadInput;
}

int emulateConfig(const RunArgs &args, const rt::Bundle &bundleRef,
                  const rt::ConfigInfo &config) {
  using namespace moec::rt;
  const Manifest &manifest = bundleRef.manifest();
  const Bundle *bundle = &bundleRef;
  if (config.kernels.empty()) {
    std::cerr << "moec: config " << config.id << " has no kernels\n";
    return cli::kBadInput;
  }

  std::vector<emu::LayerKernel> kernels;
  for (uint32_t k : config.kernels) {
    const KernelInfo &kernel = manifest.kernels[k];
    kernels.push_back(
        {kernel.name, stageSpecOfAttributes(kernel.stage, kernel.attributes)});
  }
  // The emulator runs the kernel IR stored in the bundle; only a changed
  // shape (--small, or a fused config's capacity) rebuilds the kernels from
  // the manifest's attributes, and the output says so.
  const bool fused = std::any_of(
      kernels.begin(), kernels.end(),
      [](const emu::LayerKernel &k) { return emu::specIsFused(k.spec); });
  const bool rebuild = args.small || fused;
  if (!rebuild)
    for (size_t i = 0; i < kernels.size(); ++i) {
      const uint32_t k = config.kernels[i];
      if (!manifest.kernels[k].ir.present()) {
        std::cerr << "moec: " << args.bundle << ": kernel "
                  << manifest.kernels[k].name
                  << ": the bundle holds no kernel IR (compile it again with "
                     "this moec to emulate it)\n";
        return cli::kBadInput;
      }
      kernels[i].load = [bundle, k](mlir::MLIRContext &context,
                                    emu::BuiltKernel &kernel,
                                    std::string &error) {
        return emu::loadBundleKernel(context, *bundle, k, kernel, error);
      };
    }
  if (rebuild)
    std::cout << "kernel IR: rebuilt from the manifest's attributes ("
              << (args.small ? "--small" : "fused: capacity for m tokens")
              << ")\n";
  else
    std::cout << "kernel IR: as stored in the bundle\n";

  emu::LayerOptions options;
  options.seed = args.seed;
  options.tokens = args.m;
  options.invalidFraction = args.invalidFraction;
  options.small = args.small;
  options.ep = args.ep;
  options.saveDir = args.saveDir;
  options.counters = args.counters;
  switch (emu::runLayer(kernels, options, std::cout, std::cerr)) {
  case emu::LayerVerdict::Pass:
    return cli::kSuccess;
  case emu::LayerVerdict::Fail:
    return cli::kCheckFailed;
  case emu::LayerVerdict::BadInput:
    return cli::kBadInput;
  }
  return cli::kCheckFailed;
}

} // namespace

void addRunCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<RunArgs>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Run the layer a key selects on the CPU emulator and check every "
             "stage against the reference oracle");
  moec::cli::addSelectionKeyOptions(cmd, args->bundle, args->network, args->ep,
                                    args->workspace);
  // --config names the configuration itself: the key is then optional.
  CLI::Option *epOption = cmd->get_option("--ep");
  CLI::Option *workspaceOption = cmd->get_option("--workspace");
  epOption->required(false);
  workspaceOption->required(false);
  cmd->add_option("--m", args->m, "source tokens per rank")->required();
  cmd->add_flag("--emulate", args->emulate,
                "execute on the CPU emulator (the only mode today)");
  cmd->add_option("--seed", args->seed, "seed of the generated data");
  cmd->add_flag("--counters", args->counters,
                "print each kernel's counters (global and LDS bytes, distinct "
                "64-byte lines, LDS bank conflicts, scaled MFMAs, other ops; "
                "docs/emulator.md)");
  cmd->add_option("--save", args->saveDir,
                  "write the inputs per rank, the weights (checkpoint layout, "
                  "global expert ids), stage arrays and the final output per "
                  "rank as .npy into this directory (docs/cli.md)");
  cmd->add_option("--config", args->config,
                  "run this configuration (its id, as `moec inspect` and "
                  "`moec select` name it) instead of the one the key selects");
  cmd->add_flag("--small", args->small,
                "same knobs at a small problem (H = I = 2 max(n, k), 4 experts "
                "per rank, top_k <= 4; a W2 K tail, I mod k, is kept: I = that "
                "+ the tail where every kernel accepts it)");
  cmd->add_option("--invalid-fraction", args->invalidFraction,
                  "fraction of routing slots made invalid")
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([args, epOption, workspaceOption, &exitStatus] {
    if (args->config.empty() &&
        (epOption->count() == 0 || workspaceOption->count() == 0)) {
      std::cerr << "moec: run: --ep and --workspace are required (or name "
                   "the configuration with --config)\n";
      exitStatus = cli::kBadInput;
      return;
    }
    exitStatus = runLayer(*args);
  });
}
