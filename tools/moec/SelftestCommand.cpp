//===- SelftestCommand.cpp - moec selftest BUNDLE -------------------------===//
//
// Every selection table of a bundle, through the runtime's layer API on a
// device (a GPU, or the emulated device), against the oracle (the
// self-test library, moec/Selftest/Selftest.h). One line per case; exit 0
// all passed, 1 a case failed, 2 bad input, 3 no device (docs/cli.md).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "moec/Selftest/Selftest.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

void addSelftestCommand(CLI::App &app, int &exitStatus) {
  using moec::selftest::SelftestOptions;
  auto args = std::make_shared<SelftestOptions>();
  CLI::App *cmd = app.add_subcommand(
      "selftest",
      "Run every table of a bundle through the layer API on a device and "
      "check it against the oracle");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  CLI::Option *device =
      cmd->add_option("--device", args->device,
                      "GPU ordinal (EP ranks on it and the devices after "
                      "it), or 'emulated' for the emulated HIP device")
          ->capture_default_str();
  cmd->add_option("--devices", args->devices,
                  "the device of each EP rank, in rank order (0,1,2,3)")
      ->excludes(device);
  cmd->add_option("--network", args->network,
                  "only the tables of this network (default: every table)");
  cmd->add_option("--activation", args->activation,
                  "the oracle's W13 activation, silu or gpt-oss-swiglu "
                  "(default: the one the W13 kernels were compiled with; "
                  "another must fail)")
      ->check(CLI::IsMember({"silu", "gpt-oss-swiglu"}));
  cmd->add_option("--a-format", args->aFormat,
                  "the oracle's token rows, fp8 or fp4 (default: the W13 "
                  "kernels' A format; another must fail)")
      ->check(CLI::IsMember({"fp8", "fp4"}));
  cmd->add_option("--mid-format", args->midFormat,
                  "the oracle's intermediate, fp8 or fp4 (default: the W13 "
                  "kernels' output format; another must fail)")
      ->check(CLI::IsMember({"fp8", "fp4"}));
  CLI::Option *save = cmd->add_option(
      "--save", args->saveDir,
      "write every case's inputs, outputs and the oracle's output (.npy), "
      "each table's weights at the small shape, and manifest.json into "
      "this new directory");
  cmd->add_flag("--save-weights", args->saveWeights,
                "with --save at the bundle's own shapes: save each table's "
                "weights in checkpoint layout too (as large as the layer's)")
      ->needs(save);
  cmd->add_flag("--small", args->small,
                "compile the bundle's table at a small shape with the same "
                "knobs and run that (the default on the emulated device)");
  cmd->add_flag("--real", args->real,
                "run the bundle's own code objects at its own shapes (the "
                "default on a GPU)");
  cmd->add_option("--repeat", args->repeat,
                  "then run N forwards with changing M and check that "
                  "repeated shapes give identical outputs");
  cmd->add_option("--max-m", args->maxM,
                  "skip cases above this M (a quicker run)");
  cmd->add_option("--seed", args->seed, "seed of the generated data")
      ->capture_default_str();
  cmd->callback([args, &exitStatus] {
    moec::selftest::SelftestOutput output;
    output.line = [](const std::string &line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    output.error = [](const std::string &error) {
      std::fflush(stdout);
      std::fprintf(stderr, "moec: %s\n", error.c_str());
    };
    exitStatus = int(moec::selftest::runSelftest(*args, output));
  });
}
