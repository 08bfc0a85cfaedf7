//===- grid_bench.cpp - nanoseconds and allocations per launch grid -*- C++ -*-===//
//
// Opens a bundle whose kernels carry the grid rules of the shipped bundles
// (W13 "I / 128" x "num_sorted / 64", W2 "H / 256" x "num_sorted / 128",
// combine "ceil(num_tokens / 4)") and times one launch grid (x, y and z)
// per call over M = 1..4096: computeLaunchGrid on the programs compiled at
// open, moec_bundle_kernel_grid through the C API, and for comparison the
// text path (evaluateGridRule per dimension, which parses every time). The
// global operator new is replaced (CountingAllocator.cpp) to count heap
// allocations per call.
// Usage:
//   moec-grid-bench [calls]   (default 20000000)
//
//===----------------------------------------------------------------------===//
#include "BenchBundle.h"
#include "CountingAllocator.h"
#include "moec/bundle.h"
#include "moec/grid_rule.h"
#include "moec/moec_runtime.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

using namespace moec::rt;

namespace {

constexpr int kKernels = 3;
constexpr int kMaxM = 4096;

std::string buildBundle() {
  const char *rules[kKernels][3] = {{"I / 128", "num_sorted / 64", "1"},
                                    {"H / 256", "num_sorted / 128", "1"},
                                    {"ceil(num_tokens / 4)", "1", "1"}};
  nlohmann::json kernels = nlohmann::json::array();
  for (int k = 0; k < kKernels; ++k) {
    const std::string name = "moe2_grid_bench_" + std::to_string(k);
    kernels.push_back(
        {{"name", name},
         {"symbol", name},
         {"code_object", 0},
         {"stage", "w2"},
         {"launch",
          {{"workgroup_size", {256, 1, 1}},
           {"grid", {{"x", rules[k][0]}, {"y", rules[k][1]}, {"z", rules[k][2]}}}}},
         {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}, {"max_flat_workgroup_size", 1024}}}});
  }
  return moec::bench::writeBenchBundle(kernels, nlohmann::json::array(),
                                      nlohmann::json::array(), "grid-bench");
}

/// The engine's variables for every M: num_sorted padded to the 128 tile.
struct Batch {
  RuleVariable variables[5];
  moec_rule_variable_t cVariables[5];
};

std::vector<Batch> batches() {
  std::vector<Batch> all(kMaxM);
  for (int m = 1; m <= kMaxM; ++m) {
    const int64_t topK = 6;
    Batch &batch = all[m - 1];
    batch.variables[0] = {"H", 7168};
    batch.variables[1] = {"I", 2048};
    batch.variables[2] = {"num_sorted", (m * topK + 127) / 128 * 128};
    batch.variables[3] = {"num_tokens", m};
    batch.variables[4] = {"top_k", topK};
    for (int i = 0; i < 5; ++i)
      batch.cVariables[i] = {batch.variables[i].name.data(), batch.variables[i].value};
  }
  return all;
}

struct Measure {
  double nanoseconds;
  double allocations;
};

template <typename Call> Measure measure(uint64_t calls, Call call) {
  for (uint64_t i = 0; i < calls / 20 + 1; ++i) // warm-up
    call(i);
  const uint64_t allocationsBefore = heapAllocations();
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < calls; ++i)
    call(i);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return {std::chrono::duration<double, std::nano>(elapsed).count() / double(calls),
          double(heapAllocations() - allocationsBefore) / double(calls)};
}

} // namespace

int main(int argc, char **argv) {
  const uint64_t calls = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000000ULL;
  const std::string path = buildBundle();
  std::string error;
  auto bundle = Bundle::open(path, error);
  moec_bundle_t *cBundle = nullptr;
  if (!bundle || moec_bundle_open(path.c_str(), &cBundle) != MOEC_STATUS_OK) {
    std::fprintf(stderr, "%s\n", bundle ? moec_last_error_message() : error.c_str());
    return 2;
  }
  ::unlink(path.c_str());
  const std::vector<KernelInfo> &kernels = bundle->manifest().kernels;
  const std::vector<Batch> all = batches();
  uint64_t sink = 0, failures = 0;
  // Call i: kernel i % 3 at M = (i / 3) % 4096 + 1.
  auto batchOf = [&](uint64_t i) -> const Batch & { return all[(i / kKernels) % kMaxM]; };

  const Measure compiled = measure(calls, [&](uint64_t i) {
    std::array<uint32_t, 3> grid;
    failures += !computeLaunchGrid(kernels[i % kKernels], batchOf(i).variables, 5, grid, error);
    sink += grid[0] + grid[1] + grid[2];
  });
  const Measure cApi = measure(calls, [&](uint64_t i) {
    uint32_t grid[3];
    failures += moec_bundle_kernel_grid(cBundle, uint32_t(i % kKernels), batchOf(i).cVariables,
                                        5, grid) != MOEC_STATUS_OK;
    sink += grid[0] + grid[1] + grid[2];
  });
  const uint64_t textCalls = calls / 10 + 1;
  const Measure text = measure(textCalls, [&](uint64_t i) {
    const LaunchInfo &launch = kernels[i % kKernels].launch;
    for (const std::string *rule : {&launch.gridX, &launch.gridY, &launch.gridZ}) {
      int64_t value = 0;
      failures += !evaluateGridRule(*rule, batchOf(i).variables, 5, value, error);
      sink += uint64_t(value);
    }
  });
  moec_bundle_close(cBundle);
  if (failures) {
    std::fprintf(stderr, "%llu failed calls: %s\n", static_cast<unsigned long long>(failures),
                 error.c_str());
    return 1;
  }

  std::printf("launch grid (x, y, z) of 3 kernels with the shipped rules, M = 1..%d\n", kMaxM);
  std::printf("computeLaunchGrid (compiled at open): %7.1f ns, %.3f allocations per call "
              "(%llu calls)\n",
              compiled.nanoseconds, compiled.allocations, static_cast<unsigned long long>(calls));
  std::printf("moec_bundle_kernel_grid (C API):      %7.1f ns, %.3f allocations per call "
              "(%llu calls)\n",
              cApi.nanoseconds, cApi.allocations, static_cast<unsigned long long>(calls));
  std::printf("evaluateGridRule x3 (parse each time): %6.1f ns, %.3f allocations per call "
              "(%llu calls)\n",
              text.nanoseconds, text.allocations, static_cast<unsigned long long>(textCalls));
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(sink));
  return 0;
}
