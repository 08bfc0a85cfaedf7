//===- status_test.cpp - every failure class carries its status -----------===//
//
// The status of a failure is decided where it happens (bundle reader, HIP
// loader, kernel loader, layer) and the C API passes it on unchanged. Each
// test provokes one class of failure through the C++ API (Error) and through
// the C API (moec_status_t), and checks the message is the one the
// `std::string &error` overloads give.
//
//===----------------------------------------------------------------------===//
#include "moec/moec_runtime.h"

#include "moec/bundle.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/status.h"

#include "hostile_support.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <iterator>
#include <string>
#include <vector>

using namespace moec::rt;
using namespace moec::test;
using nlohmann::json;

namespace {

std::string lastError() { return moec_last_error_message(); }

/// Sets MOEC_FAKE_HIP_MODE (nullptr: unset) for the scope, then unsets it.
class FakeHipMode {
public:
  explicit FakeHipMode(const char *mode) {
    if (mode)
      ::setenv("MOEC_FAKE_HIP_MODE", mode, 1);
    else
      ::unsetenv("MOEC_FAKE_HIP_MODE");
  }
  ~FakeHipMode() { ::unsetenv("MOEC_FAKE_HIP_MODE"); }
};

/// Writes sampleManifest()'s bundle with code object 1 corrupted, so only
/// lazy verification opens it.
std::string writeCorruptObjectBundle(const TempDir &dir) {
  std::vector<uint8_t> bytes;
  std::string error;
  REQUIRE(serializeBundle(sampleManifest().dump(), sampleCodeObjects(), bytes, error));
  bytes[bytes.size() - 10] ^= 0x40; // inside code object 1 (the last one)
  const std::string path = dir.file("corrupt-object.moeb");
  writeFile(path, bytes);
  return path;
}

std::unique_ptr<HipDevice> fakeDevice() {
  Error error;
  auto library = HipLibrary::load({MOEC_FAKE_HIP_PATH}, error);
  REQUIRE(library);
  auto device = HipDevice::create(std::move(library), 0, error);
  REQUIRE(device);
  return device;
}

std::string writeLayerBundle(const TempDir &dir, const std::string &name,
                             uint32_t ldsBytes = 32768, bool sharedExpert = false) {
  std::string error;
  const std::string path = dir.file(name);
  REQUIRE(writeBundle(path, quantLayerManifest(ldsBytes, sharedExpert).dump(),
                      {syntheticCodeObject(1500, 1)}, error));
  return path;
}

/// A 256-byte aligned pointer into `storage` with room for `bytes` (the fake
/// HIP library's device memory is host memory).
void *alignedWorkspace(std::vector<uint8_t> &storage, uint64_t bytes) {
  storage.assign(bytes + 256, 0);
  const uintptr_t address = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + (256 - address % 256) % 256;
}

LayerProblem layerProblem() {
  LayerProblem problem;
  problem.hidden = 256;
  problem.intermediate = 128;
  problem.experts = 8;
  problem.topK = 2;
  return problem;
}

moec_layer_problem_t cLayerProblem() {
  moec_layer_problem_t problem{};
  problem.hidden = 256;
  problem.intermediate = 128;
  problem.experts = 8;
  problem.top_k = 2;
  problem.ep_size = 1;
  return problem;
}

} // namespace

TEST_CASE("every Status is the moec_status_t of the same name", "[status]") {
  const char *const names[] = {
      "MOEC_STATUS_OK",           "MOEC_STATUS_INVALID_ARGUMENT",
      "MOEC_STATUS_NOT_FOUND",    "MOEC_STATUS_IO_ERROR",
      "MOEC_STATUS_CORRUPT_BUNDLE", "MOEC_STATUS_SELECTION_MISS",
      "MOEC_STATUS_NO_HIP_RUNTIME", "MOEC_STATUS_NO_DEVICE",
      "MOEC_STATUS_HIP_ERROR",    "MOEC_STATUS_RESOURCE_EXCEEDED",
      "MOEC_STATUS_INTERNAL",     "MOEC_STATUS_ROW_NOT_COMPILED"};
  const Status statuses[] = {Status::Ok,
                             Status::InvalidArgument,
                             Status::NotFound,
                             Status::IoError,
                             Status::CorruptBundle,
                             Status::SelectionMiss,
                             Status::NoHipRuntime,
                             Status::NoDevice,
                             Status::HipError,
                             Status::ResourceExceeded,
                             Status::Internal,
                             Status::RowNotCompiled};
  static_assert(std::size(names) == std::size(statuses), "");
  CHECK(int(kLastStatus) + 1 == int(std::size(statuses)));
  for (size_t i = 0; i < std::size(statuses); ++i) {
    INFO(names[i]);
    CHECK(size_t(statuses[i]) == i);
    CHECK(std::string(moec_status_name(static_cast<moec_status_t>(statuses[i]))) ==
          names[i]);
  }
  CHECK(std::string(moec_status_name(static_cast<moec_status_t>(12))) ==
        "MOEC_STATUS_UNKNOWN");

  Error error;
  CHECK(error.status == Status::Ok);
  CHECK_FALSE(error.fail(Status::NoDevice, "no device"));
  CHECK(error.status == Status::NoDevice);
  CHECK(error.message == "no device");
}

TEST_CASE("the bundle reader tells I/O failures from corrupt bytes", "[status]") {
  TempDir dir;
  Error error;
  CHECK_FALSE(Bundle::open(dir.file("missing.moeb"), error));
  CHECK(error.status == Status::IoError);
  CHECK(error.message == dir.file("missing.moeb") + ": cannot open: No such file or directory");

  // A directory exists (the C API's stat passes) but is no bundle file.
  error = Error{};
  CHECK_FALSE(Bundle::open(dir.path(), error));
  CHECK(error.status == Status::IoError);
  CHECK(error.message == dir.path() + ": not a regular file");
  moec_bundle_t *bundle = nullptr;
  CHECK(moec_bundle_open(dir.path().c_str(), &bundle) == MOEC_STATUS_IO_ERROR);
  CHECK(lastError() == dir.path() + ": not a regular file");
  CHECK(bundle == nullptr);

  // Verification failures: magic, a checksum, truncation, the schema.
  writeTextFile(dir.file("junk.moeb"), std::string(200, 'j'));
  error = Error{};
  CHECK_FALSE(Bundle::open(dir.file("junk.moeb"), error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message == dir.file("junk.moeb") + ": not a moec bundle (bad magic)");

  std::vector<uint8_t> bytes;
  std::string text;
  REQUIRE(serializeBundle(sampleManifest().dump(), sampleCodeObjects(), bytes, text));
  auto flipped = bytes;
  flipped[bundle_format::kHeaderSize + 3] ^= 0x01; // inside the manifest
  writeFile(dir.file("flipped.moeb"), flipped);
  error = Error{};
  CHECK_FALSE(Bundle::open(dir.file("flipped.moeb"), error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message == dir.file("flipped.moeb") + ": manifest checksum mismatch");
  CHECK(moec_bundle_open(dir.file("flipped.moeb").c_str(), &bundle) ==
        MOEC_STATUS_CORRUPT_BUNDLE);
  CHECK(lastError() == error.message);

  writeFile(dir.file("cut.moeb"),
            std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  error = Error{};
  CHECK_FALSE(Bundle::open(dir.file("cut.moeb"), error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message.find("truncated") != std::string::npos);

  writeFile(dir.file("schema.moeb"), craftBundle("{}", {}));
  error = Error{};
  CHECK_FALSE(Bundle::open(dir.file("schema.moeb"), error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message.rfind(dir.file("schema.moeb") + ": manifest: ", 0) == 0);

  // The message-only overload gives the same text.
  std::string message;
  CHECK_FALSE(Bundle::open(dir.file("schema.moeb"), message));
  CHECK(message == error.message);
}

TEST_CASE("code-object access: out of range vs checksum mismatch", "[status]") {
  TempDir dir;
  const std::string path = writeCorruptObjectBundle(dir);
  Error error;
  CHECK_FALSE(Bundle::open(path, error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message == path + ": code-object section checksum mismatch");

  BundleOpenOptions lazy;
  lazy.codeObjects = CodeObjectVerification::OnFirstUse;
  auto bundle = Bundle::open(path, error, lazy);
  REQUIRE(bundle);
  CodeObjectView view;
  error = Error{};
  CHECK(bundle->codeObject(0, view, error));
  CHECK(error.status == Status::Ok);
  CHECK_FALSE(bundle->codeObject(1, view, error));
  CHECK(error.status == Status::CorruptBundle);
  CHECK(error.message == path + ": code object 1 checksum mismatch");
  error = Error{};
  CHECK_FALSE(bundle->codeObject(2, view, error));
  CHECK(error.status == Status::InvalidArgument);
  CHECK(error.message == path + ": code object 2 out of range (2 code objects)");
}

TEST_CASE("selection overrides: unreadable file vs refused overrides", "[status]") {
  TempDir dir;
  std::string text;
  REQUIRE(writeBundle(dir.file("o.moeb"), sampleManifest().dump(), sampleCodeObjects(),
                      text));
  auto bundle = Bundle::open(dir.file("o.moeb"), text);
  REQUIRE(bundle);
  OverrideReport report;
  Error error;
  CHECK_FALSE(bundle->applySelectionOverridesFile(dir.file("none.json"), report, error));
  CHECK(error.status == Status::IoError);
  CHECK(error.message == dir.file("none.json") + ": cannot open: No such file or directory");

  writeTextFile(dir.file("bad.json"),
                R"([{"network": "flash", "ep": 4, "workspace": 1024,
                     "rows": [{"m": 9, "config": "no-such-config"}]}])");
  error = Error{};
  CHECK_FALSE(bundle->applySelectionOverridesFile(dir.file("bad.json"), report, error));
  CHECK(error.status == Status::InvalidArgument);
  CHECK(error.message.rfind(dir.file("bad.json") + ": ", 0) == 0);

  moec_bundle_t *handle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("o.moeb").c_str(), &handle) == MOEC_STATUS_OK);
  CHECK(moec_bundle_apply_overrides(handle, dir.file("none.json").c_str(), nullptr) ==
        MOEC_STATUS_IO_ERROR);
  CHECK(moec_bundle_apply_overrides(handle, dir.file("bad.json").c_str(), nullptr) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == error.message);
  moec_bundle_close(handle);
}

TEST_CASE("HIP library and device failures carry their status", "[status]") {
  Error error;
  CHECK_FALSE(HipLibrary::load({"/nonexistent/libamdhip64.so"}, error));
  CHECK(error.status == Status::NoHipRuntime);
  CHECK(error.message == "no HIP runtime (tried: /nonexistent/libamdhip64.so)");
  error = Error{};
  CHECK_FALSE(HipLibrary::load({MOEC_FAKE_HIP_INCOMPLETE_PATH}, error));
  CHECK(error.status == Status::NoHipRuntime);
  CHECK(error.message ==
        std::string(MOEC_FAKE_HIP_INCOMPLETE_PATH) + ": missing symbol hipModuleLaunchKernel");
  error = Error{};
  CHECK_FALSE(HipDevice::create(nullptr, 0, error));
  CHECK(error.status == Status::NoHipRuntime);
  CHECK(error.message == "no HIP runtime");

  // Keep the fake loaded so every load below shares its state.
  void *fake = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake);
  struct Case {
    const char *mode;
    int ordinal;
    Status status;
    moec_status_t cStatus;
    const char *message;
  };
  const Case cases[] = {
      {"init101", 0, Status::NoDevice, MOEC_STATUS_NO_DEVICE,
       "no device (hipInit returned hipErrorInvalidDevice (101))"},
      {"count100", 0, Status::NoDevice, MOEC_STATUS_NO_DEVICE,
       "no device (hipGetDeviceCount returned hipErrorNoDevice (100))"},
      {"count0", 0, Status::NoDevice, MOEC_STATUS_NO_DEVICE,
       "no device (hipGetDeviceCount reports 0 devices)"},
      {nullptr, 5, Status::InvalidArgument, MOEC_STATUS_INVALID_ARGUMENT,
       "device 5 out of range (2 devices)"},
      {nullptr, -1, Status::InvalidArgument, MOEC_STATUS_INVALID_ARGUMENT,
       "device -1 out of range (2 devices)"},
  };
  for (const Case &c : cases) {
    INFO((c.mode ? c.mode : "ok") << ", ordinal " << c.ordinal);
    FakeHipMode mode(c.mode);
    Error failure;
    auto library = HipLibrary::load({MOEC_FAKE_HIP_PATH}, failure);
    REQUIRE(library);
    CHECK_FALSE(HipDevice::create(std::move(library), c.ordinal, failure));
    CHECK(failure.status == c.status);
    CHECK(failure.message == c.message);
    moec_device_t *device = nullptr;
    CHECK(moec_device_create(MOEC_FAKE_HIP_PATH, c.ordinal, &device) == c.cStatus);
    CHECK(lastError() == c.message);
    CHECK(device == nullptr);
  }
  moec_device_t *device = nullptr;
  CHECK(moec_device_create(MOEC_FAKE_HIP_INCOMPLETE_PATH, 0, &device) ==
        MOEC_STATUS_NO_HIP_RUNTIME);
  CHECK(lastError().find(": missing symbol hipModuleLaunchKernel") != std::string::npos);
  ::dlclose(fake);
}

TEST_CASE("kernel loading: range, resources, checksum and HIP failures", "[status]") {
  void *fake = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake);
  TempDir dir;
  std::string text;
  REQUIRE(writeBundle(dir.file("k.moeb"), sampleManifest().dump(), sampleCodeObjects(),
                      text));
  auto bundle = Bundle::open(dir.file("k.moeb"), text);
  REQUIRE(bundle);
  {
    FakeHipMode mode("smalllds");
    auto device = fakeDevice();
    KernelLoader loader(*device, *bundle);
    Error error;
    CHECK_FALSE(loader.loadKernel(3, error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message == dir.file("k.moeb") + ": kernel 3 out of range (3 kernels)");
    error = Error{};
    CHECK_FALSE(loader.loadKernel(2, error));
    CHECK(error.status == Status::ResourceExceeded);
    CHECK(error.message ==
          "moe2_w2_t128x256_aaaa0003: needs 98304 bytes of LDS, the device allows 65536");
  }
  {
    FakeHipMode mode("nobinary");
    auto device = fakeDevice();
    KernelLoader loader(*device, *bundle);
    Error error;
    CHECK_FALSE(loader.loadKernel(0, error));
    CHECK(error.status == Status::HipError);
    CHECK(error.message.find(": hipModuleLoadData failed: hipErrorNoBinaryForGpu (209)") !=
          std::string::npos);
  }
  {
    const std::string path = writeCorruptObjectBundle(dir);
    BundleOpenOptions lazy;
    lazy.codeObjects = CodeObjectVerification::OnFirstUse;
    auto corrupt = Bundle::open(path, text, lazy);
    REQUIRE(corrupt);
    FakeHipMode mode(nullptr);
    auto device = fakeDevice();
    KernelLoader loader(*device, *corrupt);
    Error error;
    CHECK(loader.loadKernel(0, error)); // code object 0 is intact
    CHECK_FALSE(loader.loadKernel(2, error));
    CHECK(error.status == Status::CorruptBundle);
    CHECK(error.message == path + ": code object 1 checksum mismatch");
  }

  // Through the C API: the same failures, the same statuses.
  moec_bundle_t *handle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("k.moeb").c_str(), &handle) == MOEC_STATUS_OK);
  {
    FakeHipMode mode("smalllds");
    moec_device_t *device = nullptr;
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    moec_executable_t *executable = nullptr;
    REQUIRE(moec_executable_create(device, handle, &executable) == MOEC_STATUS_OK);
    CHECK(moec_executable_load_kernel(executable, 2) == MOEC_STATUS_RESOURCE_EXCEEDED);
    CHECK(lastError() ==
          "moe2_w2_t128x256_aaaa0003: needs 98304 bytes of LDS, the device allows 65536");
    CHECK(moec_executable_load_kernel(executable, 9) == MOEC_STATUS_INVALID_ARGUMENT);
    CHECK(lastError() == "kernel 9 out of range (3 kernels)");
    moec_executable_release(executable);
    moec_device_release(device);
  }
  {
    FakeHipMode mode("nobinary");
    moec_device_t *device = nullptr;
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    moec_executable_t *executable = nullptr;
    REQUIRE(moec_executable_create(device, handle, &executable) == MOEC_STATUS_OK);
    CHECK(moec_executable_load_kernel(executable, 0) == MOEC_STATUS_HIP_ERROR);
    CHECK(lastError().find("hipModuleLoadData failed") != std::string::npos);
    moec_executable_release(executable);
    moec_device_release(device);
  }
  moec_bundle_close(handle);
  {
    const std::string path = writeCorruptObjectBundle(dir);
    REQUIRE(moec_bundle_open_with_flags(path.c_str(),
                                        MOEC_BUNDLE_OPEN_VERIFY_CODE_OBJECTS_ON_FIRST_USE,
                                        &handle) == MOEC_STATUS_OK);
    FakeHipMode mode(nullptr);
    moec_device_t *device = nullptr;
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    moec_executable_t *executable = nullptr;
    REQUIRE(moec_executable_create(device, handle, &executable) == MOEC_STATUS_OK);
    CHECK(moec_executable_load_kernel(executable, 0) == MOEC_STATUS_OK);
    CHECK(moec_executable_load_kernel(executable, 2) == MOEC_STATUS_CORRUPT_BUNDLE);
    CHECK(lastError() == path + ": code object 1 checksum mismatch");
    moec_executable_release(executable);
    moec_device_release(device);
    moec_bundle_close(handle);
  }
  ::dlclose(fake);
}

TEST_CASE("launches: bad grids and arguments vs a failing HIP launch", "[status]") {
  void *fake = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake);
  FakeHipMode mode(nullptr);
  // Kernel 0 takes 40 i64 arguments: 320 kernarg bytes, more than the fake
  // hipModuleLaunchKernel records, so it fails that launch (status 1).
  json manifest = sampleManifest();
  json wide = json::array();
  for (int i = 0; i < 40; ++i)
    wide.push_back({{"name", "s" + std::to_string(i)}, {"kind", "i64"}});
  manifest["kernels"][0]["abi"] = wide;
  TempDir dir;
  std::string text;
  REQUIRE(writeBundle(dir.file("l.moeb"), manifest.dump(), sampleCodeObjects(), text));
  auto bundle = Bundle::open(dir.file("l.moeb"), text);
  REQUIRE(bundle);
  auto device = fakeDevice();
  KernelLoader loader(*device, *bundle);

  int buffer[2];
  const KernelArgValue args[] = {KernelArgValue::buffer(buffer),
                                 KernelArgValue::buffer(buffer + 1),
                                 KernelArgValue::int32(12), KernelArgValue::int64(34)};
  Error error;
  uint8_t kernarg[32] = {};
  CHECK_FALSE(loader.launchPacked(1, {1, 1, 1}, kernarg, sizeof(kernarg), nullptr, error));
  CHECK(error.status == Status::InvalidArgument);
  CHECK(error.message == dir.file("l.moeb") + ": kernel 1 is not loaded");
  error = Error{};
  CHECK_FALSE(loader.launch(1, {4, 0, 1}, args, 4, nullptr, error));
  CHECK(error.status == Status::InvalidArgument);
  CHECK(error.message == "moe2_w2_t64x128_aaaa0002: grid dimensions must be >= 1");
  error = Error{};
  CHECK_FALSE(loader.launch(1, {4, 1, 1}, args, 3, nullptr, error));
  CHECK(error.status == Status::InvalidArgument);
  CHECK(error.message == "moe2_w2_t64x128_aaaa0002: 3 arguments given, the ABI has 4");
  error = Error{};
  CHECK(loader.launch(1, {4, 1, 1}, args, 4, nullptr, error));
  std::vector<KernelArgValue> wideArgs(40, KernelArgValue::int64(7));
  CHECK_FALSE(loader.launch(0, {1, 1, 1}, wideArgs.data(), wideArgs.size(), nullptr, error));
  CHECK(error.status == Status::HipError);
  CHECK(error.message ==
        "moe2_w2_t32x128_aaaa0001: hipModuleLaunchKernel failed: hipErrorUnknown (1)");

  moec_bundle_t *handle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("l.moeb").c_str(), &handle) == MOEC_STATUS_OK);
  moec_device_t *cDevice = nullptr;
  REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &cDevice) == MOEC_STATUS_OK);
  moec_executable_t *executable = nullptr;
  REQUIRE(moec_executable_create(cDevice, handle, &executable) == MOEC_STATUS_OK);
  moec_kernel_arg_t cArgs[4];
  sampleCArgs(cArgs, buffer);
  const uint32_t emptyGrid[3] = {0, 1, 1};
  CHECK(moec_executable_launch(executable, 1, emptyGrid, cArgs, 4, nullptr) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "moe2_w2_t64x128_aaaa0002: grid dimensions must be >= 1");
  const uint32_t grid[3] = {4, 1, 1};
  CHECK(moec_executable_launch(executable, 1, grid, cArgs, 4, nullptr) == MOEC_STATUS_OK);
  std::vector<moec_kernel_arg_t> cWide(40);
  for (moec_kernel_arg_t &arg : cWide) {
    arg.kind = MOEC_ARG_I64;
    arg.value.i64 = 7;
  }
  CHECK(moec_executable_launch(executable, 0, grid, cWide.data(), 40, nullptr) ==
        MOEC_STATUS_HIP_ERROR);
  CHECK(lastError() ==
        "moe2_w2_t32x128_aaaa0001: hipModuleLaunchKernel failed: hipErrorUnknown (1)");

  // A grid rule that cannot be evaluated is the caller's values.
  const moec_rule_variable_t variables[] = {{"m", 70}, {"n", 1000}};
  uint32_t out[3];
  CHECK(moec_bundle_kernel_grid(handle, 1, variables, 2, out) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError().find("grid rule 'n / 128' is 125/16, not a whole number") !=
        std::string::npos);

  moec_executable_release(executable);
  moec_device_release(cDevice);
  moec_bundle_close(handle);
  ::dlclose(fake);
}

TEST_CASE("layers: a table that does not fit vs the kernels' own failures", "[status]") {
  void *fake = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake);
  TempDir dir;
  std::string text;
  const std::string path = writeLayerBundle(dir, "layer.moeb");
  auto bundle = Bundle::open(path, text);
  REQUIRE(bundle);
  TableHandle table;
  REQUIRE(bundle->selector().resolveTable("flash", 1, 16, table, text));
  {
    FakeHipMode mode(nullptr);
    auto device = fakeDevice();
    KernelLoader loader(*device, *bundle);
    Error error;
    auto layer = Layer::create(loader, table, layerProblem(), error);
    REQUIRE(layer);
    CHECK_FALSE(Layer::create(loader, TableHandle{7}, layerProblem(), error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message == "layer: invalid table handle");
    LayerProblem wrongHidden = layerProblem();
    wrongHidden.hidden = 512;
    error = Error{};
    CHECK_FALSE(Layer::create(loader, table, wrongHidden, error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message.find("compiled for hidden 256, the layer asks for 512") !=
          std::string::npos);

    LayerStatus status;
    error = Error{};
    CHECK_FALSE(layer->readStatus(status, error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message == "layer status: no workspace bound");
    CHECK(layer->clearStatus(error)); // unfused: nothing to clear
    std::vector<uint8_t> storage;
    void *aligned = alignedWorkspace(storage, layer->memory().workspaceBytes + 256);
    error = Error{};
    CHECK_FALSE(layer->bindWorkspace(aligned, 1, error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message.rfind("layer workspace: 1 bytes, needs ", 0) == 0);
    error = Error{};
    CHECK_FALSE(layer->bindWorkspace(static_cast<uint8_t *>(aligned) + 1,
                                     layer->memory().workspaceBytes, error));
    CHECK(error.status == Status::InvalidArgument);
    CHECK(error.message == "layer workspace: not 256-byte aligned");
    CHECK(layer->bindWorkspace(aligned, layer->memory().workspaceBytes, error));
    CHECK(layer->readStatus(status, error));
  }
  {
    FakeHipMode mode("nobinary");
    auto device = fakeDevice();
    KernelLoader loader(*device, *bundle);
    Error error;
    CHECK_FALSE(Layer::create(loader, table, layerProblem(), error));
    CHECK(error.status == Status::HipError);
    CHECK(error.message.find("moe_quant_aaaa0004: hipModuleLoadData failed") !=
          std::string::npos);
  }
  {
    // The layer keeps the loader's status: a kernel the device cannot run
    // is RESOURCE_EXCEEDED however it is reached.
    const std::string big = writeLayerBundle(dir, "big.moeb", 98304);
    auto bigBundle = Bundle::open(big, text);
    REQUIRE(bigBundle);
    FakeHipMode mode("smalllds");
    auto device = fakeDevice();
    KernelLoader loader(*device, *bigBundle);
    Error error;
    CHECK_FALSE(Layer::create(loader, table, layerProblem(), error));
    CHECK(error.status == Status::ResourceExceeded);
    CHECK(error.message ==
          "moe_quant_aaaa0004: needs 98304 bytes of LDS, the device allows 65536");
  }

  // Through the C API, with an FHMoE table whose workspace binding copies
  // the shared expert's routes (a HIP call that can fail).
  const std::string shared = writeLayerBundle(dir, "shared.moeb", 32768, true);
  moec_bundle_t *handle = nullptr;
  REQUIRE(moec_bundle_open(shared.c_str(), &handle) == MOEC_STATUS_OK);
  moec_table_t cTable;
  REQUIRE(moec_bundle_resolve_table(handle, "flash", 1, 16, &cTable) == MOEC_STATUS_OK);
  const moec_layer_problem_t problem = cLayerProblem();
  {
    FakeHipMode mode("nobinary");
    moec_device_t *device = nullptr;
    REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
    moec_executable_t *executable = nullptr;
    REQUIRE(moec_executable_create(device, handle, &executable) == MOEC_STATUS_OK);
    moec_layer_t *layer = nullptr;
    CHECK(moec_layer_create(executable, cTable, &problem, &layer) == MOEC_STATUS_HIP_ERROR);
    CHECK(lastError().find("hipModuleLoadData failed") != std::string::npos);
    CHECK(layer == nullptr);
    moec_executable_release(executable);
    moec_device_release(device);
  }
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_OK);
  moec_executable_t *executable = nullptr;
  REQUIRE(moec_executable_create(device, handle, &executable) == MOEC_STATUS_OK);
  moec_layer_problem_t wrong = problem;
  wrong.ep_size = 2;
  moec_layer_t *layer = nullptr;
  CHECK(moec_layer_create(executable, cTable, &wrong, &layer) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "flash ep1 ws16: the layer asks for EP size 2, the table serves EP 1");
  REQUIRE(moec_layer_create(executable, cTable, &problem, &layer) == MOEC_STATUS_OK);
  moec_layer_memory_t memory;
  REQUIRE(moec_layer_memory(layer, &memory) == MOEC_STATUS_OK);
  CHECK(memory.shared_expert == 1);
  moec_layer_status_t status;
  CHECK(moec_layer_read_status(layer, &status) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "layer status: no workspace bound");
  std::vector<uint8_t> storage;
  void *workspace = alignedWorkspace(storage, memory.workspace_bytes);
  CHECK(moec_layer_bind_workspace(layer, workspace, 16) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError().rfind("layer workspace: 16 bytes, needs ", 0) == 0);
  {
    FakeHipMode mode("memcpy1");
    CHECK(moec_layer_bind_workspace(layer, workspace, memory.workspace_bytes) ==
          MOEC_STATUS_HIP_ERROR);
    CHECK(lastError() == "layer workspace: writing the shared expert's routes failed: "
                         "hipErrorUnknown (1)");
  }
  CHECK(moec_layer_bind_workspace(layer, workspace, memory.workspace_bytes) ==
        MOEC_STATUS_OK);
  CHECK(moec_layer_read_status(layer, &status) == MOEC_STATUS_OK);
  CHECK(status.forwards == 0);
  moec_layer_release(layer);
  moec_executable_release(executable);
  moec_device_release(device);
  moec_bundle_close(handle);
  ::dlclose(fake);
}
