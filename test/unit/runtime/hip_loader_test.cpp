#include "moec/hip_loader.h"

#include "test_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

using namespace moec::rt;
using namespace moec::test;

namespace {

/// Sets an environment variable for the scope, restoring the old value.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    const char *old = std::getenv(name);
    hadOld_ = old != nullptr;
    if (old)
      old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (hadOld_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  bool hadOld_ = false;
  std::string old_;
};

struct FakeLaunch {
  unsigned grid[3];
  unsigned block[3];
  unsigned sharedBytes;
  void *stream;
  size_t kernargSize;
  unsigned char kernarg[256];
  char function[256];
};

/// The fake HIP library, kept loaded for the whole test so its recorded
/// state is shared with the runtime's own dlopen handle.
struct FakeHip {
  FakeHip() {
    handle = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(handle);
    lastImage = reinterpret_cast<const void *(*)()>(::dlsym(handle, "fake_hip_last_image"));
    loadCount = reinterpret_cast<int (*)()>(::dlsym(handle, "fake_hip_load_count"));
    unloadCount = reinterpret_cast<int (*)()>(::dlsym(handle, "fake_hip_unload_count"));
    lastLaunch =
        reinterpret_cast<const FakeLaunch *(*)()>(::dlsym(handle, "fake_hip_last_launch"));
    REQUIRE(lastImage);
    REQUIRE(lastLaunch);
  }
  ~FakeHip() { ::dlclose(handle); }
  void *handle;
  const void *(*lastImage)();
  int (*loadCount)();
  int (*unloadCount)();
  const FakeLaunch *(*lastLaunch)();
};

std::unique_ptr<HipDevice> fakeDevice(std::string &error) {
  auto library = HipLibrary::load({MOEC_FAKE_HIP_PATH}, error);
  REQUIRE(library);
  return HipDevice::create(std::move(library), 0, error);
}

} // namespace

TEST_CASE("no HIP runtime is an error naming every path tried", "[hip]") {
  std::string error;
  auto library = HipLibrary::load({"/nonexistent/libamdhip64.so", "libnot-a-hip.so.9"}, error);
  CHECK_FALSE(library);
  CHECK(error == "no HIP runtime (tried: /nonexistent/libamdhip64.so, libnot-a-hip.so.9)");
  CHECK_FALSE(HipDevice::create(nullptr, 0, error));
  CHECK(error == "no HIP runtime");
}

TEST_CASE("default library candidates", "[hip]") {
  {
    ScopedEnv explicitLibrary("MOEC_HIP_LIBRARY", nullptr);
    ScopedEnv rocm("ROCM_PATH", "/nonexistent/rocm");
    auto candidates = defaultHipLibraryCandidates();
    CHECK(candidates == std::vector<std::string>{"libamdhip64.so", "libamdhip64.so.7",
                                                 "libamdhip64.so.6", "libamdhip64.so.5",
                                                 "/nonexistent/rocm/lib/libamdhip64.so"});
    // This build machine has no HIP runtime: the default search fails cleanly.
    std::string error;
    auto library = HipLibrary::load(candidates, error);
    if (!library)
      CHECK(error.rfind("no HIP runtime (tried: libamdhip64.so, libamdhip64.so.7", 0) == 0);
    else
      WARN("a HIP runtime is installed here: " << library->loadedFrom());
  }
  {
    ScopedEnv explicitLibrary("MOEC_HIP_LIBRARY", "/x/libamdhip64.so");
    CHECK(defaultHipLibraryCandidates() == std::vector<std::string>{"/x/libamdhip64.so"});
  }
  {
    ScopedEnv explicitLibrary("MOEC_HIP_LIBRARY", nullptr);
    ScopedEnv rocm("ROCM_PATH", nullptr);
    CHECK(defaultHipLibraryCandidates().back() == "/opt/rocm/lib/libamdhip64.so");
  }
}

TEST_CASE("the symbol table lists every entry point once", "[hip]") {
  const auto &names = hipSymbolNames();
  CHECK(names.size() == 19);
  for (const char *required : {"hipInit", "hipGetDeviceCount", "hipDeviceGetAttribute",
                               "hipModuleLoadData", "hipModuleGetFunction",
                               "hipModuleLaunchKernel", "hipModuleUnload", "hipGetErrorString",
                               "hipMemsetAsync", "hipMemcpy2DAsync", "hipStreamSynchronize",
                               "hipIpcGetMemHandle", "hipIpcOpenMemHandle",
                               "hipIpcCloseMemHandle"})
    CHECK(std::count_if(names.begin(), names.end(),
                        [&](const char *n) { return std::strcmp(n, required) == 0; }) == 1);
}

TEST_CASE("a library without the timing symbols serves layers, not timing",
          "[hip]") {
  const auto &names = hipTimingSymbolNames();
  CHECK(names.size() == 14);
  std::string error;
  auto library = HipLibrary::load({MOEC_FAKE_HIP_PATH}, error);
  REQUIRE(library);
  CHECK(library->symbols().hipModuleLaunchKernel);
  CHECK(library->timing() == nullptr);
  // Every missing one is named, in table order.
  std::string expected = std::string(MOEC_FAKE_HIP_PATH) + ": missing symbol ";
  for (size_t i = 0; i < names.size(); ++i)
    expected += std::string(i ? ", " : "") + names[i];
  CHECK(library->timingError() == expected);
  CHECK(library->exports("hipModuleLaunchKernel"));
  CHECK_FALSE(library->exports("moecEmulatedRegisterKernelIr"));
  auto device = HipDevice::create(std::move(library), 0, error);
  CHECK(device);
}

TEST_CASE("a library missing a symbol is refused, naming it", "[hip]") {
  std::string error;
  auto library = HipLibrary::load({MOEC_FAKE_HIP_INCOMPLETE_PATH}, error);
  CHECK_FALSE(library);
  CHECK(error == std::string(MOEC_FAKE_HIP_INCOMPLETE_PATH) +
                     ": missing symbol hipModuleLaunchKernel");
}

TEST_CASE("device initialisation failures are errors, not crashes", "[hip]") {
  FakeHip fake;
  std::string error;
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", "init101");
    CHECK_FALSE(fakeDevice(error));
    CHECK(error == "no device (hipInit returned hipErrorInvalidDevice (101))");
  }
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", "count100");
    CHECK_FALSE(fakeDevice(error));
    CHECK(error == "no device (hipGetDeviceCount returned hipErrorNoDevice (100))");
  }
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", "count0");
    CHECK_FALSE(fakeDevice(error));
    CHECK(error == "no device (hipGetDeviceCount reports 0 devices)");
  }
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", nullptr);
    auto library = HipLibrary::load({MOEC_FAKE_HIP_PATH}, error);
    REQUIRE(library);
    CHECK_FALSE(HipDevice::create(std::move(library), 5, error));
    CHECK(error == "device 5 out of range (2 devices)");
    auto device = fakeDevice(error);
    REQUIRE(device);
    CHECK(device->computeUnits() == 256);
    CHECK(device->maxSharedMemoryPerBlock() == 163840);
    CHECK(device->warpSize() == 64);
  }
}

TEST_CASE("kernels load lazily from the mmap and launch with packed arguments", "[hip]") {
  FakeHip fake;
  ScopedEnv mode("MOEC_FAKE_HIP_MODE", nullptr);
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("k.moeb"), sampleManifest().dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("k.moeb"), error);
  REQUIRE(bundle);
  auto device = fakeDevice(error);
  REQUIRE(device);

  const int loadsBefore = fake.loadCount();
  const int unloadsBefore = fake.unloadCount();
  {
    KernelLoader loader(*device, *bundle);
    CHECK(fake.loadCount() == loadsBefore); // nothing loaded up front
    REQUIRE(loader.loadKernel(0, error));
    CodeObjectView object0;
    REQUIRE(bundle->codeObject(0, object0, error));
    CHECK(fake.lastImage() == object0.data); // straight from the mmap, no copy
    CHECK(fake.loadCount() == loadsBefore + 1);
    REQUIRE(loader.loadKernel(1, error)); // same code object: module reused
    REQUIRE(loader.loadKernel(0, error)); // already loaded
    CHECK(fake.loadCount() == loadsBefore + 1);

    int buffer[4];
    const KernelArgValue args[] = {KernelArgValue::buffer(buffer),
                                   KernelArgValue::buffer(buffer + 1),
                                   KernelArgValue::int32(-7), KernelArgValue::int64(1LL << 40)};
    REQUIRE(loader.launch(2, {3, 2, 1}, args, 4, nullptr, error));
    CHECK(fake.loadCount() == loadsBefore + 2); // code object 1 loaded on first launch
    const FakeLaunch &launch = *fake.lastLaunch();
    CHECK(std::string(launch.function) == "moe2_w2_t128x256_aaaa0003_kernel");
    // A metadata-style symbol ("name.kd") is looked up by kernel name.
    CHECK(hipFunctionName(bundle->manifest().kernels[2].symbol + ".kd") ==
          "moe2_w2_t128x256_aaaa0003_kernel");
    CHECK(launch.grid[0] == 3);
    CHECK(launch.grid[1] == 2);
    CHECK(launch.block[0] == 256);
    CHECK(launch.block[1] == 1);
    REQUIRE(launch.kernargSize == 32);
    const void *p0;
    const void *p1;
    int32_t i32;
    int64_t i64;
    std::memcpy(&p0, launch.kernarg, 8);
    std::memcpy(&p1, launch.kernarg + 8, 8);
    std::memcpy(&i32, launch.kernarg + 16, 4);
    std::memcpy(&i64, launch.kernarg + 24, 8);
    CHECK(p0 == buffer);
    CHECK(p1 == buffer + 1);
    CHECK(i32 == -7);
    CHECK(i64 == (1LL << 40));

    CHECK_FALSE(loader.launch(2, {1, 1, 1}, args, 3, nullptr, error));
    CHECK(error == "moe2_w2_t128x256_aaaa0003: 3 arguments given, the ABI has 4");
    const KernelArgValue swapped[] = {args[0], args[1], args[3], args[2]};
    CHECK_FALSE(loader.launch(2, {1, 1, 1}, swapped, 4, nullptr, error));
    CHECK(error == "moe2_w2_t128x256_aaaa0003: argument 2 'm' is i32, given i64");
    CHECK_FALSE(loader.launch(2, {0, 1, 1}, args, 4, nullptr, error));
    CHECK(error.find("grid dimensions must be >= 1") != std::string::npos);
    CHECK_FALSE(loader.loadKernel(3, error));
    CHECK(error.find("kernel 3 out of range (3 kernels)") != std::string::npos);
  }
  CHECK(fake.unloadCount() == unloadsBefore + 2); // both modules unloaded
}

TEST_CASE("load-time checks against device limits and chip", "[hip]") {
  FakeHip fake;
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("k.moeb"), sampleManifest().dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("k.moeb"), error);
  REQUIRE(bundle);
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", "smalllds");
    auto device = fakeDevice(error);
    REQUIRE(device);
    KernelLoader loader(*device, *bundle);
    CHECK(loader.loadKernel(1, error)); // 32 KiB LDS fits
    CHECK_FALSE(loader.loadKernel(2, error));
    CHECK(error == "moe2_w2_t128x256_aaaa0003: needs 98304 bytes of LDS, the device allows 65536");
  }
  {
    ScopedEnv mode("MOEC_FAKE_HIP_MODE", "nobinary");
    auto device = fakeDevice(error);
    REQUIRE(device);
    KernelLoader loader(*device, *bundle);
    CHECK_FALSE(loader.loadKernel(0, error));
    CHECK(error == "moe2_w2_t32x128_aaaa0001: hipModuleLoadData failed: hipErrorNoBinaryForGpu "
                   "(209) (the bundle targets gfx950; this device is a different chip)");
  }
}

TEST_CASE("a kernel the occupancy model cannot place is refused at load", "[hip]") {
  FakeHip fake;
  ScopedEnv mode("MOEC_FAKE_HIP_MODE", nullptr);
  auto manifest = sampleManifest();
  manifest["kernels"][0]["resources"]["vgpr"] = 256;
  manifest["kernels"][0]["launch"]["workgroup_size"] = {1024, 1, 1};
  // Compiled for 1024 lanes (a manifest that says fewer is refused at open).
  manifest["kernels"][0]["resources"]["max_flat_workgroup_size"] = 1024;
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("r.moeb"), manifest.dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("r.moeb"), error);
  REQUIRE(bundle);
  auto device = fakeDevice(error);
  REQUIRE(device);
  KernelLoader loader(*device, *bundle);
  CHECK_FALSE(loader.loadKernel(0, error));
  CHECK(error == "moe2_w2_t32x128_aaaa0001: cannot be resident on gfx950: workgroup needs more "
                 "wave slots than the registers allow");
}

TEST_CASE("a kernel-descriptor symbol is launched by kernel name", "[hip]") {
  FakeHip fake;
  ScopedEnv mode("MOEC_FAKE_HIP_MODE", nullptr);
  auto manifest = sampleManifest();
  manifest["kernels"][1]["symbol"] = "moe2_w2_t64x128_aaaa0002.kd";
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("kd.moeb"), manifest.dump(), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("kd.moeb"), error);
  REQUIRE(bundle);
  auto device = fakeDevice(error);
  REQUIRE(device);
  KernelLoader loader(*device, *bundle);
  const KernelArgValue args[] = {KernelArgValue::buffer(nullptr), KernelArgValue::buffer(nullptr),
                                 KernelArgValue::int32(1), KernelArgValue::int64(2)};
  REQUIRE(loader.launch(1, {1, 1, 1}, args, 4, nullptr, error));
  CHECK(std::string(fake.lastLaunch()->function) == "moe2_w2_t64x128_aaaa0002");
}
