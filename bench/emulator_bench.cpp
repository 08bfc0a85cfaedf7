//===- emulator_bench.cpp - scaled MFMAs per second of the emulator -------===//
//
// Emulator throughput at fixed shapes, detectors on (they always are): the
// W13 and W2 stage kernels of flash_ep4's decode and prefill rows at
// H = I = 1024, 8 experts, top-2, 256 tokens, seed 1. Each case builds its
// kernel once, then runs it `--reps` times on freshly generated data
// through its stage harness (generate, run, compare with the oracle: a
// wrong result fails the bench) and reports the best time of run() alone,
// wall and process CPU time (the CPU time is what a shared machine's other
// load does not inflate; for one thread it is the single-core figure).
//
//   moec-emulator-bench [--reps N] [--threads N] [--dump-ir DIR] [--ir DIR]
//
// Prints one line per case and the total: MFMAs, seconds, MFMA/s.
// --dump-ir writes each case's kernel IR to DIR/case<i>.mlir; --ir runs
// the kernel IR read from those files instead of the one built here (the
// harness still takes its ABI and shape from the built op), so another
// build of the emulator, an older one included, can run the same IR.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/StageHarness.h"
#include "moec/Harness/StageKernel.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace moec::emu;
using moec::StageSpec;

namespace {

struct Case {
  const char *name;
  moec::abi::Stage stage;
  std::vector<std::pair<std::string, std::string>> knobs;
};

double cpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

StageSpec specOf(const Case &c) {
  StageSpec spec;
  spec.stage = c.stage;
  spec.fields = {{"hidden", "1024"}, {"intermediate", "1024"},
                 {"experts", "8"},   {"top_k", "2"},
                 {"ep", "1"}};
  for (const auto &knob : c.knobs)
    spec.fields.insert(knob);
  return spec;
}

/// The kernel IR file of case `index` under `dir`.
std::string irPath(const std::string &dir, size_t index) {
  return dir + "/case" + std::to_string(index) + ".mlir";
}

/// Replaces `kernel`'s module by the one parsed from `path` (its one
/// gpu.func becomes the kernel).
bool loadIR(mlir::MLIRContext &context, const std::string &path,
            BuiltKernel &kernel, std::string &error) {
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(path, &context);
  if (!module) {
    error = "cannot parse " + path;
    return false;
  }
  mlir::Operation *func = nullptr;
  unsigned count = 0;
  module->walk([&](mlir::gpu::GPUFuncOp op) {
    func = op;
    ++count;
  });
  if (count != 1) {
    error = path + ": expected one gpu.func, found " + std::to_string(count);
    return false;
  }
  kernel.module = std::move(module);
  kernel.func = func;
  return true;
}

/// Writes `kernel`'s module to `path`.
bool dumpIR(BuiltKernel &kernel, const std::string &path, std::string &error) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    error = path + ": " + ec.message();
    return false;
  }
  kernel.module->print(os);
  os << "\n";
  return true;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 3;
  unsigned threads = 0;
  std::string dumpDir, irDir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = unsigned(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--dump-ir") && i + 1 < argc)
      dumpDir = argv[++i];
    else if (!std::strcmp(argv[i], "--ir") && i + 1 < argc)
      irDir = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--threads N] [--dump-ir DIR] "
                   "[--ir DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  const std::vector<Case> cases = {
      {"w13 16x64x256 w4 m16n16k128", moec::abi::Stage::W13,
       {{"m", "16"}, {"n", "64"}, {"k", "256"}, {"waves", "4"},
        {"mfma", "m16n16k128"}, {"orientation", "b_major"},
        {"b_cache", "nt"}, {"swiglu_limit", "10"}}},
      {"w2 16x128x256 w4 m16n16k128", moec::abi::Stage::W2,
       {{"m", "16"}, {"n", "128"}, {"k", "256"}, {"waves", "4"},
        {"mfma", "m16n16k128"}, {"orientation", "b_major"},
        {"b_cache", "nt"}, {"b_prefetch", "true"}}},
      {"w13 128x256x256 w8 m32n32k64", moec::abi::Stage::W13,
       {{"m", "128"}, {"n", "256"}, {"k", "256"}, {"waves", "8"},
        {"mfma", "m32n32k64"}, {"orientation", "b_major"},
        {"swiglu_limit", "10"}}},
      {"w2 128x256x256 w8 m32n32k64", moec::abi::Stage::W2,
       {{"m", "128"}, {"n", "256"}, {"k", "256"}, {"waves", "8"},
        {"mfma", "m32n32k64"}, {"orientation", "b_major"}}},
  };
  mlir::MLIRContext context;
  prepareContext(context);
  uint64_t totalMfmas = 0;
  double totalSeconds = 0.0, totalCpu = 0.0;
  for (size_t index = 0; index < cases.size(); ++index) {
    const Case &c = cases[index];
    BuiltKernel kernel;
    std::string error;
    if (mlir::failed(buildKernelIR(context, specOf(c), kernel, error)) ||
        (!dumpDir.empty() && !dumpIR(kernel, irPath(dumpDir, index), error)) ||
        (!irDir.empty() &&
         !loadIR(context, irPath(irDir, index), kernel, error))) {
      std::fprintf(stderr, "%s: %s\n", c.name, error.c_str());
      return 1;
    }
    std::unique_ptr<StageHarness> harness = StageHarness::create(kernel, error);
    if (!harness) {
      std::fprintf(stderr, "%s: %s\n", c.name, error.c_str());
      return 1;
    }
    DataOptions options;
    options.seed = 1;
    options.tokens = 256;
    LaunchConfig launch;
    launch.threads = threads;
    double best = 0.0, bestCpu = 0.0;
    uint64_t mfmas = 0;
    for (int r = 0; r < reps; ++r) {
      LayerData data;
      StageOutcome outcome;
      if (moec::ref::Status status = harness->generate(options, data, 0); !status) {
        std::fprintf(stderr, "%s: %s\n", c.name, status.message().c_str());
        return 1;
      }
      // The run alone: wall time, and CPU time of the process (all
      // threads), which a shared machine's other load does not inflate.
      const double cpu0 = cpuSeconds();
      const auto wall0 = std::chrono::steady_clock::now();
      if (mlir::failed(harness->run(data, 0, launch, outcome, error))) {
        std::fprintf(stderr, "%s: %s\n", c.name, error.c_str());
        return 1;
      }
      const double wall = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - wall0)
                              .count();
      const double cpu = cpuSeconds() - cpu0;
      harness->compare(data, 0, options, outcome);
      if (!outcome.pass) {
        std::fprintf(stderr, "%s: FAIL %s\n", c.name, outcome.summary.c_str());
        return 1;
      }
      mfmas = outcome.run.stats.mfmas;
      best = r == 0 ? wall : std::min(best, wall);
      bestCpu = r == 0 ? cpu : std::min(bestCpu, cpu);
    }
    std::printf("%-32s %9llu MFMAs %8.3f s wall %9.0f MFMA/s, %8.3f s CPU "
                "%9.0f MFMA/CPU-s\n",
                c.name, (unsigned long long)mfmas, best, double(mfmas) / best,
                bestCpu, double(mfmas) / bestCpu);
    totalMfmas += mfmas;
    totalSeconds += best;
    totalCpu += bestCpu;
  }
  std::printf("%-32s %9llu MFMAs %8.3f s wall %9.0f MFMA/s, %8.3f s CPU "
              "%9.0f MFMA/CPU-s (threads %u)\n",
              "total", (unsigned long long)totalMfmas, totalSeconds,
              double(totalMfmas) / totalSeconds, totalCpu,
              double(totalMfmas) / totalCpu, threads);
  return 0;
}
