#include "moec/moec_runtime.h"

#include "moec/bundle.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <dlfcn.h>

using namespace moec::test;

namespace {

std::string lastError() { return moec_last_error_message(); }

} // namespace

TEST_CASE("C API: a bundle names the part it was compiled for",
          "[c-api][part]") {
  TempDir dir;
  nlohmann::json manifest = sampleManifest();
  manifest["target"]["compute_units"] = 128;
  std::string error;
  REQUIRE(moec::rt::writeBundle(dir.file("p.moeb"), manifest.dump(),
                                sampleCodeObjects(), error));
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("p.moeb").c_str(), &bundle) ==
          MOEC_STATUS_OK);
  const char *arch = nullptr;
  uint32_t computeUnits = 0;
  REQUIRE(moec_bundle_target_arch(bundle, &arch) == MOEC_STATUS_OK);
  REQUIRE(moec_bundle_target_compute_units(bundle, &computeUnits) ==
          MOEC_STATUS_OK);
  // MI350P: the gfx950 ISA on 128 CUs.
  CHECK(std::string(arch) == "gfx950");
  CHECK(computeUnits == 128);
  moec_bundle_close(bundle);
}

TEST_CASE("C API: open, inspect, select, code objects", "[c-api]") {
  TempDir dir;
  std::string error;
  REQUIRE(moec::rt::writeBundle(dir.file("c.moeb"), sampleManifest().dump(),
                                sampleCodeObjects(), error));
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("c.moeb").c_str(), &bundle) == MOEC_STATUS_OK);
  REQUIRE(bundle);

  const char *arch = nullptr;
  REQUIRE(moec_bundle_target_arch(bundle, &arch) == MOEC_STATUS_OK);
  CHECK(std::string(arch) == "gfx950");
  // The sample manifest records no part: gfx950's first, MI355X.
  uint32_t computeUnits = 0;
  REQUIRE(moec_bundle_target_compute_units(bundle, &computeUnits) ==
          MOEC_STATUS_OK);
  CHECK(computeUnits == 256);
  CHECK(moec_bundle_target_compute_units(bundle, nullptr) ==
        MOEC_STATUS_INVALID_ARGUMENT);

  uint32_t count = 0;
  REQUIRE(moec_bundle_kernel_count(bundle, &count) == MOEC_STATUS_OK);
  CHECK(count == 3);
  moec_kernel_info_t info;
  REQUIRE(moec_bundle_kernel_info(bundle, 2, &info) == MOEC_STATUS_OK);
  CHECK(std::string(info.name) == "moe2_w2_t128x256_aaaa0003");
  CHECK(std::string(info.symbol) == "moe2_w2_t128x256_aaaa0003_kernel");
  CHECK(info.code_object == 1);
  CHECK(info.resources.vgpr == 200);
  CHECK(info.resources.lds_bytes == 98304);
  CHECK(info.workgroup_size[0] == 256);
  CHECK(info.arg_count == 4);
  CHECK(moec_bundle_kernel_info(bundle, 3, &info) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "kernel 3 out of range (3 kernels)");

  uint32_t index = 0;
  CHECK(moec_bundle_find_kernel(bundle, "moe2_w2_t64x128_aaaa0002", &index) == MOEC_STATUS_OK);
  CHECK(index == 1);
  CHECK(moec_bundle_find_kernel(bundle, "nope", &index) == MOEC_STATUS_NOT_FOUND);

  const char *argName = nullptr;
  moec_arg_kind_t kind;
  REQUIRE(moec_bundle_kernel_arg(bundle, 0, 3, &argName, &kind) == MOEC_STATUS_OK);
  CHECK(std::string(argName) == "stride");
  CHECK(kind == MOEC_ARG_I64);

  moec_config_info_t config;
  REQUIRE(moec_bundle_config_info(bundle, 1, &config) == MOEC_STATUS_OK);
  CHECK(std::string(config.id) == "medium");
  CHECK(config.kernel_count == 2);
  CHECK(config.kernels[0] == 1);

  moec_table_t table;
  REQUIRE(moec_bundle_resolve_table(bundle, "flash", 4, 1024, &table) == MOEC_STATUS_OK);
  moec_selection_t selection;
  REQUIRE(moec_bundle_select(bundle, table, 9, &selection) == MOEC_STATUS_OK);
  CHECK(selection.row_m == 12);
  CHECK(selection.config == 1);
  CHECK(selection.exact == 0);
  CHECK(selection.fallback == 0);
  CHECK(selection.kernel_count == 2);
  REQUIRE(moec_bundle_select(bundle, table, 5000, &selection) == MOEC_STATUS_OK);
  CHECK(selection.fallback == 1);
  CHECK(selection.row_m == 64);

  REQUIRE(moec_bundle_resolve_table(bundle, "flash", 4, 2000, &table) == MOEC_STATUS_OK);
  CHECK(moec_bundle_select(bundle, table, 5000, &selection) == MOEC_STATUS_SELECTION_MISS);
  CHECK(lastError() ==
        "flash ep4 ws16384: m 5000 is above the largest row (m 4096) and above_max is 'error'");
  CHECK(moec_bundle_resolve_table(bundle, "flash", 4, 20000, &table) == MOEC_STATUS_NOT_FOUND);
  CHECK(lastError().find("no selection table for network 'flash' ep 4 with workspace class >= "
                         "20000") != std::string::npos);

  const void *data = nullptr;
  size_t size = 0;
  REQUIRE(moec_bundle_code_object(bundle, 1, &data, &size) == MOEC_STATUS_OK);
  CHECK(size == 5000);
  CHECK(std::memcmp(data, sampleCodeObjects()[1].data(), size) == 0);

  writeTextFile(dir.file("o.json"),
                R"([{"network": "flash", "ep": 4, "workspace": 1024,
                     "rows": [{"m": 9, "config": "small"}]}])");
  uint32_t changed = 0;
  REQUIRE(moec_bundle_apply_overrides(bundle, dir.file("o.json").c_str(), &changed) ==
          MOEC_STATUS_OK);
  CHECK(changed == 1);
  REQUIRE(moec_bundle_resolve_table(bundle, "flash", 4, 1024, &table) == MOEC_STATUS_OK);
  REQUIRE(moec_bundle_select(bundle, table, 9, &selection) == MOEC_STATUS_OK);
  CHECK(selection.row_m == 9);
  CHECK(selection.exact == 1);

  // Grid rules: the sample kernels use "ceil(m / 32)", "n / 128", "1".
  const moec_rule_variable_t variables[] = {{"m", 70}, {"n", 1024}};
  uint32_t grid[3] = {0, 0, 0};
  REQUIRE(moec_bundle_kernel_grid(bundle, 0, variables, 2, grid) == MOEC_STATUS_OK);
  CHECK(grid[0] == 3);
  CHECK(grid[1] == 8);
  CHECK(grid[2] == 1);
  CHECK(moec_bundle_kernel_grid(bundle, 0, variables, 1, grid) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "moe2_w2_t32x128_aaaa0001: grid.y: grid rule 'n / 128': unknown name 'n'");

  moec_bundle_close(bundle);
  moec_bundle_close(nullptr);
}

TEST_CASE("C API: failures return status codes and one-line messages", "[c-api]") {
  TempDir dir;
  moec_bundle_t *bundle = nullptr;
  CHECK(moec_bundle_open(dir.file("missing.moeb").c_str(), &bundle) == MOEC_STATUS_IO_ERROR);
  CHECK(bundle == nullptr);
  writeTextFile(dir.file("junk.moeb"), std::string(200, 'j'));
  CHECK(moec_bundle_open(dir.file("junk.moeb").c_str(), &bundle) == MOEC_STATUS_CORRUPT_BUNDLE);
  CHECK(lastError() == dir.file("junk.moeb") + ": not a moec bundle (bad magic)");
  CHECK(moec_bundle_open(nullptr, &bundle) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(moec_status_name(MOEC_STATUS_NO_DEVICE)) == "MOEC_STATUS_NO_DEVICE");

  moec_device_t *device = nullptr;
  CHECK(moec_device_create("/nonexistent/libamdhip64.so", 0, &device) ==
        MOEC_STATUS_NO_HIP_RUNTIME);
  CHECK(lastError() == "no HIP runtime (tried: /nonexistent/libamdhip64.so)");
  CHECK(moec_device_create(MOEC_FAKE_HIP_INCOMPLETE_PATH, 0, &device) ==
        MOEC_STATUS_NO_HIP_RUNTIME);
  ::setenv("MOEC_FAKE_HIP_MODE", "count100", 1);
  CHECK(moec_device_create(MOEC_FAKE_HIP_PATH, 0, &device) == MOEC_STATUS_NO_DEVICE);
  ::unsetenv("MOEC_FAKE_HIP_MODE");
  CHECK(device == nullptr);
}

TEST_CASE("C API: lazy code-object verification", "[c-api]") {
  TempDir dir;
  std::vector<uint8_t> bytes;
  std::string error;
  REQUIRE(moec::rt::serializeBundle(sampleManifest().dump(), sampleCodeObjects(), bytes, error));
  bytes[bytes.size() - 10] ^= 0x40; // inside code object 1 (the last one)
  writeFile(dir.file("bad.moeb"), bytes);
  moec_bundle_t *bundle = nullptr;
  CHECK(moec_bundle_open(dir.file("bad.moeb").c_str(), &bundle) == MOEC_STATUS_CORRUPT_BUNDLE);
  CHECK(moec_bundle_open_with_flags(dir.file("bad.moeb").c_str(), 0x80, &bundle) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  REQUIRE(moec_bundle_open_with_flags(dir.file("bad.moeb").c_str(),
                                      MOEC_BUNDLE_OPEN_VERIFY_CODE_OBJECTS_ON_FIRST_USE,
                                      &bundle) == MOEC_STATUS_OK);
  const void *data = nullptr;
  size_t size = 0;
  CHECK(moec_bundle_code_object(bundle, 0, &data, &size) == MOEC_STATUS_OK);
  CHECK(moec_bundle_code_object(bundle, 1, &data, &size) == MOEC_STATUS_CORRUPT_BUNDLE);
  CHECK(lastError() == dir.file("bad.moeb") + ": code object 1 checksum mismatch");
  moec_bundle_close(bundle);
}

TEST_CASE("C API: launch through the fake HIP library", "[c-api]") {
  TempDir dir;
  std::string error;
  REQUIRE(moec::rt::writeBundle(dir.file("l.moeb"), sampleManifest().dump(),
                                sampleCodeObjects(), error));
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("l.moeb").c_str(), &bundle) == MOEC_STATUS_OK);
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 1, &device) == MOEC_STATUS_OK);
  uint32_t units = 0;
  CHECK(moec_device_compute_units(device, &units) == MOEC_STATUS_OK);
  CHECK(units == 256);
  moec_executable_t *executable = nullptr;
  REQUIRE(moec_executable_create(device, bundle, &executable) == MOEC_STATUS_OK);
  CHECK(moec_executable_load_kernel(executable, 0) == MOEC_STATUS_OK);
  CHECK(moec_executable_load_kernel(executable, 9) == MOEC_STATUS_INVALID_ARGUMENT);

  int buffer[2];
  moec_kernel_arg_t args[4];
  sampleCArgs(args, buffer);
  const uint32_t grid[3] = {4, 1, 1};
  CHECK(moec_executable_launch(executable, 1, grid, args, 4, nullptr) == MOEC_STATUS_OK);
  CHECK(moec_executable_launch(executable, 1, grid, args, 2, nullptr) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "moe2_w2_t64x128_aaaa0002: 2 arguments given, the ABI has 4");
  moec_executable_release(executable);
  moec_device_release(device);
  moec_bundle_close(bundle);
}

TEST_CASE("C API: handles may be released in any order", "[c-api]") {
  // The fake HIP library stays loaded for the test, so its unload counter is
  // the one the runtime's own dlopen handle sees.
  void *fake = ::dlopen(MOEC_FAKE_HIP_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(fake);
  auto unloads = reinterpret_cast<int (*)()>(::dlsym(fake, "fake_hip_unload_count"));
  REQUIRE(unloads);
  TempDir dir;
  std::string error;
  REQUIRE(moec::rt::writeBundle(dir.file("o.moeb"), sampleManifest().dump(),
                                sampleCodeObjects(), error));
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(dir.file("o.moeb").c_str(), &bundle) == MOEC_STATUS_OK);
  moec_device_t *device = nullptr;
  REQUIRE(moec_device_create(MOEC_FAKE_HIP_PATH, 1, &device) == MOEC_STATUS_OK);
  moec_executable_t *executable = nullptr;
  REQUIRE(moec_executable_create(device, bundle, &executable) == MOEC_STATUS_OK);
  REQUIRE(moec_executable_load_kernel(executable, 1) == MOEC_STATUS_OK);
  // The device and the bundle go first, as a language binding's finaliser
  // may release them; the executable still launches, and its release
  // unloads its module through the device it kept.
  moec_device_release(device);
  moec_bundle_close(bundle);
  int buffer[2];
  moec_kernel_arg_t args[4];
  sampleCArgs(args, buffer);
  const uint32_t grid[3] = {4, 1, 1};
  CHECK(moec_executable_launch(executable, 1, grid, args, 4, nullptr) == MOEC_STATUS_OK);
  const int before = unloads();
  moec_executable_release(executable);
  CHECK(unloads() == before + 1);
  ::dlclose(fake);
}

#include "moec/moec_runtime.hpp"

TEST_CASE("C++ RAII wrapper over the C API", "[c-api]") {
  TempDir dir;
  std::string error;
  REQUIRE(moec::rt::writeBundle(dir.file("w.moeb"), sampleManifest().dump(),
                                sampleCodeObjects(), error));
  moec::UniqueBundle bundle;
  REQUIRE(moec::openBundle(dir.file("w.moeb"), bundle) == MOEC_STATUS_OK);
  moec::UniqueDevice device;
  REQUIRE(moec::createDevice(MOEC_FAKE_HIP_PATH, 0, device) == MOEC_STATUS_OK);
  moec::UniqueExecutable executable;
  REQUIRE(moec::createExecutable(device.get(), bundle.get(), executable) == MOEC_STATUS_OK);
  CHECK(moec_executable_load_kernel(executable.get(), 2) == MOEC_STATUS_OK);
  moec::UniqueBundle missing;
  CHECK(moec::openBundle(dir.file("nope.moeb"), missing) == MOEC_STATUS_IO_ERROR);
  CHECK_FALSE(missing);
  CHECK(moec::lastErrorMessage().find("nope.moeb") != std::string::npos);
  moec::UniqueDevice noDevice;
  CHECK(moec::createDevice("/nonexistent/libamdhip64.so", 0, noDevice) ==
        MOEC_STATUS_NO_HIP_RUNTIME);
}
