//===- select_bench.cpp - nanoseconds per kernel selection ------*- C++ -*-===//
//
// Builds a Flash-shaped bundle (EP2/EP4 fixed-slot and compact tables, rows
// at M = 1..64, 6c for c = 1..192 and powers of two up to the workspace),
// opens it, and times select() through the C++ API and the C API over a
// fixed pseudo-random sequence of M values. Then times Bundle::open of a
// 64 MiB bundle (256 code objects of 256 KiB) with the code objects hashed at
// open and with verification on first use. Then AITER's lookup
// (moec_bundle_select_aiter, selectAiter) over 180 rows shaped like the
// sample tables: per-call p50/p99 on 1 and 8 threads and heap allocations
// per selection. Usage:
//   moec-select-bench [iterations [aiter-calls-per-thread]]
//                                    (defaults 20000000, 200000)
//
//===----------------------------------------------------------------------===//
#include "BenchBundle.h"
#include "CountingAllocator.h"
#include "moec/aiter_select.h"
#include "moec/bundle.h"
#include "moec/moec_runtime.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace moec::rt;

namespace {

nlohmann::json flashTable(uint32_t ep, uint32_t workspace, const char *transport,
                          uint32_t configCount) {
  std::set<uint32_t> ms;
  for (uint32_t m = 1; m <= 64; ++m)
    ms.insert(m);
  for (uint32_t c = 1; c <= 192; ++c)
    ms.insert(6 * c);
  for (uint32_t p = 1; p <= workspace; p *= 2)
    ms.insert(p);
  nlohmann::json rows = nlohmann::json::array();
  uint32_t i = 0;
  for (uint32_t m : ms)
    rows.push_back({{"m", m}, {"config", (i++ * 7) % configCount}});
  return {{"network", "flash"}, {"family", "megamoe"},   {"ep", ep},
          {"workspace", workspace}, {"transport", transport}, {"above_max", "largest"},
          {"rows", rows}};
}

std::string buildBundle(size_t &rowCount) {
  const uint32_t configCount = 16;
  nlohmann::json kernels = nlohmann::json::array();
  nlohmann::json configs = nlohmann::json::array();
  for (uint32_t k = 0; k < configCount; ++k) {
    const std::string name = "moe2_w2_bench_" + std::to_string(k);
    kernels.push_back({{"name", name},
                       {"symbol", name},
                       {"code_object", 0},
         {"stage", "w2"},
                       {"launch", {{"workgroup_size", {256, 1, 1}}}},
                       {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}, {"max_flat_workgroup_size", 1024}}}});
    configs.push_back({{"id", "c" + std::to_string(k)}, {"kernels", {k}}});
  }
  nlohmann::json selection = nlohmann::json::array(
      {flashTable(2, 512, "fixed-slot", configCount), flashTable(4, 1024, "fixed-slot", configCount),
       flashTable(2, 8192, "compact", configCount), flashTable(4, 16384, "compact", configCount)});
  rowCount = 0;
  for (const auto &table : selection)
    rowCount += table["rows"].size();
  return moec::bench::writeBenchBundle(kernels, configs, selection,
                                      "select-bench");
}

double nanosecondsSince(std::chrono::steady_clock::time_point start, uint64_t count) {
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / double(count);
}

/// Open cost of a 64 MiB bundle (page cache warm): verification at open
/// hashes every byte; OnFirstUse defers the code objects.
int benchmarkOpen() {
  const uint32_t objectCount = 256;
  const size_t objectSize = 256 * 1024;
  nlohmann::json kernels = nlohmann::json::array();
  std::vector<std::vector<uint8_t>> objects;
  for (uint32_t k = 0; k < objectCount; ++k) {
    const std::string name = "moe2_w2_open_" + std::to_string(k);
    kernels.push_back({{"name", name},
                       {"symbol", name},
                       {"code_object", k},
                       {"launch", {{"workgroup_size", {256, 1, 1}}}},
                       {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}, {"max_flat_workgroup_size", 1024}}}});
    std::vector<uint8_t> object =
        moec::bench::benchCodeObject(objectSize, static_cast<uint8_t>(k));
    objects.push_back(std::move(object));
  }
  nlohmann::json manifest = {{"target", {{"arch", "gfx950"}}},
                             {"kernels", kernels},
                             {"configs", nlohmann::json::array()},
                             {"selection", nlohmann::json::array()}};
  const std::string path = "/tmp/moec-open-bench." + std::to_string(::getpid()) + ".moeb";
  std::string error;
  auto start = std::chrono::steady_clock::now();
  if (!writeBundle(path, manifest.dump(), objects, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  const double writeMs = nanosecondsSince(start, 1) / 1e6;
  double atOpenMs = 0, lazyMs = 0;
  const int repeats = 5;
  for (int r = 0; r < repeats; ++r) {
    start = std::chrono::steady_clock::now();
    auto bundle = Bundle::open(path, error);
    atOpenMs += nanosecondsSince(start, 1) / 1e6 / repeats;
    BundleOpenOptions lazy;
    lazy.codeObjects = CodeObjectVerification::OnFirstUse;
    start = std::chrono::steady_clock::now();
    auto lazyBundle = Bundle::open(path, error, lazy);
    lazyMs += nanosecondsSince(start, 1) / 1e6 / repeats;
    if (!bundle || !lazyBundle) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
  }
  ::unlink(path.c_str());
  std::printf("writeBundle 64 MiB (256 code objects, fsync): %8.1f ms\n", writeMs);
  std::printf("Bundle::open 64 MiB, verify at open:          %8.1f ms\n", atOpenMs);
  std::printf("Bundle::open 64 MiB, verify on first use:     %8.1f ms\n", lazyMs);
  return 0;
}

/// A bundle with 180 AITER rows: 12 keys (inter_dim 256/384/512, topk 6/7
/// with expert 384/385, Silu and Swiglu) times the sample tables' 15 token
/// buckets (1..16384 and 32768), every third row skipped. The timed key is
/// the last one, so each lookup scans every row.
std::string buildAiterBundle(size_t &rowCount) {
  nlohmann::json kernels = nlohmann::json::array();
  kernels.push_back({{"name", "moe1_aiter_bench"},
                     {"symbol", "moe1_aiter_bench"},
                     {"code_object", 0},
         {"stage", "w2"},
                     {"launch", {{"workgroup_size", {256, 1, 1}}}},
                     {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}, {"max_flat_workgroup_size", 1024}}}});
  nlohmann::json manifestJson = {{"target", {{"arch", "gfx950"}}},
                                 {"kernels", kernels},
                                 {"configs", {{{"id", "c0"}, {"kernels", {0}}}}},
                                 {"selection", nlohmann::json::array()}};
  Manifest manifest;
  std::string error;
  if (!parseManifest(manifestJson.dump(), 1, manifest, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(2);
  }
  manifest.sources = {{"dsv4_fp8fp4_tuned_fmoe.csv", "0123456789abcdef"}};
  const uint32_t tokens[] = {1,   2,   4,    8,    16,   32,   64,   128,
                             256, 512, 1024, 2048, 4096, 16384, 32768};
  uint32_t line = 2;
  for (uint32_t inter : {256u, 384u, 512u})
    for (uint32_t topk : {6u, 7u})
      for (const char *act : {"ActivationType.Swiglu", "ActivationType.Silu"})
        for (uint32_t token : tokens) {
          AiterRowInfo r;
          r.gfx = "gfx950";
          r.cuNum = 256;
          r.token = token;
          r.modelDim = 7168;
          r.interDim = inter;
          r.expert = topk == 6 ? 384 : 385;
          r.topk = topk;
          r.actType = act;
          r.dtype = "torch.bfloat16";
          r.qDtypeA = "torch.float8_e4m3fn";
          r.qDtypeW = "torch.float4_e2m1fn_x2";
          r.qType = "QuantType.per_1x32";
          r.useG1u1 = 1;
          r.kernelName1 = "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8";
          r.kernelName2 = "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic";
          r.blockM = 32;
          r.line = line;
          r.config = line % 3 == 0 ? AiterRowInfo::kNoConfig : 0;
          if (!r.compiled())
            r.skipped = "kernelName2 'opus_moe2_x': backend opus";
          ++line;
          manifest.aiterRows.push_back(r);
        }
  rowCount = manifest.aiterRows.size();
  const std::string path =
      "/tmp/moec-aiter-select-bench." + std::to_string(::getpid()) + ".moeb";
  if (!writeBundle(path, serializeManifest(manifest),
                   {moec::bench::benchCodeObject()}, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(2);
  }
  return path;
}

struct Percentiles {
  double p50 = 0, p99 = 0;
};

Percentiles percentiles(std::vector<double> &samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples[samples.size() * 99 / 100]};
}

/// AITER selection latency: each call timed alone (steady_clock; its own
/// cost is printed), M from the compiled buckets only, on `threads` threads
/// at once; the percentiles pool every thread's samples.
int benchmarkAiter(uint64_t callsPerThread) {
  size_t rowCount = 0;
  const std::string path = buildAiterBundle(rowCount);
  moec_bundle_t *bundle = nullptr;
  if (moec_bundle_open(path.c_str(), &bundle) != MOEC_STATUS_OK) {
    std::fprintf(stderr, "%s\n", moec_last_error_message());
    return 2;
  }
  const moec_aiter_column_t key[] = {{"gfx", "gfx950"},
                                     {"cu_num", "256"},
                                     {"model_dim", "7168"},
                                     {"inter_dim", "512"},
                                     {"expert", "385"},
                                     {"topk", "7"},
                                     {"act_type", "ActivationType.Silu"},
                                     {"dtype", "torch.bfloat16"},
                                     {"q_dtype_a", "torch.float8_e4m3fn"},
                                     {"q_dtype_w", "torch.float4_e2m1fn_x2"},
                                     {"q_type", "QuantType.per_1x32"},
                                     {"use_g1u1", "1"},
                                     {"doweight_stage1", "0"}};
  const uint32_t keyCount = sizeof(key) / sizeof(key[0]);
  // M values whose bucket row compiled (the others are refusals, which
  // allocate their message by design).
  std::vector<uint64_t> ms;
  for (uint64_t m = 1; m <= 40000; m += 37) {
    moec_aiter_selection_t s;
    if (moec_bundle_select_aiter(bundle, m, key, keyCount, &s) == MOEC_STATUS_OK)
      ms.push_back(m);
  }
  if (ms.empty()) {
    std::fprintf(stderr, "aiter bench: no M selects a compiled row\n");
    return 2;
  }
  std::string error;
  auto opened = Bundle::open(path, error);
  if (!opened) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  const Manifest &manifest = opened->manifest();
  AiterKeyColumns columns;
  for (const moec_aiter_column_t &c : key)
    columns.set(c.column, c.value);
  const AiterKey cppKey = columns.key();

  // Clock cost: two consecutive reads.
  std::vector<double> clock(100000);
  for (double &c : clock) {
    auto a = std::chrono::steady_clock::now();
    auto b = std::chrono::steady_clock::now();
    c = std::chrono::duration<double, std::nano>(b - a).count();
  }
  const Percentiles clockCost = percentiles(clock);
  std::printf("AITER lookup: %zu rows (1/3 skipped), timed key is the last of 12 "
              "(every row scanned), %zu M values from the compiled buckets; "
              "steady_clock read pair p50 %.1f ns (included below)\n",
              rowCount, ms.size(), clockCost.p50);

  for (int api = 0; api < 2; ++api)
    for (unsigned threads : {1u, 8u}) {
      std::vector<std::vector<double>> samples(threads);
      std::vector<uint64_t> sinks(threads);
      for (unsigned t = 0; t < threads; ++t)
        samples[t].resize(callsPerThread);
      std::vector<std::thread> workers;
      workers.reserve(threads);
      const uint64_t before = heapAllocations();
      for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&, t] {
          uint64_t sink = 0;
          for (uint64_t i = 0; i < callsPerThread; ++i) {
            const uint64_t m = ms[(i * 7 + t) % ms.size()];
            const auto start = std::chrono::steady_clock::now();
            if (api == 0) {
              moec_aiter_selection_t s;
              moec_bundle_select_aiter(bundle, m, key, keyCount, &s);
              sink += s.config;
            } else {
              sink += selectAiter(manifest.aiterRows, cppKey, m).row;
            }
            samples[t][i] = std::chrono::duration<double, std::nano>(
                                std::chrono::steady_clock::now() - start)
                                .count();
          }
          sinks[t] = sink;
        });
      for (std::thread &w : workers)
        w.join();
      // Thread creation allocates; count only the selections' share.
      const uint64_t allocations = heapAllocations() - before;
      std::vector<double> all;
      for (auto &s : samples)
        all.insert(all.end(), s.begin(), s.end());
      const Percentiles p = percentiles(all);
      std::printf("%-26s %u thread%s: p50 %7.1f ns  p99 %7.1f ns  "
                  "(%llu calls; heap allocations in the loop incl. %u thread "
                  "start%s: %llu)\n",
                  api == 0 ? "moec_bundle_select_aiter" : "selectAiter (C++)",
                  threads, threads == 1 ? " " : "s", p.p50, p.p99,
                  static_cast<unsigned long long>(callsPerThread * threads), threads,
                  threads == 1 ? "" : "s",
                  static_cast<unsigned long long>(allocations));
      (void)sinks;
    }
  // Allocations per selection, without threads: exactly zero expected.
  const uint64_t before = heapAllocations();
  uint64_t sink = 0;
  for (uint64_t i = 0; i < callsPerThread; ++i) {
    moec_aiter_selection_t s;
    moec_bundle_select_aiter(bundle, ms[i % ms.size()], key, keyCount, &s);
    sink += s.config;
  }
  const uint64_t allocations = heapAllocations() - before;
  std::printf("moec_bundle_select_aiter: %.6f heap allocations per selection "
              "(%llu calls; checksum %llu)\n",
              double(allocations) / double(callsPerThread),
              static_cast<unsigned long long>(callsPerThread),
              static_cast<unsigned long long>(sink));
  moec_bundle_close(bundle);
  ::unlink(path.c_str());
  return allocations == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  const uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000000ULL;
  size_t rowCount = 0;
  const std::string path = buildBundle(rowCount);
  std::string error;
  auto bundle = Bundle::open(path, error);
  if (!bundle) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }

  // M values: uniform over 0..1100 (covers the EP4 fixed-slot table and its
  // fallback above 1024), from a fixed LCG so every run is the same.
  std::vector<uint32_t> ms(1 << 16);
  uint32_t state = 12345;
  for (uint32_t &m : ms) {
    state = state * 1664525u + 1013904223u;
    m = (state >> 8) % 1101;
  }
  const size_t mask = ms.size() - 1;

  TableHandle table;
  if (!bundle->selector().resolveTable("flash", 4, 1024, table, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  const size_t tableRows = bundle->selector().tables()[table.index].rows.size();

  // Resolve cost (done once per key in an engine).
  const uint64_t resolveIterations = 1000000;
  uint64_t resolveSink = 0;
  auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < resolveIterations; ++i) {
    TableHandle h;
    bundle->selector().resolveTable("flash", 4, 1000 + (i & 15), h, error);
    resolveSink += h.index;
  }
  const double resolveNs = nanosecondsSince(start, resolveIterations);

  // C++ select.
  uint64_t sink = 0;
  const Selector &selector = bundle->selector();
  for (uint64_t i = 0; i < 1000000; ++i) // warm-up
    sink += selector.select(table, ms[i & mask]).config;
  start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i)
    sink += selector.select(table, ms[i & mask]).config;
  const double cppNs = nanosecondsSince(start, iterations);

  // C API select.
  moec_bundle_t *cBundle = nullptr;
  if (moec_bundle_open(path.c_str(), &cBundle) != MOEC_STATUS_OK) {
    std::fprintf(stderr, "%s\n", moec_last_error_message());
    return 2;
  }
  moec_table_t cTable;
  moec_bundle_resolve_table(cBundle, "flash", 4, 1024, &cTable);
  moec_selection_t selection;
  start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    moec_bundle_select(cBundle, cTable, ms[i & mask], &selection);
    sink += selection.config;
  }
  const double cNs = nanosecondsSince(start, iterations);
  moec_bundle_close(cBundle);
  ::unlink(path.c_str());

  std::printf("bundle: %zu selection rows in 4 tables; timed table flash ep4 ws1024 "
              "(%zu rows), m uniform in [0, 1100]\n",
              rowCount, tableRows);
  std::printf("resolveTable:          %8.1f ns per call (%llu calls)\n", resolveNs,
              static_cast<unsigned long long>(resolveIterations));
  std::printf("Selector::select:      %8.2f ns per selection (%llu selections)\n", cppNs,
              static_cast<unsigned long long>(iterations));
  std::printf("moec_bundle_select:    %8.2f ns per selection (%llu selections)\n", cNs,
              static_cast<unsigned long long>(iterations));
  std::printf("(checksum %llu)\n", static_cast<unsigned long long>(sink + resolveSink));
  if (int status = benchmarkOpen())
    return status;
  return benchmarkAiter(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 200000ULL);
}
