//===- experts_entry_test.cpp - moec_layer_forward_experts's checks -------===//
//
// The experts-only entry through the C API over the fake HIP library: what
// it refuses (with the status and message), what it launches, and that
// only unfused tables without a shared expert take it. Its numbers are
// checked against the oracle on the emulated device by
// test/python/test_experts_entry.py.
//
//===----------------------------------------------------------------------===//
#include "moec/moec_runtime.h"

#include "moec/bundle.h"

#include "test_support.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

using namespace moec::test;
using nlohmann::json;

namespace {

std::string lastError() { return moec_last_error_message(); }

/// A table of one quant kernel for H 256, I 128, 8 routed experts, top-2
/// (FHMoE: 9 experts, top-3 with the shared expert) at EP `ep`, workspace
/// class 16: enough for a layer to plan and launch.
std::string writeQuantTable(const TempDir &dir, const std::string &name, uint32_t ep,
                            bool sharedExpert) {
  const json manifest = quantLayerManifest(16384, sharedExpert, ep);
  std::string error;
  const std::string path = dir.file(name);
  REQUIRE(moec::rt::writeBundle(path, manifest.dump(), {syntheticCodeObject(1500, 1)},
                                error));
  return path;
}

/// A bundle, the fake HIP device, an executable and one layer, released in
/// order.
struct FakeLayer {
  FakeLayer(const std::string &path, uint32_t ep, uint32_t rank) {
    REQUIRE(moec_bundle_open(path.c_str(), &bundle) == MOEC_STATUS_OK);
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    REQUIRE(moec_executable_create(device, bundle, &executable) == MOEC_STATUS_OK);
    moec_table_t table;
    REQUIRE(moec_bundle_resolve_table(bundle, "flash", ep, 16, &table) == MOEC_STATUS_OK);
    const moec_layer_problem_t problem = {256, 128, 8, 2, rank, ep, 16};
    REQUIRE(moec_layer_create(executable, table, &problem, &layer) == MOEC_STATUS_OK);
  }
  ~FakeLayer() {
    moec_layer_release(layer);
    moec_executable_release(executable);
    moec_device_release(device);
    moec_bundle_close(bundle);
  }
  /// Binds a workspace and placeholder weights (the fake kernels read none).
  void bind() {
    moec_layer_memory_t memory;
    REQUIRE(moec_layer_memory(layer, &memory) == MOEC_STATUS_OK);
    storage.assign(memory.workspace_bytes + 256, 0);
    const uintptr_t address = reinterpret_cast<uintptr_t>(storage.data());
    void *workspace = storage.data() + (256 - address % 256) % 256;
    REQUIRE(moec_layer_bind_workspace(layer, workspace, memory.workspace_bytes) ==
            MOEC_STATUS_OK);
    moec_layer_weights_t weights = {};
    weights.w13 = weights.w13_scale = weights.w2 = weights.w2_scale = storage.data();
    REQUIRE(moec_layer_bind_weights(layer, &weights) == MOEC_STATUS_OK);
  }
  moec_bundle_t *bundle = nullptr;
  moec_device_t *device = nullptr;
  moec_executable_t *executable = nullptr;
  moec_layer_t *layer = nullptr;
  std::vector<uint8_t> storage;
};

} // namespace

TEST_CASE("the experts-only entry checks its rows and counts", "[layer][experts]") {
  TempDir dir;
  FakeLayer f(writeQuantTable(dir, "ep2.moeb", 2, false), 2, 1);
  std::vector<uint16_t> hidden(16 * 256);
  std::vector<int32_t> ids(16 * 2, -1);
  std::vector<float> weights(16 * 2, 0.5f);
  std::vector<uint16_t> out(16 * 256);
  moec_expert_rows_t rows = {4, hidden.data(), ids.data(), weights.data(), nullptr,
                             out.data()};

  CHECK(moec_layer_forward_experts(nullptr, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "moec_layer_forward_experts: null layer or rows");
  CHECK(moec_layer_forward_experts(f.layer, nullptr, nullptr) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer forward: no workspace bound");
  f.bind();

  // Four local experts (8 at EP 2): counts over the 8 slots of 4 rows.
  const uint32_t tooMany[4] = {4, 4, 1, 0};
  rows.expert_counts = tooMany;
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer forwardExperts: the expert counts sum to 9 routes, more "
                       "than the 8 slots of 4 rows");
  uint32_t config = 0, launches = 7;
  const uint32_t counts[4] = {2, 2, 2, 2};
  rows.expert_counts = counts;
  rows.rows = 17;
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer forward: M 17 above the layer's 16 tokens (its workspace "
                       "capacity)");
  rows.rows = 4;
  rows.hidden = nullptr;
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer forward: null hidden, topk_ids, topk_weights or out");
  rows.hidden = hidden.data();

  REQUIRE(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_OK);
  REQUIRE(moec_layer_last_forward(f.layer, &config, &launches) == MOEC_STATUS_OK);
  CHECK(config == 0);
  CHECK(launches == 1); // the table's one kernel
  rows.rows = 0; // nothing delivered: nothing launched
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer forwardExperts: the expert counts sum to 8 routes, more "
                       "than the 0 slots of 0 rows");
  rows.expert_counts = nullptr;
  REQUIRE(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_OK);
  REQUIRE(moec_layer_last_forward(f.layer, &config, &launches) == MOEC_STATUS_OK);
  CHECK(launches == 0);
}

TEST_CASE("the experts-only entry refuses a table with a shared expert",
          "[layer][experts]") {
  TempDir dir;
  FakeLayer f(writeQuantTable(dir, "fhmoe.moeb", 1, true), 1, 0);
  std::vector<uint16_t> rowsMemory(4 * 256);
  std::vector<int32_t> ids(4 * 2, 0);
  std::vector<float> weights(4 * 2, 1.0f);
  moec_expert_rows_t rows = {4, rowsMemory.data(), ids.data(), weights.data(), nullptr,
                             rowsMemory.data()};
  CHECK(moec_layer_forward_experts(f.layer, &rows, nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError().find("an FHMoE table adds its shared expert to every token") !=
        std::string::npos);
}

TEST_CASE("an FHMoE table whose sort lacks shared_last_route is refused",
          "[layer][fhmoe]") {
  // The quant table with a shared expert plus a sort kernel of the same
  // problem: without shared_last_route a routed id of E would reach the
  // shared expert, so layer create refuses it by name.
  for (const bool sharedLastRoute : {false, true}) {
    TempDir dir;
    json manifest = quantLayerManifest(16384, true, 1);
    json sort = manifest["kernels"][0];
    sort["name"] = "moe_sort_e9_k3_m16_w4";
    sort["stage"] = "sort";
    sort["attributes"].erase("shared_fp8_expert");
    if (sharedLastRoute)
      sort["attributes"]["shared_last_route"] = "unit";
    manifest["kernels"].push_back(sort);
    manifest["configs"][0]["kernels"] = json::array({0, 1});
    std::string error;
    const std::string path = dir.file("fhmoe-sort.moeb");
    REQUIRE(moec::rt::writeBundle(path, manifest.dump(), {syntheticCodeObject(1500, 1)},
                                  error));
    moec_bundle_t *bundle = nullptr;
    moec_device_t *device = nullptr;
    moec_executable_t *executable = nullptr;
    moec_layer_t *layer = nullptr;
    REQUIRE(moec_bundle_open(path.c_str(), &bundle) == MOEC_STATUS_OK);
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    REQUIRE(moec_executable_create(device, bundle, &executable) == MOEC_STATUS_OK);
    moec_table_t table;
    REQUIRE(moec_bundle_resolve_table(bundle, "flash", 1, 16, &table) == MOEC_STATUS_OK);
    const moec_layer_problem_t problem = {256, 128, 8, 2, 0, 1, 16};
    const moec_status_t status = moec_layer_create(executable, table, &problem, &layer);
    const std::string message = status == MOEC_STATUS_OK ? "" : lastError();
    INFO("shared_last_route " << sharedLastRoute << ": " << message);
    if (sharedLastRoute) {
      CHECK(message.find("shared_last_route") == std::string::npos);
    } else {
      CHECK(status == MOEC_STATUS_INVALID_ARGUMENT);
      CHECK(message.find("moe_sort_e9_k3_m16_w4") != std::string::npos);
      CHECK(message.find("an FHMoE table's sort and combine need shared_last_route") !=
            std::string::npos);
    }
    moec_layer_release(layer);
    moec_executable_release(executable);
    moec_device_release(device);
    moec_bundle_close(bundle);
  }
}
