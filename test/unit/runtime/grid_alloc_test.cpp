// computeLaunchGrid and moec_bundle_kernel_grid run on an engine's hot path,
// once per kernel per batch: with the rules compiled at open they must not
// touch the heap. This executable replaces the global operator new to count
// allocations, so it is separate from moec-runtime-tests.
#include "test_support.h"

#include "moec/bundle.h"
#include "moec/grid_rule.h"
#include "moec/moec_runtime.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<size_t> heapAllocations{0};

void *countedAllocation(size_t size) {
  heapAllocations.fetch_add(1, std::memory_order_relaxed);
  if (void *memory = std::malloc(size ? size : 1))
    return memory;
  throw std::bad_alloc();
}

void *countedAlignedAllocation(size_t size, std::align_val_t alignment) {
  heapAllocations.fetch_add(1, std::memory_order_relaxed);
  const size_t align = static_cast<size_t>(alignment);
  if (void *memory = std::aligned_alloc(align, (size + align - 1) / align * align))
    return memory;
  throw std::bad_alloc();
}
} // namespace

// The nothrow forms of libstdc++ call these.
void *operator new(size_t size) { return countedAllocation(size); }
void *operator new[](size_t size) { return countedAllocation(size); }
void *operator new(size_t size, std::align_val_t alignment) {
  return countedAlignedAllocation(size, alignment);
}
void *operator new[](size_t size, std::align_val_t alignment) {
  return countedAlignedAllocation(size, alignment);
}
void operator delete(void *memory) noexcept { std::free(memory); }
void operator delete[](void *memory) noexcept { std::free(memory); }
void operator delete(void *memory, size_t) noexcept { std::free(memory); }
void operator delete[](void *memory, size_t) noexcept { std::free(memory); }
void operator delete(void *memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void *memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void *memory, size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void *memory, size_t, std::align_val_t) noexcept { std::free(memory); }

using namespace moec::rt;

namespace {

/// sampleManifest() with the grid rules of the shipped bundles: a W13
/// kernel, a W2 kernel and the combine kernel.
std::string manifestWithShippedRules() {
  nlohmann::json manifest = moec::test::sampleManifest();
  const char *rules[3][3] = {{"I / 128", "num_sorted / 64", "1"},
                             {"H / 256", "num_sorted / 128", "1"},
                             {"ceil(num_tokens / 4)", "1", "1"}};
  for (int k = 0; k < 3; ++k)
    manifest["kernels"][k]["launch"]["grid"] = {
        {"x", rules[k][0]}, {"y", rules[k][1]}, {"z", rules[k][2]}};
  return manifest.dump();
}

constexpr int kMaxM = 4096;

/// The variables for batch size m: num_sorted is the routes padded to the
/// largest tile (128), as the sort kernel lays them out.
void variablesFor(int64_t m, RuleVariable (&variables)[5]) {
  const int64_t topK = 6;
  variables[0] = {"H", 7168};
  variables[1] = {"I", 2048};
  variables[2] = {"num_sorted", (m * topK + 127) / 128 * 128};
  variables[3] = {"num_tokens", m};
  variables[4] = {"top_k", topK};
}

} // namespace

TEST_CASE("the allocation counter sees operator new", "[grid][alloc]") {
  const size_t before = heapAllocations.load();
  void *memory = ::operator new(64); // a direct call cannot be elided
  ::operator delete(memory);
  CHECK(heapAllocations.load() - before == 1);
  // ... including the runtime library's: compiling text allocates.
  RuleVariable variables[5];
  variablesFor(100, variables);
  int64_t value = 0;
  std::string error;
  const size_t beforeText = heapAllocations.load();
  REQUIRE(evaluateGridRule("num_sorted / 64", variables, 5, value, error));
  CHECK(heapAllocations.load() - beforeText > 0);
}

TEST_CASE("computeLaunchGrid allocates nothing", "[grid][alloc]") {
  moec::test::TempDir dir;
  const std::string path = dir.file("grid.moeb");
  std::string error;
  REQUIRE(writeBundle(path, manifestWithShippedRules(), moec::test::sampleCodeObjects(),
                      error));
  std::unique_ptr<Bundle> bundle = Bundle::open(path, error);
  REQUIRE(bundle);
  const std::vector<KernelInfo> &kernels = bundle->manifest().kernels;
  REQUIRE(kernels.size() == 3);

  static std::array<uint32_t, 3> grids[kMaxM + 1][3];
  bool allOk = true;
  const size_t before = heapAllocations.load();
  for (int m = 1; m <= kMaxM; ++m) {
    RuleVariable variables[5];
    variablesFor(m, variables);
    for (int k = 0; k < 3; ++k)
      allOk &= computeLaunchGrid(kernels[k], variables, 5, grids[m][k], error);
  }
  const size_t allocations = heapAllocations.load() - before;
  CHECK(allocations == 0);
  REQUIRE(allOk);

  // The same numbers as the one-step text evaluation.
  for (int m = 1; m <= kMaxM; m += 97) {
    RuleVariable variables[5];
    variablesFor(m, variables);
    for (int k = 0; k < 3; ++k) {
      const std::string *texts[3] = {&kernels[k].launch.gridX, &kernels[k].launch.gridY,
                                     &kernels[k].launch.gridZ};
      for (int d = 0; d < 3; ++d) {
        int64_t value = 0;
        REQUIRE(evaluateGridRule(*texts[d], variables, 5, value, error));
        CHECK(grids[m][k][d] == value);
      }
    }
  }
  CHECK(grids[100][0] == std::array<uint32_t, 3>{16, 10, 1});
  CHECK(grids[100][2] == std::array<uint32_t, 3>{25, 1, 1});
}

TEST_CASE("moec_bundle_kernel_grid allocates nothing", "[grid][alloc]") {
  moec::test::TempDir dir;
  const std::string path = dir.file("grid.moeb");
  std::string error;
  REQUIRE(writeBundle(path, manifestWithShippedRules(), moec::test::sampleCodeObjects(),
                      error));
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(path.c_str(), &bundle) == MOEC_STATUS_OK);

  static uint32_t grids[kMaxM + 1][3][3];
  bool allOk = true;
  const size_t before = heapAllocations.load();
  for (int m = 1; m <= kMaxM; ++m) {
    RuleVariable variables[5];
    variablesFor(m, variables);
    moec_rule_variable_t cVariables[5];
    for (int i = 0; i < 5; ++i)
      cVariables[i] = {variables[i].name.data(), variables[i].value};
    for (uint32_t k = 0; k < 3; ++k)
      allOk &= moec_bundle_kernel_grid(bundle, k, cVariables, 5, grids[m][k]) ==
               MOEC_STATUS_OK;
  }
  const size_t allocations = heapAllocations.load() - before;
  moec_bundle_close(bundle);
  CHECK(allocations == 0);
  REQUIRE(allOk);
  CHECK(grids[100][1][0] == 28);
  CHECK(grids[100][1][1] == 5);
}
