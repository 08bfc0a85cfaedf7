//===- bundle.h - bundle format v1: writer and mmap reader ------*- C++ -*-===//
//
// A bundle (.moeb) is one file: a fixed little-endian header with a section
// table, the manifest (canonical JSON), a code-object table, and the code
// objects (plain HSACO, each aligned so hipModuleLoadData can take it straight
// from the mmap). Every section is located from header sizes, never by
// scanning, and checksummed with XXH64. Byte layout: docs/bundle-format.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_BUNDLE_H
#define MOEC_BUNDLE_H

#include "moec/manifest.h"
#include "moec/selection.h"
#include "moec/status.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt {

/// Format constants of bundle v1 (docs/bundle-format.md).
namespace bundle_format {
inline constexpr char kMagic[8] = {'M', 'O', 'E', 'C', 'B', 'N', 'D', 'L'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderSize = 160;
inline constexpr uint32_t kSectionCount = 3;
inline constexpr uint32_t kSectionEntrySize = 32;
inline constexpr uint32_t kSectionTableOffset = 48;
inline constexpr uint32_t kHeaderChecksumOffset = 32;
inline constexpr uint32_t kSectionKindManifest = 1;
inline constexpr uint32_t kSectionKindCodeObjectTable = 2;
inline constexpr uint32_t kSectionKindCodeObjects = 3;
inline constexpr uint32_t kCodeObjectTableHeaderSize = 16;
inline constexpr uint32_t kCodeObjectEntrySize = 32;
/// Encodings of a code-object table entry: a raw ELF code object (HSACO),
/// or the MLIR bytecode of a kernel's IR (KernelInfo::ir).
inline constexpr uint32_t kCodeObjectFlagsRawElf = 0;
inline constexpr uint32_t kEncodingMlirBytecode = 1;
inline constexpr uint32_t kTableAlignment = 8;
inline constexpr uint32_t kDefaultCodeObjectAlignment = 4096;
inline constexpr uint32_t kMinCodeObjectAlignment = 256;
} // namespace bundle_format

/// Checks how a manifest uses the table's entries, given each entry's
/// encoding and checksum: every kernel's code object is a raw ELF entry,
/// its IR (when recorded) an MLIR-bytecode entry whose checksum is the
/// manifest's ir.hash, and every entry is used. Writer and reader both run
/// it; `error` names the kernel or entry.
bool checkObjectUse(const Manifest &manifest,
                    const std::vector<uint32_t> &encodings,
                    const std::vector<uint64_t> &checksums, std::string &error);

/// Checks that `data` is an AMDGPU code object for chip `arch`: an ELF64
/// little-endian shared object, e_machine EM_AMDGPU (224), e_flags' mach
/// the chip's (target::TargetInfo::elfMach), and its program and section
/// header tables within `size`. Writer and reader run it on every raw-ELF
/// entry; `error` says what is wrong ("ELF e_flags mach 0x04c (gfx942),
/// the bundle's target is gfx950").
bool checkAmdgpuElf(const uint8_t *data, uint64_t size, std::string_view arch,
                    std::string &error);

/// Options of the writer.
struct BundleWriteOptions {
  /// Alignment of every code object in the file: a power of two in
  /// [256, 65536]. 4096 keeps every code object page-aligned in the mmap.
  uint32_t codeObjectAlignment = bundle_format::kDefaultCodeObjectAlignment;
};

/// Builds the bytes of a bundle. `manifestJson` is the manifest the compiler
/// built (schema v1); it is parsed and validated exactly as the reader will
/// (a bundle the reader would refuse is never written), the writer adds
/// "bundle_format": {"version": 1}, and it is stored as canonical JSON
/// (sorted keys, no whitespace). Every code object must be a non-empty ELF
/// image used by at least one kernel. Deterministic: same inputs, same bytes.
bool serializeBundle(std::string_view manifestJson,
                     const std::vector<std::vector<uint8_t>> &codeObjects,
                     std::vector<uint8_t> &out, std::string &error,
                     const BundleWriteOptions &options = {});

/// serializeBundle, then an atomic write: the bytes go to
/// "<path>.tmp.<pid>", are fsync'ed, and renamed onto `path`. On any failure
/// the temporary file is removed, an existing `path` is left untouched, and
/// `error` says what failed ("out.moeb: write failed: File too large").
bool writeBundle(const std::string &path, std::string_view manifestJson,
                 const std::vector<std::vector<uint8_t>> &codeObjects,
                 std::string &error, const BundleWriteOptions &options = {});

/// Bytes of one code object inside the mapped bundle.
struct CodeObjectView {
  const uint8_t *data = nullptr;
  size_t size = 0;
  uint64_t checksum = 0;
};

/// When the code-object bytes are checksummed.
enum class CodeObjectVerification {
  AtOpen,     ///< hash the whole code-object section in open() (default)
  OnFirstUse, ///< hash each code object the first time codeObject() returns it
};

struct BundleOpenOptions {
  CodeObjectVerification codeObjects = CodeObjectVerification::AtOpen;
};

/// A bundle opened read-only by mmap. Everything is verified before use:
/// header checksum, sizes and offsets of every section against the file size,
/// zero padding, manifest and table checksums, code-object checksums (at open
/// or first use), then the manifest schema and selection tables.
class Bundle {
public:
  /// Opens and verifies `path`. On failure returns nullptr and a one-line
  /// message that starts with the path: "b.moeb: manifest checksum
  /// mismatch". Status::IoError when the file cannot be opened, stat'ed or
  /// mapped (or is not a regular file), Status::CorruptBundle when its
  /// bytes fail verification.
  static std::unique_ptr<Bundle> open(const std::string &path, Error &error,
                                      const BundleOpenOptions &options = {});
  /// open() for callers that only need the message.
  static std::unique_ptr<Bundle> open(const std::string &path, std::string &error,
                                      const BundleOpenOptions &options = {});
  ~Bundle();
  Bundle(const Bundle &) = delete;
  Bundle &operator=(const Bundle &) = delete;

  const std::string &path() const { return path_; }
  uint64_t fileSize() const { return size_; }
  uint32_t formatVersion() const { return bundle_format::kVersion; }
  uint32_t codeObjectAlignment() const { return codeObjectAlignment_; }
  const Manifest &manifest() const { return manifest_; }
  /// The manifest exactly as stored (canonical JSON).
  std::string_view manifestText() const { return manifestText_; }
  const Selector &selector() const { return selector_; }

  uint32_t codeObjectCount() const { return static_cast<uint32_t>(codeObjects_.size()); }
  /// Lazy access to code object `index` (pointer into the mmap, valid while
  /// the Bundle lives). Verifies its checksum first if not yet verified.
  /// Entries are ELF code objects or kernel IR (codeObjectEncoding).
  /// Status::InvalidArgument for an index out of range,
  /// Status::CorruptBundle for a checksum mismatch.
  bool codeObject(uint32_t index, CodeObjectView &out, Error &error) const;
  /// codeObject() for callers that only need the message.
  bool codeObject(uint32_t index, CodeObjectView &out, std::string &error) const;

  /// The encoding of entry `index` (kCodeObjectFlagsRawElf or
  /// kEncodingMlirBytecode).
  uint32_t codeObjectEncoding(uint32_t index) const {
    return codeObjects_[index].encoding;
  }

  /// Index of the kernel called `name`, or -1.
  int64_t findKernel(std::string_view name) const;

  /// Merges selection overrides (parseSelectionOverrides +
  /// mergeSelectionOverrides) and rebuilds the selector. Call at start-up,
  /// before resolving tables: TableHandles from before are invalidated.
  /// On failure nothing changes.
  bool applySelectionOverrides(std::string_view overrideJson,
                               OverrideReport &report, std::string &error);
  /// Same, reading the override JSON from a file: Status::IoError when it
  /// cannot be opened, Status::InvalidArgument when its overrides are
  /// refused.
  bool applySelectionOverridesFile(const std::string &overridePath,
                                   OverrideReport &report, Error &error);
  /// applySelectionOverridesFile() for callers that only need the message.
  bool applySelectionOverridesFile(const std::string &overridePath,
                                   OverrideReport &report, std::string &error);

private:
  Bundle() = default;
  struct CodeObjectEntry {
    uint64_t offset = 0, size = 0, checksum = 0;
    uint32_t encoding = 0;
  };
  std::string path_;
  const uint8_t *base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t codeObjectAlignment_ = 0;
  std::string_view manifestText_;
  Manifest manifest_;
  Selector selector_;
  std::vector<CodeObjectEntry> codeObjects_;
  std::unique_ptr<std::atomic<uint8_t>[]> verified_;
};

} // namespace moec::rt

#endif // MOEC_BUNDLE_H
