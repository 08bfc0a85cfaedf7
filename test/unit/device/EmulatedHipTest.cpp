//===- EmulatedHipTest.cpp - the runtime on the emulated HIP device -------===//
//
// The runtime's C API (bundle -> device -> executable -> launch) over
// libmoec_emulated_hip.so: a W2 kernel of a bundle compiled from
// test/lit/Inputs/small.table runs on the emulator from the IR stored with
// its code object and matches the reference oracle within the W2 harness's
// tolerance; a code object without registered IR is refused; an argument
// pointing into no allocation fails the launch with a message.
//
//===----------------------------------------------------------------------===//

#include "moec/Harness/BundleKernels.h"
#include "moec/Harness/StageHarness.h"
#include "moec/bundle.h"
#include "moec/emulated_hip.h"
#include "moec/moec_runtime.h"
#include "moec/target/target_info.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <string>
#include <algorithm>
#include <vector>

namespace {

/// The emulated library's entry points, from the same dlopen'ed instance
/// the runtime uses (dlopen of the same path returns the loaded library).
struct EmulatedHip {
  void *handle = nullptr;
  int (*malloc)(void **, size_t) = nullptr;
  int (*free)(void *) = nullptr;
  int (*memcpy)(void *, const void *, size_t, int) = nullptr;
  int (*synchronize)() = nullptr;
  int (*moduleLoadData)(void **, const void *) = nullptr;
  int (*deviceGetAttribute)(int *, int, int) = nullptr;
  const char *(*lastError)() = nullptr;

  EmulatedHip() {
    handle = ::dlopen(MOEC_EMULATED_HIP_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      return;
    resolve(malloc, "hipMalloc");
    resolve(free, "hipFree");
    resolve(memcpy, "hipMemcpy");
    resolve(synchronize, "hipDeviceSynchronize");
    resolve(moduleLoadData, "hipModuleLoadData");
    resolve(deviceGetAttribute, "hipDeviceGetAttribute");
    resolve(lastError, "moecEmulatedLastError");
  }
  ~EmulatedHip() {
    if (handle)
      ::dlclose(handle);
  }
  template <typename F> void resolve(F &pointer, const char *name) {
    pointer = reinterpret_cast<F>(::dlsym(handle, name));
  }
  bool complete() const {
    return malloc && free && memcpy && synchronize && moduleLoadData &&
           deviceGetAttribute && lastError;
  }
};

constexpr int kHostToDevice = 1, kDeviceToHost = 2;

/// A device buffer holding `bytes` (only the bytes `written` flags, when
/// given, are copied in; the rest stays poisoned).
void *upload(EmulatedHip &hip, const void *bytes, size_t size,
             size_t chunk = 0, const std::vector<uint8_t> &present = {}) {
  void *pointer = nullptr;
  REQUIRE(hip.malloc(&pointer, size) == 0);
  if (present.empty()) {
    REQUIRE(hip.memcpy(pointer, bytes, size, kHostToDevice) == 0);
    return pointer;
  }
  for (size_t e = 0; e < present.size(); ++e)
    if (present[e])
      REQUIRE(hip.memcpy(static_cast<uint8_t *>(pointer) + e * chunk,
                         static_cast<const uint8_t *>(bytes) + e * chunk, chunk,
                         kHostToDevice) == 0);
  return pointer;
}

/// The bundle, the emulated device and an executable over them.
struct RuntimeFixture {
  moec_bundle_t *bundle = nullptr;
  moec_device_t *device = nullptr;
  moec_executable_t *executable = nullptr;
  uint32_t w2Kernel = 0;
  /// The W2 kernel's description (name, arguments, launch geometry).
  moec_kernel_info_t w2Info;

  RuntimeFixture() {
    REQUIRE(moec_bundle_open(MOEC_SMALL_BUNDLE, &bundle) == MOEC_STATUS_OK);
    INFO(moec_last_error_message());
    REQUIRE(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 0, &device) ==
            MOEC_STATUS_OK);
    REQUIRE(moec_executable_create(device, bundle, &executable) ==
            MOEC_STATUS_OK);
    REQUIRE(moec_bundle_kernel_info(bundle, w2Kernel, &w2Info) ==
            MOEC_STATUS_OK);
    REQUIRE(std::string(w2Info.stage) == "w2");
  }
  /// The W2 kernel's arguments in order: each buffer from
  /// `bufferFor(name, index)`, each scalar `scalar`.
  template <typename BufferFor>
  std::vector<moec_kernel_arg_t> w2Arguments(int32_t scalar, BufferFor bufferFor) {
    std::vector<moec_kernel_arg_t> args(w2Info.arg_count);
    for (uint32_t i = 0; i < w2Info.arg_count; ++i) {
      const char *name = nullptr;
      moec_arg_kind_t kind;
      REQUIRE(moec_bundle_kernel_arg(bundle, w2Kernel, i, &name, &kind) ==
              MOEC_STATUS_OK);
      args[i].kind = kind;
      if (kind == MOEC_ARG_BUFFER)
        args[i].value.buffer = bufferFor(std::string(name), i);
      else
        args[i].value.i32 = scalar;
    }
    return args;
  }

  /// Launches the W2 kernel on one workgroup with `args`.
  moec_status_t launchW2OneWorkgroup(const std::vector<moec_kernel_arg_t> &args) {
    const uint32_t grid[3] = {1, 1, 1};
    return moec_executable_launch(executable, w2Kernel, grid, args.data(),
                                  w2Info.arg_count, nullptr);
  }

  ~RuntimeFixture() {
    moec_executable_release(executable);
    moec_device_release(device);
    moec_bundle_close(bundle);
  }
};

} // namespace

TEST_CASE("the emulated device reports gfx950's facts", "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 0, &device) ==
          MOEC_STATUS_OK);
  uint32_t computeUnits = 0;
  REQUIRE(moec_device_compute_units(device, &computeUnits) == MOEC_STATUS_OK);
  CHECK(computeUnits == moec::target::defaultTarget().computeUnits);
  int warp = 0, lds = 0;
  REQUIRE(hip.deviceGetAttribute(&warp, 87, 0) == 0);
  REQUIRE(hip.deviceGetAttribute(&lds, 74, 0) == 0);
  CHECK(warp == 64);
  CHECK(lds == 160 * 1024);
  moec_device_release(device);
  // One device unless MOEC_EMULATED_DEVICES says more.
  CHECK(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 1, &device) !=
        MOEC_STATUS_OK);
  CHECK_THAT(std::string(moec_last_error_message()),
             Catch::Contains("out of range (1 devices)"));
}

// The part comes from $MOEC_EMULATED_TARGET, read once per process: CTest
// runs this case again as device-part-mi350p with MOEC_EMULATED_TARGET=mi350p.
TEST_CASE("the emulated device is the part MOEC_EMULATED_TARGET names",
          "[device][part]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  const char *name = std::getenv("MOEC_EMULATED_TARGET");
  const std::string partName = name ? name : "";
  const moec::target::TargetInfo *part =
      moec::target::lookupTargetInfoOrDefault(partName);
  REQUIRE(part);
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 0, &device) ==
          MOEC_STATUS_OK);
  uint32_t computeUnits = 0;
  REQUIRE(moec_device_compute_units(device, &computeUnits) == MOEC_STATUS_OK);
  CHECK(computeUnits == part->computeUnits);
  int multiprocessors = 0, warp = 0;
  REQUIRE(hip.deviceGetAttribute(&multiprocessors, 63, 0) == 0);
  REQUIRE(hip.deviceGetAttribute(&warp, 87, 0) == 0);
  CHECK(uint32_t(multiprocessors) == part->computeUnits);
  CHECK(uint32_t(warp) == part->wavefrontSize);
  // MI350P is half of MI355X: four of the eight XCDs (docs/targets.md).
  if (partName == "mi350p")
    CHECK(computeUnits == 128);
  else
    CHECK(computeUnits == 256);
  moec_device_release(device);
}

TEST_CASE("a bundle's W2 kernel runs through the runtime and matches the "
          "oracle",
          "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  RuntimeFixture runtime;

  // The data, generated as the W2 harness does, for the kernel the bundle
  // stores (its shape from the manifest's attributes).
  std::string error;
  auto bundle = moec::rt::Bundle::open(MOEC_SMALL_BUNDLE, error);
  REQUIRE(bundle);
  mlir::MLIRContext context;
  moec::emu::prepareContext(context);
  moec::emu::BuiltKernel kernel;
  INFO(error);
  REQUIRE(mlir::succeeded(moec::emu::loadBundleKernel(
      context, *bundle, runtime.w2Kernel, kernel, error)));
  std::unique_ptr<moec::emu::StageHarness> harness =
      moec::emu::StageHarness::create(kernel, error);
  REQUIRE(harness);
  const moec::emu::StageShape &shape = harness->shape();
  REQUIRE(shape.splitK == 1);
  moec::emu::DataOptions options;
  options.seed = 7;
  options.tokens = 24;
  moec::emu::LayerData data;
  const moec::ref::Status generated = harness->generate(options, data, 0);
  INFO(generated.message());
  REQUIRE(generated);
  moec::emu::RankData &mine = data.rank(0);
  const int64_t numRoutes = data.numRoutes();
  REQUIRE(mine.sorted.numTiles() > 0);

  // Device buffers in the kernel's layout; weights of experts no tile
  // selects stay poisoned, as in the harness.
  const size_t experts = mine.w2.present.empty() ? 1 : mine.w2.present.size();
  std::map<std::string, void *> buffers;
  buffers["a"] = upload(hip, mine.intermediate.codes.data(),
                        mine.intermediate.codes.size());
  buffers["a_scale"] = upload(hip, mine.intermediate.scales.data(),
                              mine.intermediate.scales.size());
  buffers["b"] = upload(hip, mine.w2.packed.data(), mine.w2.packed.size(),
                        mine.w2.packed.size() / experts, mine.w2.present);
  buffers["b_scale"] = upload(hip, mine.w2.scales.data(), mine.w2.scales.size(),
                              mine.w2.scales.size() / experts, mine.w2.present);
  buffers["sorted_routes"] =
      upload(hip, mine.sorted.routeIds.data(), mine.sorted.routeIds.size() * 4);
  buffers["tile_experts"] = upload(hip, mine.sorted.tileExperts.data(),
                                   mine.sorted.tileExperts.size() * 4);
  const size_t outElements = size_t(numRoutes * shape.hidden);
  void *out = nullptr;
  REQUIRE(hip.malloc(&out, outElements * 2) == 0);
  buffers["out"] = out;
  // A fresh allocation is poisoned: unwritten, every byte 0xFF (NaN).
  std::vector<uint16_t> outBits(outElements, 0);
  REQUIRE(hip.memcpy(outBits.data(), out, outElements * 2, kDeviceToHost) == 0);
  for (uint16_t bits : outBits)
    REQUIRE(bits == 0xFFFF);
  const std::map<std::string, int64_t> scalars = {
      {"num_routes", numRoutes},
      {"num_sorted", int64_t(mine.sorted.routeIds.size())}};

  std::vector<moec_kernel_arg_t> args(runtime.w2Info.arg_count);
  for (uint32_t i = 0; i < runtime.w2Info.arg_count; ++i) {
    const char *name = nullptr;
    moec_arg_kind_t kind;
    REQUIRE(moec_bundle_kernel_arg(runtime.bundle, runtime.w2Kernel, i, &name,
                                   &kind) == MOEC_STATUS_OK);
    INFO(name);
    args[i].kind = kind;
    if (kind == MOEC_ARG_BUFFER) {
      REQUIRE(buffers.count(name));
      args[i].value.buffer = buffers[name];
    } else {
      REQUIRE(scalars.count(name));
      REQUIRE(kind == MOEC_ARG_I32);
      args[i].value.i32 = int32_t(scalars.at(name));
    }
  }
  const moec_rule_variable_t variables[] = {
      {"H", shape.hidden},
      {"I", shape.intermediate},
      {"num_sorted", int64_t(mine.sorted.routeIds.size())},
      {"num_routes", numRoutes},
  };
  uint32_t grid[3];
  REQUIRE(moec_bundle_kernel_grid(runtime.bundle, runtime.w2Kernel, variables,
                                  4, grid) == MOEC_STATUS_OK);
  CHECK(grid[0] == uint32_t(shape.hidden / shape.tileN));
  CHECK(grid[1] == uint32_t(mine.sorted.numTiles()));

  const moec_status_t launched =
      moec_executable_launch(runtime.executable, runtime.w2Kernel, grid,
                             args.data(), runtime.w2Info.arg_count, nullptr);
  INFO(moec_last_error_message());
  REQUIRE(launched == MOEC_STATUS_OK);
  REQUIRE(hip.synchronize() == 0);
  REQUIRE(hip.memcpy(outBits.data(), out, outElements * 2, kDeviceToHost) == 0);

  // The harness's comparison on the rows the runtime's launch produced; an
  // element is written when it is no longer the poison (a kernel never
  // stores 0xFFFF, a NaN, and the comparison fails on non-finite values).
  mine.rows = moec::emu::RouteRows();
  mine.rows.splitK = 1;
  mine.rows.bf16 = outBits;
  mine.rows.written.resize(outElements);
  for (size_t i = 0; i < outElements; ++i)
    mine.rows.written[i] = outBits[i] != 0xFFFF;
  mine.hasRows = true;
  moec::emu::StageOutcome outcome;
  outcome.launched = true;
  harness->compare(data, 0, options, outcome);
  INFO(outcome.summary);
  CHECK(outcome.elementsChecked > 0);
  CHECK(outcome.pass);
  CHECK(outcome.relL2 <= outcome.relL2Bound);
  CHECK(outcome.elementsOverTolerance == 0);
  CHECK(outcome.listedRowsUnwritten == 0);
  CHECK(outcome.unlistedRowsWritten == 0);

  for (auto &entry : buffers)
    REQUIRE(hip.free(entry.second) == 0);
}

TEST_CASE("a code object whose IR was never registered is refused",
          "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(MOEC_SMALL_BUNDLE, &bundle) == MOEC_STATUS_OK);
  const void *data = nullptr;
  size_t size = 0;
  REQUIRE(moec_bundle_code_object(bundle, 0, &data, &size) == MOEC_STATUS_OK);
  // The same code object with one byte of the ELF identification's padding
  // (EI_PAD, ignored by every reader) changed: no IR is registered for
  // these bytes.
  std::vector<uint8_t> changed(static_cast<const uint8_t *>(data),
                               static_cast<const uint8_t *>(data) + size);
  changed[10] ^= 0x5A;
  void *module = nullptr;
  CHECK(hip.moduleLoadData(&module, changed.data()) == 200);
  CHECK(module == nullptr);
  CHECK_THAT(hip.lastError(),
             Catch::Contains("no kernel IR is registered for code object"));
  // Not an ELF image at all.
  const char text[] = "not a code object, but long enough to hold a header....";
  CHECK(hip.moduleLoadData(&module, text) == 200);
  moec_bundle_close(bundle);
}

TEST_CASE("an argument pointing into no allocation fails the launch",
          "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  RuntimeFixture runtime;
  void *device = nullptr;
  REQUIRE(hip.malloc(&device, 4096) == 0);
  std::vector<uint8_t> host(4096);
  int outIndex = -1;
  // `out` is host memory; every other buffer is on the device.
  std::vector<moec_kernel_arg_t> args =
      runtime.w2Arguments(/*scalar=*/32, [&](const std::string &name, uint32_t i) {
        if (name != "out")
          return device;
        outIndex = int(i);
        return static_cast<void *>(host.data());
      });
  REQUIRE(outIndex >= 0);
  CHECK(runtime.launchW2OneWorkgroup(args) != MOEC_STATUS_OK);
  const std::string message = moec_last_error_message();
  INFO(message);
  CHECK_THAT(message, Catch::Contains("argument " + std::to_string(outIndex)));
  CHECK_THAT(message, Catch::Contains("points into no device allocation"));
  // One past the end of an allocation is outside it, too.
  args[size_t(outIndex)].value.buffer = static_cast<uint8_t *>(device) + 4096;
  CHECK(runtime.launchW2OneWorkgroup(args) != MOEC_STATUS_OK);
  CHECK_THAT(std::string(moec_last_error_message()),
             Catch::Contains("points into no device allocation"));
  REQUIRE(hip.free(device) == 0);
}

TEST_CASE("reads of never-written device memory fail the launch",
          "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  RuntimeFixture runtime;
  // Every buffer freshly allocated and never written: the route list the
  // kernel reads first is poison, which the detector reports.
  std::vector<void *> buffers;
  std::vector<moec_kernel_arg_t> args =
      runtime.w2Arguments(/*scalar=*/32, [&](const std::string &, uint32_t) {
        void *pointer = nullptr;
        REQUIRE(hip.malloc(&pointer, 1 << 16) == 0);
        buffers.push_back(pointer);
        return pointer;
      });
  CHECK(runtime.launchW2OneWorkgroup(args) != MOEC_STATUS_OK);
  const std::string message = moec_last_error_message();
  INFO(message);
  CHECK_THAT(message, Catch::Contains("hipErrorLaunchFailure"));
  CHECK_THAT(message, Catch::Contains("read of never-written memory"));
  for (void *pointer : buffers)
    REQUIRE(hip.free(pointer) == 0);
}

TEST_CASE("the C API's memory and IPC helpers work on the emulated device",
          "[device]") {
  EmulatedHip hip;
  REQUIRE(hip.complete());
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 0, &device) ==
          MOEC_STATUS_OK);
  REQUIRE(moec_device_make_current(device) == MOEC_STATUS_OK);
  void *buffer = nullptr;
  REQUIRE(moec_device_alloc(device, 4096, &buffer) == MOEC_STATUS_OK);
  std::vector<uint8_t> written(4096), read(4096, 0);
  for (size_t i = 0; i < written.size(); ++i)
    written[i] = uint8_t(i * 37 + 11);
  REQUIRE(moec_device_copy_to_device(device, buffer, written.data(), 4096) ==
          MOEC_STATUS_OK);

  // A handle opened again names the same memory.
  moec_ipc_handle_t handle;
  REQUIRE(moec_device_ipc_handle(device, buffer, &handle) == MOEC_STATUS_OK);
  void *opened = nullptr;
  REQUIRE(moec_device_ipc_open(device, &handle, &opened) == MOEC_STATUS_OK);
  REQUIRE(moec_device_copy_to_host(device, read.data(), opened, 4096) ==
          MOEC_STATUS_OK);
  CHECK(read == written);
  CHECK(moec_device_ipc_close(device, opened) == MOEC_STATUS_OK);

  // Fill, then read back through the original pointer.
  REQUIRE(moec_device_fill(device, buffer, 0x5A, 4096, nullptr) == MOEC_STATUS_OK);
  REQUIRE(moec_device_synchronize(device, nullptr) == MOEC_STATUS_OK);
  REQUIRE(moec_device_copy_to_host(device, read.data(), buffer, 4096) ==
          MOEC_STATUS_OK);
  CHECK(std::count(read.begin(), read.end(), uint8_t(0x5A)) == 4096);

  // A pointer inside an allocation has no handle; the message says why.
  CHECK(moec_device_ipc_handle(device, static_cast<uint8_t *>(buffer) + 64,
                               &handle) == MOEC_STATUS_HIP_ERROR);
  CHECK_THAT(std::string(moec_last_error_message()),
             Catch::Contains("hipIpcGetMemHandle"));
  CHECK(moec_device_free(device, buffer) == MOEC_STATUS_OK);
  moec_device_release(device);
}

namespace {

/// The emulated HIP library, an open bundle, the emulated device and an
/// executable for the layer tests, released in order.
struct LayerFixture {
  explicit LayerFixture(const char *bundlePath) {
    REQUIRE(hip.complete());
    REQUIRE(moec_bundle_open(bundlePath, &bundle) == MOEC_STATUS_OK);
    REQUIRE(moec_device_create(MOEC_EMULATED_HIP_LIBRARY, 0, &device) ==
            MOEC_STATUS_OK);
    REQUIRE(moec_executable_create(device, bundle, &executable) ==
            MOEC_STATUS_OK);
  }
  ~LayerFixture() {
    moec_layer_release(layer);
    moec_executable_release(executable);
    moec_device_release(device);
    moec_bundle_close(bundle);
  }
  /// The bundle's table for `network` at `ep` and `workspace` (required).
  moec_table_t resolveTable(const char *network, uint32_t ep,
                            uint32_t workspace) const {
    moec_table_t table;
    REQUIRE(moec_bundle_resolve_table(bundle, network, ep, workspace, &table) ==
            MOEC_STATUS_OK);
    return table;
  }
  EmulatedHip hip; // first: installed before, and removed after, the rest
  moec_bundle_t *bundle = nullptr;
  moec_device_t *device = nullptr;
  moec_executable_t *executable = nullptr;
  moec_layer_t *layer = nullptr;
};

std::string lastError() { return moec_last_error_message(); }

} // namespace

TEST_CASE("a layer refuses configurations without the input quantisation",
          "[device][layer]") {
  LayerFixture f(MOEC_SMALL_BUNDLE);
  const moec_table_t table = f.resolveTable("tiny", 2, 512);
  moec_layer_problem_t problem = {512, 512, 8, 2, 0, 2, 0};
  CHECK(moec_layer_create(f.executable, table, &problem, &f.layer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("does not start with a quant kernel"));
}

TEST_CASE("a layer checks its problem, its bindings and M", "[device][layer]") {
  LayerFixture f(MOEC_TP4_SMALL_BUNDLE);
  const moec_table_t table = f.resolveTable("flash-tp4", 1, 0);
  // --small: H = I = 512, 4 experts, top-4.
  moec_layer_problem_t problem = {512, 512, 5, 4, 0, 1, 64};
  CHECK(moec_layer_create(f.executable, table, &problem, &f.layer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("compiled for 4 routed experts, top-4"));
  problem.experts = 4;
  problem.hidden = 1024;
  CHECK(moec_layer_create(f.executable, table, &problem, &f.layer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("compiled for hidden 512, the layer "
                                          "asks for 1024"));
  problem.hidden = 512;
  problem.ep_size = 2;
  CHECK(moec_layer_create(f.executable, table, &problem, &f.layer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("the table serves EP 1"));
  problem.ep_size = 1;
  REQUIRE(moec_layer_create(f.executable, table, &problem, &f.layer) ==
          MOEC_STATUS_OK);

  moec_layer_memory_t memory;
  REQUIRE(moec_layer_memory(f.layer, &memory) == MOEC_STATUS_OK);
  CHECK(memory.max_tokens == 64);
  CHECK(memory.peer_bytes == 0);
  CHECK(memory.fused == 0);
  CHECK(memory.workspace_bytes > 64u * 512u);

  // Nothing bound yet.
  int dummy = 0;
  CHECK(moec_layer_forward(f.layer, 8, &dummy, nullptr, nullptr, &dummy,
                           nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("no workspace bound"));
  void *workspace = nullptr;
  REQUIRE(moec_device_alloc(f.device, memory.workspace_bytes, &workspace) ==
          MOEC_STATUS_OK);
  CHECK(moec_layer_bind_workspace(f.layer, workspace,
                                  memory.workspace_bytes - 1) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  REQUIRE(moec_layer_bind_workspace(f.layer, workspace,
                                    memory.workspace_bytes) == MOEC_STATUS_OK);
  moec_layer_weights_t weights = {};
  CHECK(moec_layer_bind_weights(f.layer, &weights) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  weights.w13 = weights.w13_scale = weights.w2 = weights.w2_scale = workspace;
  REQUIRE(moec_layer_bind_weights(f.layer, &weights) == MOEC_STATUS_OK);
  void *peers[1] = {workspace};
  CHECK(moec_layer_bind_peers(f.layer, peers, 1) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("unfused table"));

  // M above the workspace's capacity; M = 0 launches nothing.
  CHECK(moec_layer_forward(f.layer, 65, workspace, static_cast<int32_t *>(workspace),
                           static_cast<float *>(workspace), workspace,
                           nullptr) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("M 65 above the layer's 64 tokens"));
  CHECK(moec_layer_forward(f.layer, 0, nullptr, nullptr, nullptr, nullptr,
                           nullptr) == MOEC_STATUS_OK);
  uint32_t config = 0, launches = 99;
  REQUIRE(moec_layer_last_forward(f.layer, &config, &launches) == MOEC_STATUS_OK);
  CHECK(launches == 0);
  moec_layer_status_t status;
  REQUIRE(moec_layer_read_status(f.layer, &status) == MOEC_STATUS_OK);
  CHECK(status.forwards == 0);
  CHECK(status.overflow_routes == 0);
  CHECK(moec_device_free(f.device, workspace) == MOEC_STATUS_OK);
}

TEST_CASE("a layer whose kernels take per-expert biases needs them bound",
          "[device][layer]") {
  LayerFixture f(MOEC_BIAS_BUNDLE);
  const moec_table_t table = f.resolveTable("gptoss", 1, 64);
  moec_layer_problem_t problem = {512, 512, 8, 2, 0, 1, 64};
  REQUIRE(moec_layer_create(f.executable, table, &problem, &f.layer) ==
          MOEC_STATUS_OK);
  void *buffer = nullptr;
  REQUIRE(moec_device_alloc(f.device, 1 << 20, &buffer) == MOEC_STATUS_OK);
  moec_layer_weights_t weights = {};
  weights.w13 = weights.w13_scale = weights.w2 = weights.w2_scale = buffer;
  CHECK(moec_layer_bind_weights(f.layer, &weights) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("this table's W13 kernels take a "
                                          "per-expert bias"));
  // W13's bias alone is not enough: its W2 kernels take one too.
  REQUIRE(moec_layer_bind_bias(f.layer, buffer, nullptr) == MOEC_STATUS_OK);
  CHECK(moec_layer_bind_weights(f.layer, &weights) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("this table's W2 kernels take a "
                                          "per-expert bias"));
  REQUIRE(moec_layer_bind_bias(f.layer, buffer, buffer) == MOEC_STATUS_OK);
  CHECK(moec_layer_bind_weights(f.layer, &weights) == MOEC_STATUS_OK);
  CHECK(moec_layer_bind_bias(nullptr, buffer, buffer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(moec_device_free(f.device, buffer) == MOEC_STATUS_OK);
}
