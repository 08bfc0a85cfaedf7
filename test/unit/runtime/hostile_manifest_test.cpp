// A manifest whose checksums are right can still be hostile: kernel names
// become file names and resource numbers feed the occupancy arithmetic, so
// the reader refuses what no compiler writes, naming the field.
#include "test_support.h"

#include "moec/bundle.h"

#include <catch2/catch.hpp>

using namespace moec::rt;
using namespace moec::test;

namespace {

/// Serialises sampleManifest() with `edit` applied; returns the error.
template <typename Edit> std::string refusal(Edit edit) {
  nlohmann::json manifest = sampleManifest();
  edit(manifest);
  std::vector<uint8_t> bytes;
  std::string error;
  const bool ok =
      serializeBundle(manifest.dump(), sampleCodeObjects(), bytes, error);
  CHECK_FALSE(ok);
  return error;
}

} // namespace

TEST_CASE("kernel names and symbols keep to the identifier alphabet",
          "[bundle][hostile]") {
  const std::string nul("x\0y", 3);
  for (const std::string &name : {std::string("../../x"), std::string("/tmp/x"),
                                  std::string("a/b"), nul, std::string(""),
                                  std::string("9abc"), std::string(300, 'a'),
                                  std::string(".hidden")}) {
    INFO(name);
    std::string error = refusal([&](nlohmann::json &m) {
      m["kernels"][0]["name"] = name;
    });
    CHECK(error.find("kernels[0].name: expected 1 to 255 of [A-Za-z0-9_]") !=
          std::string::npos);
  }
  std::string error = refusal([&](nlohmann::json &m) {
    m["kernels"][1]["symbol"] = "x/../y";
  });
  CHECK(error.find("kernels[1].symbol: expected") != std::string::npos);
}

TEST_CASE("resource numbers beyond the chip are refused", "[bundle][hostile]") {
  struct Case {
    const char *field;
    uint64_t value;
    const char *message;
  } cases[] = {
      {"vgpr", 4294967295u, "kernels[0].resources.vgpr: 4294967295 exceeds the 512 registers"},
      {"agpr", 4000000000u, "kernels[0].resources.agpr: 4000000000 exceeds vgpr"},
      {"sgpr", 1000, "kernels[0].resources.sgpr: 1000 exceeds"},
      {"lds_bytes", 4294967295u, "kernels[0].resources.lds_bytes: 4294967295 exceeds the 163840 bytes"},
      {"wavefront_size", 0, "kernels[0].resources.wavefront_size: 0 is not the chip's wave size"},
      {"max_flat_workgroup_size", 1u << 20, "kernels[0].resources.max_flat_workgroup_size: 1048576 exceeds 1024"},
  };
  for (const Case &c : cases) {
    INFO(c.field);
    std::string error = refusal([&](nlohmann::json &m) {
      m["kernels"][0]["resources"][c.field] = c.value;
    });
    CHECK(error.find(c.message) != std::string::npos);
  }
}
