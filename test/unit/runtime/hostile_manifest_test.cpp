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

TEST_CASE("a launch wider than its code object allows is refused at open",
          "[bundle][hostile]") {
  // The sample kernel launches 256 lanes per workgroup.
  for (uint32_t allowed : {0u, 64u, 255u}) {
    INFO(allowed);
    std::string error = refusal([&](nlohmann::json &m) {
      m["kernels"][0]["resources"]["max_flat_workgroup_size"] = allowed;
    });
    CHECK(error.find("kernels[0].resources.max_flat_workgroup_size: " +
                     std::to_string(allowed) +
                     " but launch.workgroup_size asks for 256 lanes") !=
          std::string::npos);
  }
  std::string error = refusal([&](nlohmann::json &m) {
    m["kernels"][0]["resources"].erase("max_flat_workgroup_size");
  });
  CHECK(error.find("max_flat_workgroup_size: 0 but launch.workgroup_size "
                   "asks for 256 lanes") != std::string::npos);
}

// ---------------------------------------------------------------------------
// Bundles laid out by hand with every checksum recomputed: what an attacker
// writes, not what the writer produces.

#include "hostile_support.h"
#include "moec/grid_rule.h"
#include "moec/moec_runtime.h"

#include <array>

#include <nlohmann/json.hpp>

namespace {

/// The canonical manifest text the writer stores for sampleManifest().
std::string canonicalSampleText() {
  std::vector<uint8_t> bytes;
  std::string error;
  REQUIRE(serializeBundle(sampleManifest().dump(), sampleCodeObjects(), bytes, error));
  TempDir dir;
  writeFile(dir.file("a.moeb"), bytes);
  auto bundle = Bundle::open(dir.file("a.moeb"), error);
  REQUIRE(bundle);
  return std::string(bundle->manifestText());
}

/// Opens `bytes` as a file through the C++ reader (both verification
/// modes) and the C API; returns the C++ error (empty when it opened).
std::string openCrafted(const std::vector<uint8_t> &bytes) {
  TempDir dir;
  const std::string path = dir.file("crafted.moeb");
  writeFile(path, bytes);
  std::string error, lazyError;
  auto bundle = Bundle::open(path, error);
  BundleOpenOptions lazy;
  lazy.codeObjects = CodeObjectVerification::OnFirstUse;
  auto lazyBundle = Bundle::open(path, lazyError, lazy);
  CHECK(bool(bundle) == bool(lazyBundle));
  moec_bundle_t *handle = nullptr;
  const moec_status_t status = moec_bundle_open(path.c_str(), &handle);
  CHECK((status == MOEC_STATUS_OK) == bool(bundle));
  if (status != MOEC_STATUS_OK)
    CHECK(status == MOEC_STATUS_CORRUPT_BUNDLE);
  moec_bundle_close(handle);
  if (bundle) {
    // Whatever opened hands out only ranges inside the file.
    for (uint32_t i = 0; i < bundle->codeObjectCount(); ++i) {
      CodeObjectView view;
      std::string why;
      if (bundle->codeObject(i, view, why))
        CHECK(view.size <= bundle->fileSize());
    }
    return "";
  }
  CHECK(error.find('\n') == std::string::npos);
  return error;
}

std::string openText(const std::string &manifestText) {
  return openCrafted(craftBundle(manifestText, sampleCodeObjects()));
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("the reader accepts only the manifest text the writer stores",
          "[bundle][hostile]") {
  const std::string canonical = canonicalSampleText();
  CHECK(openText(canonical) == "");

  // A byte-order mark, whitespace, a trailing newline.
  CHECK(contains(openText("\xEF\xBB\xBF" + canonical), "manifest: not in canonical form at byte 0"));
  CHECK(contains(openText(" " + canonical), "not in canonical form at byte 0"));
  CHECK(contains(openText(canonical + "\n"), "not in canonical form at byte " +
                                                 std::to_string(canonical.size())));
  CHECK(contains(openText(nlohmann::json::parse(canonical).dump(1)),
                 "not in canonical form at byte 1"));
  // Key order: bundle_format moved to the end.
  nlohmann::ordered_json reordered = nlohmann::ordered_json::parse(canonical);
  nlohmann::ordered_json format = reordered["bundle_format"];
  reordered.erase("bundle_format");
  reordered["bundle_format"] = format;
  CHECK(contains(openText(reordered.dump()), "not in canonical form at byte 2"));
  // A number spelled another way.
  std::string spelled = canonical;
  spelled.replace(spelled.find("\"version\":1"), 11, "\"version\":1.0");
  CHECK(contains(openText(spelled), "bundle_format.version: expected an unsigned integer"));

  // Unknown fields, at the top and inside a kernel.
  nlohmann::json unknown = nlohmann::json::parse(canonical);
  unknown["zz_unknown"] = 1;
  CHECK(contains(openText(unknown.dump()), "manifest: zz_unknown: unknown field"));
  unknown = nlohmann::json::parse(canonical);
  unknown["kernels"][1]["launch"]["extra"] = "x";
  CHECK(contains(openText(unknown.dump()), "manifest: kernels[1].launch.extra: unknown field"));

  // A duplicate key: nlohmann keeps the last one; the reader refuses it.
  std::string duplicate = canonical;
  const size_t first = duplicate.find("\"kernels\":[{") + 12;
  duplicate.insert(first, "\"name\":\"evil\",");
  CHECK(contains(openText(duplicate), "manifest: kernels[0].name: duplicate key"));

  // Bytes after a NUL are never ignored.
  CHECK(contains(openText(canonical + std::string("\0{\"x\":1}", 8)),
                 "manifest: NUL byte at offset " + std::to_string(canonical.size())));
  std::string nulInside = canonical;
  nulInside[10] = '\0';
  CHECK(contains(openText(nulInside), "manifest: NUL byte at offset 10"));
}

TEST_CASE("names, resources and grid rules an attacker stores are refused at open",
          "[bundle][hostile]") {
  // The same values as the writer tests above, but stored in a bundle whose
  // checksums are recomputed: Bundle::open, the lazy mode and
  // moec_bundle_open refuse them, so extract never writes such a name and
  // no occupancy arithmetic sees such a number.
  const std::string canonical = canonicalSampleText();
  auto stored = [&](auto edit) {
    nlohmann::json manifest = nlohmann::json::parse(canonical);
    edit(manifest);
    return openText(manifest.dump());
  };
  const std::string nulEnd("x\0", 2);
  for (const std::string &name : {std::string("../../x"), std::string("/tmp/x"),
                                  std::string("../../../../../../etc/x"), nulEnd}) {
    INFO(name);
    CHECK(contains(stored([&](nlohmann::json &m) { m["kernels"][0]["name"] = name; }),
                   "kernels[0].name: expected 1 to 255 of [A-Za-z0-9_]"));
  }
  const std::pair<const char *, uint64_t> resources[] = {
      {"vgpr", 4294967295u}, {"agpr", 4294967295u}, {"lds_bytes", 4294967296u},
      {"wavefront_size", 0}, {"max_flat_workgroup_size", 4096}};
  for (const auto &resource : resources) {
    const char *field = resource.first;
    const uint64_t value = resource.second;
    INFO(field);
    CHECK(contains(stored([&](nlohmann::json &m) {
                     m["kernels"][0]["resources"][field] = value;
                   }),
                   std::string("kernels[0].resources.") + field + ": "));
  }
  CHECK(contains(stored([&](nlohmann::json &m) {
                   m["kernels"][0]["launch"]["workgroup_size"] = {0, 1, 1};
                 }),
                 "kernels[0].launch.workgroup_size[0]: expected an integer in [1, "));
  CHECK(contains(stored([&](nlohmann::json &m) {
                   m["kernels"][0]["launch"]["grid"]["x"] = "I / 0";
                 }),
                 "kernels[0].launch.grid.x: division by zero"));
  CHECK(contains(stored([&](nlohmann::json &m) {
                   m["kernels"][0]["launch"]["grid"]["x"] = "ceil(";
                 }),
                 "kernels[0].launch.grid.x: unexpected end of rule"));
  // A constant negative rule is syntactically a rule: it opens, and no
  // launch grid is ever computed from it.
  nlohmann::json negative = nlohmann::json::parse(canonical);
  negative["kernels"][0]["launch"]["grid"]["x"] = "-5";
  CHECK(openText(negative.dump()) == "");
  TempDir dir;
  std::string error;
  writeFile(dir.file("n.moeb"), craftBundle(negative.dump(), sampleCodeObjects()));
  auto bundle = Bundle::open(dir.file("n.moeb"), error);
  REQUIRE(bundle);
  const RuleVariable variables[] = {{"m", 64}, {"n", 256}};
  std::array<uint32_t, 3> grid{};
  CHECK_FALSE(computeLaunchGrid(bundle->manifest().kernels[0], variables, 2, grid, error));
  CHECK(contains(error, "grid.x = -5 (rule '-5'), expected 1 .. 4294967295"));
}

TEST_CASE("deep nesting is refused before a JSON tree exists",
          "[bundle][hostile]") {
  // 100,000 nested arrays in a kernel's entry: the writer, the reader and
  // the C API refuse it without recursing (no stack overflow on parse,
  // dump or destruction).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = sampleManifest().dump();
  const std::string marker = "\"content_hash\":\"0123456789abcdef\"";
  text.replace(text.find(marker), marker.size(), "\"content_hash\":" + deep);
  std::vector<uint8_t> bytes;
  std::string error;
  CHECK_FALSE(serializeBundle(text, sampleCodeObjects(), bytes, error));
  CHECK(contains(error, "manifest: kernels[0].content_hash[0][0]"));
  CHECK(contains(error, "nested deeper than 16 levels"));
  CHECK(error.size() < 300);

  std::string stored = canonicalSampleText();
  stored.replace(stored.find(marker), marker.size(), "\"content_hash\":" + deep);
  error = openText(stored);
  CHECK(contains(error, "nested deeper than 16 levels"));

  // Strings and keys are bounded too.
  nlohmann::json big = sampleManifest();
  big["kernels"][0]["stage"] = std::string(20000, 'w');
  CHECK_FALSE(serializeBundle(big.dump(), sampleCodeObjects(), bytes, error));
  CHECK(contains(error, "kernels[0].stage: string of 20000 bytes (max 16384)"));
}

TEST_CASE("code-object table entries past the end are refused without wrapping",
          "[bundle][hostile]") {
  nlohmann::json manifest = nlohmann::json::parse(canonicalSampleText());
  manifest["kernels"][2]["code_object"] = 2;
  const std::string text = manifest.dump();
  // Lay it out with a placeholder third entry, then point that entry past
  // the end with a size that wraps the running end back to the file size.
  std::vector<uint8_t> bytes =
      craftBundle(text, sampleCodeObjects(), {}, {CraftedEntry{0, 1, 0}});
  const uint64_t fileSize = bytes.size();
  const uint64_t tableOffset = getLE(bytes.data() + 48 + 32 + 8, 8);
  uint8_t *third = bytes.data() + tableOffset + 16 + 2 * 32;
  const uint64_t start = (fileSize + 255) / 256 * 256;
  REQUIRE(start > fileSize);
  putLE(third, start, 8);
  putLE(third + 8, fileSize - start, 8); // 2^64 - (start - fileSize)
  recomputeChecksums(bytes);
  CHECK(contains(openCrafted(bytes), "code object 2: starts at " +
                                         std::to_string(start) +
                                         ", at or past the end of the file"));

  // Nearby variants: an offset far past the end, a size past the end, an
  // offset inside the previous object.
  const std::vector<std::pair<uint64_t, uint64_t>> variants = {
      {UINT64_MAX - 255, 1}, {start, 1}, {start - 256, UINT64_MAX}, {256, 100}};
  for (const auto &[offset, size] : variants) {
    INFO(offset << " +" << size);
    putLE(third, offset, 8);
    putLE(third + 8, size, 8);
    recomputeChecksums(bytes);
    CHECK(contains(openCrafted(bytes), "code object 2: "));
  }
}

TEST_CASE("every code object is an AMDGPU ELF for the bundle's chip",
          "[bundle][hostile]") {
  struct Case {
    const char *what;
    int at;
    std::vector<uint8_t> patch;
    const char *message;
  } cases[] = {
      {"text", 0, {'p', 'l', 'a', 'i', 'n'}, "not an ELF image"},
      {"ELF32", 4, {1}, "not a 64-bit little-endian ELF image"},
      {"big-endian", 5, {2}, "not a 64-bit little-endian ELF image"},
      {"x86-64", 18, {62, 0}, "ELF e_machine 62, expected 224 (EM_AMDGPU)"},
      {"relocatable", 16, {1, 0}, "ELF e_type 1, expected 3"},
      {"gfx942", 48, {0x4c}, "ELF e_flags mach 0x04c (gfx942), the bundle's target is gfx950"},
      {"section headers past the end", 40, {0xff, 0xff, 0, 0, 0, 0, 0, 0},
       "ELF section header table"},
  };
  const std::string canonical = canonicalSampleText();
  for (const Case &c : cases) {
    INFO(c.what);
    std::vector<std::vector<uint8_t>> objects = sampleCodeObjects();
    std::copy(c.patch.begin(), c.patch.end(), objects[1].begin() + c.at);
    if (std::string(c.what) == "section headers past the end")
      putLE(objects[1].data() + 60, 4, 2); // e_shnum
    // The writer refuses to store it...
    std::vector<uint8_t> bytes;
    std::string error;
    CHECK_FALSE(serializeBundle(sampleManifest().dump(), objects, bytes, error));
    CHECK(contains(error, std::string(c.what) == "text"
                              ? "neither an ELF image nor MLIR bytecode"
                              : c.message));
    // ...and the reader refuses it when an attacker stores it anyway.
    error = openCrafted(craftBundle(canonical, objects));
    CHECK(contains(error, "code object 1: "));
    CHECK(contains(error, c.message));
  }
  // A chip without facts has no ELF mach to check against.
  nlohmann::json other = nlohmann::json::parse(canonical);
  other["target"]["arch"] = "gfx1100";
  CHECK(contains(openText(other.dump()),
                 "manifest: target.arch: 'gfx1100' is not a chip moec knows (gfx950, gfx942)"));
  // A part is an arch with a CU count moec has facts for (docs/targets.md).
  nlohmann::json part = nlohmann::json::parse(canonical);
  part["target"]["compute_units"] = 96;
  CHECK(contains(openText(part.dump()),
                 "manifest: target.compute_units: 96 is not a part of gfx950 "
                 "moec knows (256, 128 CUs)"));
}

#include "moec/grid_rule.h"

#include <atomic>
#include <cstdlib>
#include <thread>

TEST_CASE("threads select, verify code objects and compute grids on one bundle",
          "[bundle][concurrency]") {
  // Run under TSan in CI (scripts/sanitizers.sh): selection, the lazy
  // per-object verification and launch grids share one Bundle. CI runs
  // 80,000 selections; MOEC_CONCURRENCY_SELECTIONS sets the total for a
  // longer run (docs/fuzzing.md: 16,000,000 under TSan).
  uint64_t total = 80000;
  if (const char *text = std::getenv("MOEC_CONCURRENCY_SELECTIONS"))
    total = std::strtoull(text, nullptr, 10);
  REQUIRE(total >= 4);
  const uint64_t perThread = total / 4;
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("a.moeb"), sampleManifest().dump(),
                      sampleCodeObjects(), error));
  BundleOpenOptions lazy;
  lazy.codeObjects = CodeObjectVerification::OnFirstUse;
  auto bundle = Bundle::open(dir.file("a.moeb"), error, lazy);
  REQUIRE(bundle);
  TableHandle table;
  REQUIRE(bundle->selector().resolveTable("flash", 4, 1024, table, error));
  std::atomic<uint64_t> checksum{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      uint64_t local = 0;
      const RuleVariable variables[] = {{"m", 64 + t}, {"n", 256}};
      for (uint64_t i = 0; i < perThread; ++i) {
        const Selection s = bundle->selector().select(table, uint32_t(i % 100));
        local += s.config;
        CodeObjectView view;
        std::string why;
        if (!bundle->codeObject(uint32_t(i % bundle->codeObjectCount()), view, why))
          ++failures;
        const KernelInfo &kernel =
            bundle->manifest().kernels[bundle->manifest().configs[s.config].kernels[0]];
        std::array<uint32_t, 3> grid;
        if (!computeLaunchGrid(kernel, variables, 2, grid, why))
          ++failures;
        local += grid[0];
      }
      checksum += local;
    });
  for (std::thread &thread : threads)
    thread.join();
  CHECK(failures == 0);
  CHECK(checksum > 0);
}

TEST_CASE("a kernel's stage is one a layer runs, parsed at open",
          "[bundle][hostile]") {
  std::string error = refusal([&](nlohmann::json &m) {
    m["kernels"][1]["stage"] = "w3";
  });
  CHECK(error.find("kernels[1].stage: unknown stage 'w3' (expected quant, "
                   "sort, w13, w2 or combine)") != std::string::npos);
  error = refusal([&](nlohmann::json &m) { m["kernels"][0].erase("stage"); });
  CHECK(error.find("kernels[0].stage: missing") != std::string::npos);
}
