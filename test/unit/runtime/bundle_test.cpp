#include "moec/bundle.h"
#include "moec/hash.h"

#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace moec::rt;
using namespace moec::test;

namespace {

uint64_t loadLE64(const std::vector<uint8_t> &bytes, size_t offset) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | bytes[offset + i];
  return value;
}

uint32_t loadLE32(const std::vector<uint8_t> &bytes, size_t offset) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | bytes[offset + i];
  return value;
}

std::vector<uint8_t> sampleBundleBytes(uint32_t alignment = 4096) {
  std::vector<uint8_t> bytes;
  std::string error;
  BundleWriteOptions options;
  options.codeObjectAlignment = alignment;
  REQUIRE(serializeBundle(sampleManifest().dump(), sampleCodeObjects(), bytes, error, options));
  return bytes;
}

/// Where each section of a serialized bundle lies: [offset, offset + size).
struct Layout {
  uint64_t manifestOffset, manifestSize, tableOffset, tableSize, objectsOffset, objectsSize;
};

Layout layoutOf(const std::vector<uint8_t> &bytes) {
  return {loadLE64(bytes, 48 + 8),  loadLE64(bytes, 48 + 16),
          loadLE64(bytes, 80 + 8),  loadLE64(bytes, 80 + 16),
          loadLE64(bytes, 112 + 8), loadLE64(bytes, 112 + 16)};
}

} // namespace

TEST_CASE("bundle round trip keeps manifest fields and code-object bytes", "[bundle]") {
  TempDir dir;
  const std::string path = dir.file("sample.moeb");
  std::string error;
  const auto objects = sampleCodeObjects();
  REQUIRE(writeBundle(path, sampleManifest().dump(), objects, error));
  INFO(error);

  auto bundle = Bundle::open(path, error);
  REQUIRE(bundle);
  const Manifest &m = bundle->manifest();
  CHECK(m.bundleFormatVersion == 1);
  CHECK(m.target.arch == "gfx950");
  CHECK(m.target.features == "sramecc+:xnack-");
  CHECK(m.target.codeObjectVersion == 6);
  CHECK(m.compiler.name == "moec");
  CHECK(m.compiler.llvm == "22.1.8");
  CHECK(m.compiler.fingerprint == "abcdef01");
  REQUIRE(m.numerics.size() == 2);
  CHECK(m.numerics[0] == std::make_pair(std::string("accumulate"), std::string("f32")));
  REQUIRE(m.sources.size() == 1);
  CHECK(m.sources[0].path == "tuning_tables/flash.txt");

  REQUIRE(m.kernels.size() == 3);
  const KernelInfo &k = m.kernels[2];
  CHECK(k.name == "moe2_w2_t128x256_aaaa0003");
  CHECK(k.symbol == "moe2_w2_t128x256_aaaa0003_kernel");
  CHECK(k.codeObject == 1);
  CHECK(k.stage == moec::rt::Stage::W2);
  CHECK(k.resources.vgpr == 200);
  CHECK(k.resources.sgpr == 40);
  CHECK(k.resources.ldsBytes == 98304);
  CHECK(k.resources.wavefrontSize == 64);
  CHECK(k.resources.maxFlatWorkgroupSize == 256);
  CHECK(k.launch.workgroupSize == std::array<uint32_t, 3>{256, 1, 1});
  CHECK(k.launch.gridX == "ceil(m / 32)");
  REQUIRE(k.abi.size() == 4);
  CHECK(k.abi[0].kind == ArgKind::Buffer);
  CHECK(k.abi[0].access == ArgAccess::Read);
  CHECK(k.abi[0].dtype == "f8E4M3FN");
  CHECK(k.abi[2].kind == ArgKind::I32);
  CHECK(k.abi[3].kind == ArgKind::I64);
  REQUIRE(k.attributes.size() == 2);
  CHECK(k.attributes[0] == std::make_pair(std::string("split_k"), std::string("1 : i64")));
  CHECK(k.attributes[1] ==
        std::make_pair(std::string("tile"),
                       std::string("#moe.tile<m = 32, n = 128, b_cache = nt>")));
  CHECK(k.contentHash == "0123456789abcdef");

  REQUIRE(m.configs.size() == 3);
  CHECK(m.configs[1].id == "medium");
  CHECK(m.configs[1].kernels == std::vector<uint32_t>{1, 0});
  CHECK(m.configs[2].provenance == Provenance::ModelRanked);
  REQUIRE(m.selection.size() == 3);
  CHECK(m.selection[1].transport == Transport::Compact);
  CHECK(m.selection[1].aboveMax == AboveMaxPolicy::Error);
  CHECK(m.selection[0].rows.size() == 4);

  REQUIRE(bundle->codeObjectCount() == 2);
  for (uint32_t i = 0; i < 2; ++i) {
    CodeObjectView view;
    REQUIRE(bundle->codeObject(i, view, error));
    REQUIRE(view.size == objects[i].size());
    CHECK(std::memcmp(view.data, objects[i].data(), view.size) == 0);
    CHECK(reinterpret_cast<uintptr_t>(view.data) % 4096 == 0); // page-aligned in the mmap
  }
  CodeObjectView view;
  CHECK_FALSE(bundle->codeObject(2, view, error));
  CHECK(error.find("code object 2 out of range") != std::string::npos);
  CHECK(bundle->findKernel("moe2_w2_t64x128_aaaa0002") == 1);
  CHECK(bundle->findKernel("nope") == -1);
}

TEST_CASE("the stored manifest is canonical JSON with the format version", "[bundle]") {
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("a.moeb"), sampleManifest().dump(2), sampleCodeObjects(), error));
  auto bundle = Bundle::open(dir.file("a.moeb"), error);
  REQUIRE(bundle);
  const std::string text(bundle->manifestText());
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text.rfind("{\"bundle_format\":{\"version\":1},\"compiler\":", 0) == 0);
  // The model serialised: every optional field written, so the reader can
  // compare the text with its own serialisation byte for byte.
  CHECK(text.find("\"table_names\":[]") != std::string::npos);
  CHECK(text == serializeManifest(bundle->manifest()));
}

TEST_CASE("writing twice gives byte-identical files", "[bundle]") {
  TempDir dir;
  std::string error;
  // Same manifest with different key order and whitespace.
  REQUIRE(writeBundle(dir.file("a.moeb"), sampleManifest().dump(), sampleCodeObjects(), error));
  REQUIRE(writeBundle(dir.file("b.moeb"), sampleManifest().dump(4), sampleCodeObjects(), error));
  const auto a = readFile(dir.file("a.moeb"));
  const auto b = readFile(dir.file("b.moeb"));
  REQUIRE(!a.empty());
  CHECK(a == b);
  CHECK(a == sampleBundleBytes());
}

TEST_CASE("header fields follow docs/bundle-format.md", "[bundle]") {
  const auto bytes = sampleBundleBytes();
  CHECK(std::memcmp(bytes.data(), "MOECBNDL", 8) == 0);
  CHECK(loadLE32(bytes, 8) == 1);
  CHECK(loadLE32(bytes, 12) == 160);
  CHECK(loadLE64(bytes, 16) == bytes.size());
  CHECK(loadLE32(bytes, 24) == 3);
  CHECK(loadLE32(bytes, 28) == 4096);
  std::vector<uint8_t> header(bytes.begin(), bytes.begin() + 160);
  std::memset(header.data() + 32, 0, 8);
  CHECK(loadLE64(bytes, 32) == xxh64(header.data(), header.size()));
  const Layout layout = layoutOf(bytes);
  CHECK(layout.manifestOffset == 160);
  CHECK(layout.tableOffset % 8 == 0);
  CHECK(layout.tableSize == 16 + 2 * 32);
  CHECK(layout.objectsOffset % 4096 == 0);
  CHECK(layout.objectsOffset + layout.objectsSize == bytes.size());
  CHECK(loadLE64(bytes, 48 + 24) ==
        xxh64(bytes.data() + layout.manifestOffset, layout.manifestSize));
  // Code-object entries: offset, size, checksum, flags.
  const size_t entry1 = layout.tableOffset + 16 + 32;
  CHECK(loadLE64(bytes, entry1) % 4096 == 0);
  CHECK(loadLE64(bytes, entry1 + 8) == 5000);
  CHECK(loadLE64(bytes, entry1 + 16) ==
        xxh64(bytes.data() + loadLE64(bytes, entry1), 5000));
  CHECK(loadLE32(bytes, entry1 + 24) == 0);
}

TEST_CASE("truncation at every length is refused with a one-line error", "[bundle]") {
  TempDir dir;
  const auto bytes = sampleBundleBytes(256);
  const std::string path = dir.file("cut.moeb");
  size_t refused = 0;
  for (size_t length = 0; length < bytes.size(); ++length) {
    writeFile(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + length));
    std::string error;
    auto bundle = Bundle::open(path, error);
    INFO("length " << length << ": " << error);
    REQUIRE_FALSE(bundle);
    REQUIRE(error.rfind(path + ": ", 0) == 0);
    REQUIRE(error.find('\n') == std::string::npos);
    REQUIRE(error.find("truncated") != std::string::npos);
    ++refused;
  }
  CHECK(refused == bytes.size());
  // And the untruncated file opens.
  writeFile(path, bytes);
  std::string error;
  CHECK(Bundle::open(path, error));
}

TEST_CASE("trailing bytes after the declared size are refused", "[bundle]") {
  TempDir dir;
  auto bytes = sampleBundleBytes(256);
  bytes.push_back(0);
  writeFile(dir.file("long.moeb"), bytes);
  std::string error;
  CHECK_FALSE(Bundle::open(dir.file("long.moeb"), error));
  CHECK(error.find("trailing data") != std::string::npos);
}

TEST_CASE("a flipped byte anywhere in the file is refused, naming the section", "[bundle]") {
  TempDir dir;
  const auto pristine = sampleBundleBytes(256);
  const Layout layout = layoutOf(pristine);
  const std::string path = dir.file("flip.moeb");
  for (size_t offset = 0; offset < pristine.size(); ++offset) {
    auto bytes = pristine;
    bytes[offset] ^= 0x01;
    writeFile(path, bytes);
    std::string error;
    auto bundle = Bundle::open(path, error);
    INFO("offset " << offset << ": " << error);
    REQUIRE_FALSE(bundle);
    REQUIRE(error.rfind(path + ": ", 0) == 0);
    REQUIRE(error.find('\n') == std::string::npos);
    if (offset >= 16 && offset < 160) {
      // Magic, version and header size are checked first; everything else in
      // the header is covered by the header checksum.
      REQUIRE(error.find("header checksum mismatch") != std::string::npos);
    } else if (offset >= layout.manifestOffset &&
               offset < layout.manifestOffset + layout.manifestSize) {
      REQUIRE(error.find("manifest checksum mismatch") != std::string::npos);
    } else if (offset >= layout.tableOffset &&
               offset < layout.tableOffset + layout.tableSize) {
      REQUIRE(error.find("code-object table checksum mismatch") != std::string::npos);
    } else if (offset >= layout.objectsOffset) {
      REQUIRE(error.find("code-object section checksum mismatch") != std::string::npos);
    } else if (offset >= 160) {
      REQUIRE(error.find("padding between sections is not zero") != std::string::npos);
    }
  }
}

TEST_CASE("specific header problems have specific messages", "[bundle]") {
  TempDir dir;
  const std::string path = dir.file("h.moeb");
  std::string error;
  auto bytes = sampleBundleBytes();
  bytes[0] = 'X';
  writeFile(path, bytes);
  CHECK_FALSE(Bundle::open(path, error));
  CHECK(error == path + ": not a moec bundle (bad magic)");

  bytes = sampleBundleBytes();
  bytes[8] = 2;
  writeFile(path, bytes);
  CHECK_FALSE(Bundle::open(path, error));
  CHECK(error == path + ": unsupported bundle format version 2 (this runtime reads version 1)");

  CHECK_FALSE(Bundle::open(dir.file("missing.moeb"), error));
  CHECK(error.find("missing.moeb: cannot open") != std::string::npos);
  CHECK_FALSE(Bundle::open(dir.path(), error));
  CHECK(error.find("not a regular file") != std::string::npos);
}

TEST_CASE("lazy code-object verification refuses a corrupt object at first use", "[bundle]") {
  TempDir dir;
  auto bytes = sampleBundleBytes();
  const Layout layout = layoutOf(bytes);
  const uint64_t object1 = loadLE64(bytes, layout.tableOffset + 16 + 32);
  bytes[object1 + 100] ^= 0xff;
  const std::string path = dir.file("lazy.moeb");
  writeFile(path, bytes);

  std::string error;
  CHECK_FALSE(Bundle::open(path, error)); // default: verified at open
  CHECK(error == path + ": code-object section checksum mismatch");

  BundleOpenOptions lazy;
  lazy.codeObjects = CodeObjectVerification::OnFirstUse;
  auto bundle = Bundle::open(path, error, lazy);
  REQUIRE(bundle);
  CodeObjectView view;
  CHECK(bundle->codeObject(0, view, error));
  CHECK_FALSE(bundle->codeObject(1, view, error));
  CHECK(error == path + ": code object 1 checksum mismatch");
}

TEST_CASE("the writer refuses what the reader would refuse", "[bundle]") {
  std::vector<uint8_t> out;
  std::string error;
  auto objects = sampleCodeObjects();

  CHECK_FALSE(serializeBundle("{not json", objects, out, error));
  CHECK(error.rfind("manifest: invalid JSON", 0) == 0);

  auto manifest = sampleManifest();
  manifest["kernels"][1]["resources"]["vgpr"] = "many";
  CHECK_FALSE(serializeBundle(manifest.dump(), objects, out, error));
  CHECK(error == "manifest: kernels[1].resources.vgpr: expected an unsigned integer");

  manifest = sampleManifest();
  manifest["kernels"][0]["code_object"] = 7;
  CHECK_FALSE(serializeBundle(manifest.dump(), objects, out, error));
  CHECK(error == "manifest: kernels[0].code_object: index 7 but the bundle has 2 code objects");

  manifest = sampleManifest();
  manifest["configs"][2]["kernels"] = {5};
  CHECK_FALSE(serializeBundle(manifest.dump(), objects, out, error));
  CHECK(error == "manifest: configs[2].kernels[0]: expected a kernel index below 3");

  manifest = sampleManifest();
  manifest["kernels"][2]["name"] = "moe2_w2_t32x128_aaaa0001";
  CHECK_FALSE(serializeBundle(manifest.dump(), objects, out, error));
  CHECK(error.find("duplicate kernel name") != std::string::npos);

  manifest = sampleManifest();
  manifest["kernels"][2]["code_object"] = 0; // object 1 now unused
  CHECK_FALSE(serializeBundle(manifest.dump(), objects, out, error));
  CHECK(error == "code object 1: not used by any kernel");

  objects[1] = {1, 2, 3, 4, 5};
  CHECK_FALSE(serializeBundle(sampleManifest().dump(), objects, out, error));
  CHECK(error == "code object 1: neither an ELF image nor MLIR bytecode (5 bytes)");

  BundleWriteOptions options;
  options.codeObjectAlignment = 1000;
  CHECK_FALSE(serializeBundle(sampleManifest().dump(), sampleCodeObjects(), out, error, options));
  CHECK(error.find("alignment 1000") != std::string::npos);
}

TEST_CASE("a failed write leaves the old file untouched and no temporary file", "[bundle]") {
  TempDir dir;
  const std::string path = dir.file("out.moeb");
  writeTextFile(path, "previous bundle");
  std::string error;

  SECTION("invalid manifest") {
    CHECK_FALSE(writeBundle(path, "{}", sampleCodeObjects(), error));
    CHECK(error.rfind(path + ": manifest: target: missing", 0) == 0);
  }
  SECTION("the disk fills up mid-write (RLIMIT_FSIZE)") {
    struct rlimit saved;
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = saved;
    small.rlim_cur = 3000; // the bundle is > 8 KiB
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    const bool written = writeBundle(path, sampleManifest().dump(), sampleCodeObjects(), error);
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previousHandler);
    CHECK_FALSE(written);
    CHECK(error.find(path + ": write failed: ") == 0);
  }
  SECTION("rename onto a non-empty directory fails") {
    const std::string target = dir.file("adir");
    REQUIRE(::mkdir(target.c_str(), 0755) == 0);
    writeTextFile(target + "/keep", "x");
    CHECK_FALSE(writeBundle(target, sampleManifest().dump(), sampleCodeObjects(), error));
    CHECK(error.find("rename failed") != std::string::npos);
    CHECK(readFile(target + "/keep") == std::vector<uint8_t>{'x'});
  }
  SECTION("the directory does not exist") {
    CHECK_FALSE(writeBundle(dir.file("no/such/dir.moeb"), sampleManifest().dump(),
                            sampleCodeObjects(), error));
    CHECK(error.find("cannot create") != std::string::npos);
  }
  const auto kept = readFile(path);
  CHECK(std::string(kept.begin(), kept.end()) == "previous bundle");
  for (const std::string &entry : dir.entries())
    CHECK(entry.find(".tmp.") == std::string::npos);
}

TEST_CASE("a successful write replaces the old file atomically", "[bundle]") {
  TempDir dir;
  const std::string path = dir.file("out.moeb");
  writeTextFile(path, "previous bundle");
  std::string error;
  REQUIRE(writeBundle(path, sampleManifest().dump(), sampleCodeObjects(), error));
  CHECK(readFile(path) == sampleBundleBytes());
  CHECK(dir.entries() == std::vector<std::string>{"out.moeb"});
}

TEST_CASE("a bundle without code objects is valid", "[bundle]") {
  nlohmann::json manifest = sampleManifest();
  manifest["kernels"] = nlohmann::json::array();
  manifest["configs"] = nlohmann::json::array();
  manifest["selection"] = nlohmann::json::array();
  TempDir dir;
  std::string error;
  REQUIRE(writeBundle(dir.file("empty.moeb"), manifest.dump(), {}, error));
  auto bundle = Bundle::open(dir.file("empty.moeb"), error);
  REQUIRE(bundle);
  CHECK(bundle->codeObjectCount() == 0);
  CHECK(bundle->manifest().kernels.empty());
}

TEST_CASE("a stale temporary file from a crashed writer does not block writing", "[bundle]") {
  TempDir dir;
  const std::string path = dir.file("s.moeb");
  writeTextFile(path + ".tmp." + std::to_string(::getpid()), "stale");
  std::string error;
  REQUIRE(writeBundle(path, sampleManifest().dump(), sampleCodeObjects(), error));
  CHECK(dir.entries() == std::vector<std::string>{"s.moeb"});
}

namespace {

void storeLE64(std::vector<uint8_t> &bytes, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}

/// Recomputes every section checksum and the header checksum, so a test can
/// hand the manifest parser bytes that pass all integrity checks.
void fixChecksums(std::vector<uint8_t> &bytes) {
  for (size_t s = 0; s < 3; ++s) {
    const size_t entry = 48 + 32 * s;
    storeLE64(bytes, entry + 24,
              xxh64(bytes.data() + loadLE64(bytes, entry + 8), loadLE64(bytes, entry + 16)));
  }
  storeLE64(bytes, 32, 0);
  storeLE64(bytes, 32, xxh64(bytes.data(), 160));
}

} // namespace

TEST_CASE("manifests that pass the checksums but not the schema never crash the reader",
          "[bundle]") {
  TempDir dir;
  const auto pristine = sampleBundleBytes(256);
  const Layout layout = layoutOf(pristine);
  const std::string path = dir.file("m.moeb");
  uint32_t state = 2026;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  const char replacements[] = "{}[]\",:0123456789-.eE \x80\xff" "abcnull";
  size_t refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bytes = pristine;
    const int edits = 1 + static_cast<int>(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t offset = layout.manifestOffset + next() % layout.manifestSize;
      bytes[offset] = static_cast<uint8_t>(replacements[next() % (sizeof(replacements) - 1)]);
    }
    fixChecksums(bytes);
    writeFile(path, bytes);
    std::string error;
    auto bundle = Bundle::open(path, error);
    if (!bundle) {
      ++refused;
      INFO(error);
      REQUIRE(error.rfind(path + ": manifest: ", 0) == 0);
      REQUIRE(error.find('\n') == std::string::npos);
    }
  }
  CHECK(refused > 2000); // most edits break the JSON or the schema
  auto bytes = pristine;
  fixChecksums(bytes);
  CHECK(bytes == pristine);
}

TEST_CASE("a code-object table that disagrees with the layout is refused", "[bundle]") {
  TempDir dir;
  const auto pristine = sampleBundleBytes(256);
  const Layout layout = layoutOf(pristine);
  const std::string path = dir.file("t.moeb");
  std::string error;
  struct Case {
    size_t offset;
    uint64_t value;
    const char *message;
  } cases[] = {
      {layout.tableOffset + 16 + 32 + 0, 0, "code object 1: offset 0, expected "},
      {layout.tableOffset + 16 + 32 + 8, 1u << 30, "code object 1: size 1073741824 is empty or runs past"},
      {layout.tableOffset + 16 + 0 + 8, 0, "code object 0: size 0 is empty"},
      {layout.tableOffset + 16 + 32 + 24, 2, "code object 1: unsupported encoding flags 2"},
      // An ELF code object relabelled as kernel IR no longer serves its
      // kernel.
      {layout.tableOffset + 16 + 32 + 24, 1, "is not an ELF code object"},
  };
  for (const Case &c : cases) {
    auto bytes = pristine;
    storeLE64(bytes, c.offset, c.value);
    fixChecksums(bytes);
    writeFile(path, bytes);
    INFO(c.message);
    CHECK_FALSE(Bundle::open(path, error));
    CHECK(error.find(c.message) != std::string::npos);
  }
}
