//===- select_bench.cpp - nanoseconds per kernel selection ------*- C++ -*-===//
//
// Builds a Flash-shaped bundle (EP2/EP4 fixed-slot and compact tables, rows
// at M = 1..64, 6c for c = 1..192 and powers of two up to the workspace),
// opens it, and times select() through the C++ API and the C API over a
// fixed pseudo-random sequence of M values. Then times Bundle::open of a
// 64 MiB bundle (256 code objects of 256 KiB) with the code objects hashed at
// open and with verification on first use. Usage:
//   moec-select-bench [iterations]   (default 20000000)
//
//===----------------------------------------------------------------------===//
#include "BenchBundle.h"
#include "moec/bundle.h"
#include "moec/moec_runtime.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
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
                       {"launch", {{"workgroup_size", {256, 1, 1}}}},
                       {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}}}});
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
                       {"resources", {{"vgpr", 128}, {"sgpr", 40}, {"lds_bytes", 0}}}});
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
  return benchmarkOpen();
}
