//===- bundle_fuzzer.cpp - libFuzzer target: the bundle reader ------------===//
//
// Two kinds of input, both with every checksum recomputed here so that
// mutations reach the layout checks and the manifest parser instead of
// stopping at a checksum:
// - a whole bundle (starts with "MOECBNDL"): opened as it is, after its
//   header, section, table-entry checksums are recomputed;
// - anything else: manifest text, laid out into a bundle with the code
//   objects of the seed bundle ($MOEC_FUZZ_BUNDLE), so valid manifests
//   reach the cross-reference, ELF and selection checks.
// Whatever opens is then used as an engine would: every code object,
// every selection key row, every launch grid.
//
//===----------------------------------------------------------------------===//
#include "hostile_support.h"

#include "moec/bundle.h"
#include "moec/grid_rule.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sys/mman.h>
#include <unistd.h>

namespace {

int memoryFile = -1;
std::string memoryPath;
std::vector<std::vector<uint8_t>> seedObjects;
std::vector<uint32_t> seedEncodings;

void loadSeedObjects() {
  const char *path = std::getenv("MOEC_FUZZ_BUNDLE");
  if (!path)
    return;
  std::string error;
  auto bundle = moec::rt::Bundle::open(path, error);
  if (!bundle)
    return;
  for (uint32_t i = 0; i < bundle->codeObjectCount(); ++i) {
    moec::rt::CodeObjectView view;
    if (!bundle->codeObject(i, view, error))
      return;
    seedObjects.emplace_back(view.data, view.data + view.size);
    seedEncodings.push_back(bundle->codeObjectEncoding(i));
  }
}

void exercise(const moec::rt::Bundle &bundle) {
  std::string error;
  for (uint32_t i = 0; i < bundle.codeObjectCount(); ++i) {
    moec::rt::CodeObjectView view;
    if (bundle.codeObject(i, view, error) && view.size > bundle.fileSize())
      __builtin_trap();
  }
  const moec::rt::Manifest &m = bundle.manifest();
  const moec::rt::RuleVariable variables[] = {
      {"num_tokens", 7}, {"num_sorted", 64}, {"m", 5}, {"n", 128},
      {"H", 5120},       {"I", 2304},        {"E", 96}};
  for (const moec::rt::KernelInfo &kernel : m.kernels) {
    std::array<uint32_t, 3> grid;
    (void)moec::rt::computeLaunchGrid(kernel, variables, std::size(variables),
                                      grid, error);
  }
  for (const moec::rt::SelectionTable &table : m.selection)
    for (const moec::rt::SelectionRow &row : table.rows)
      if (row.config >= m.configs.size())
        __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  memoryFile = ::memfd_create("moec-fuzz-bundle", MFD_CLOEXEC);
  if (memoryFile < 0)
    std::abort();
  memoryPath = "/proc/self/fd/" + std::to_string(memoryFile);
  loadSeedObjects();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> bytes;
  if (size >= 8 && std::memcmp(data, "MOECBNDL", 8) == 0) {
    bytes.assign(data, data + size);
    moec::test::recomputeChecksums(bytes);
  } else {
    bytes = moec::test::craftBundle(
        std::string_view(reinterpret_cast<const char *>(data), size),
        seedObjects, seedEncodings);
  }
  if (::ftruncate(memoryFile, 0) != 0 ||
      ::pwrite(memoryFile, bytes.data(), bytes.size(), 0) !=
          static_cast<ssize_t>(bytes.size()))
    std::abort();
  std::string error;
  for (auto verification : {moec::rt::CodeObjectVerification::AtOpen,
                            moec::rt::CodeObjectVerification::OnFirstUse}) {
    moec::rt::BundleOpenOptions options;
    options.codeObjects = verification;
    if (auto bundle = moec::rt::Bundle::open(memoryPath, error, options))
      exercise(*bundle);
    else if (error.empty() || error.find('\n') != std::string::npos)
      __builtin_trap(); // every refusal is one line
  }
  return 0;
}
