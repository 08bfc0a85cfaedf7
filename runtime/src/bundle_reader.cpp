//===- bundle_reader.cpp - mmap reader that verifies before use -*- C++ -*-===//
#include "moec/bundle.h"
#include "moec/hash.h"

#include "byte_io.h"
#include "grid_check.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moec::rt {

using namespace bundle_format;
using detail::alignUpChecked;
using detail::loadLE32;
using detail::loadLE64;

namespace {

const char *sectionName(uint32_t kind) {
  switch (kind) {
  case kSectionKindManifest:
    return "manifest";
  case kSectionKindCodeObjectTable:
    return "code-object table";
  case kSectionKindCodeObjects:
    return "code-object section";
  }
  return "section";
}

bool allZero(const uint8_t *p, uint64_t size) {
  for (uint64_t i = 0; i < size; ++i)
    if (p[i])
      return false;
  return true;
}

struct SectionRecord {
  uint32_t kind = 0, flags = 0;
  uint64_t offset = 0, size = 0, checksum = 0;
};

/// One entry of the code-object table.
struct CodeObjectRecord {
  uint64_t offset = 0, size = 0, checksum = 0;
  uint32_t encoding = 0;
};

/// Maps `path` read-only into `base` / `size`; on failure says why in
/// `why` with its status (IoError, or CorruptBundle when the file is
/// shorter than the header).
bool mapFile(const std::string &path, const uint8_t *&base, uint64_t &size,
             std::string &why, Status &status) {
  status = Status::IoError;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    int savedErrno = errno;
    ::close(fd);
    why = std::string("cannot stat: ") + std::strerror(savedErrno);
    return false;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    why = "not a regular file";
    return false;
  }
  const uint64_t actualSize = static_cast<uint64_t>(info.st_size);
  if (actualSize < kHeaderSize) {
    ::close(fd);
    status = Status::CorruptBundle;
    why = "truncated: " + std::to_string(actualSize) +
          " bytes, shorter than the " + std::to_string(kHeaderSize) +
          "-byte header";
    return false;
  }
  void *mapping = ::mmap(nullptr, actualSize, PROT_READ, MAP_PRIVATE, fd, 0);
  int mapErrno = errno;
  ::close(fd);
  if (mapping == MAP_FAILED) {
    why = std::string("mmap failed: ") + std::strerror(mapErrno);
    return false;
  }
  base = static_cast<const uint8_t *>(mapping);
  size = actualSize;
  return true;
}

/// Checks the header of the `size`-byte file at `base`: magic, version,
/// size, then its own checksum before any field is trusted. Sets the
/// code-object alignment. Returns what is wrong, "" when nothing.
std::string checkHeader(const uint8_t *base, uint64_t size, uint32_t &alignment) {
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0)
    return "not a moec bundle (bad magic)";
  const uint32_t version = loadLE32(base + 8);
  if (version != kVersion)
    return "unsupported bundle format version " + std::to_string(version) +
           " (this runtime reads version " + std::to_string(kVersion) + ")";
  const uint32_t headerSize = loadLE32(base + 12);
  if (headerSize != kHeaderSize)
    return "header size " + std::to_string(headerSize) + ", expected " +
           std::to_string(kHeaderSize);
  uint8_t headerCopy[kHeaderSize];
  std::memcpy(headerCopy, base, kHeaderSize);
  std::memset(headerCopy + kHeaderChecksumOffset, 0, 8);
  if (xxh64(headerCopy, kHeaderSize) != loadLE64(base + kHeaderChecksumOffset))
    return "header checksum mismatch";

  const uint64_t declaredSize = loadLE64(base + 16);
  if (declaredSize != size)
    return declaredSize > size
               ? "truncated: header says " + std::to_string(declaredSize) +
                     " bytes, file has " + std::to_string(size)
               : "trailing data: header says " + std::to_string(declaredSize) +
                     " bytes, file has " + std::to_string(size);
  if (loadLE32(base + 24) != kSectionCount)
    return "section count " + std::to_string(loadLE32(base + 24)) +
           ", expected " + std::to_string(kSectionCount);
  alignment = loadLE32(base + 28);
  if (alignment < kMinCodeObjectAlignment || alignment > 65536 ||
      (alignment & (alignment - 1)))
    return "invalid code-object alignment " + std::to_string(alignment);
  if (!allZero(base + 40, 8) ||
      !allZero(base + kSectionTableOffset + kSectionCount * kSectionEntrySize,
               kHeaderSize - kSectionTableOffset - kSectionCount * kSectionEntrySize))
    return "reserved header bytes are not zero";
  return "";
}

/// Reads the section table into `sections`, each inside the file.
std::string readSections(const uint8_t *base, uint64_t size,
                         SectionRecord (&sections)[kSectionCount]) {
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    const uint8_t *entry = base + kSectionTableOffset + s * kSectionEntrySize;
    sections[s] = {loadLE32(entry), loadLE32(entry + 4), loadLE64(entry + 8),
                   loadLE64(entry + 16), loadLE64(entry + 24)};
    if (sections[s].kind != s + 1)
      return "section " + std::to_string(s) + " has kind " +
             std::to_string(sections[s].kind) + ", expected " +
             std::to_string(s + 1) + " (" + sectionName(s + 1) + ")";
    if (sections[s].flags != 0)
      return std::string(sectionName(s + 1)) + ": unknown flags " +
             std::to_string(sections[s].flags);
    if (sections[s].offset > size || sections[s].size > size - sections[s].offset)
      return std::string(sectionName(s + 1)) + " [" +
             std::to_string(sections[s].offset) + ", +" +
             std::to_string(sections[s].size) + ") exceeds the file size " +
             std::to_string(size);
  }
  return "";
}

/// The layout is fully determined by the sizes; checks every offset and
/// that the gaps are zero, so no byte of the file is unchecked, then the
/// checksums of the manifest, the table and (with `verifyObjects`) the
/// code-object section.
std::string checkLayout(const uint8_t *base, uint64_t size, uint32_t alignment,
                        const SectionRecord (&sections)[kSectionCount],
                        bool verifyObjects) {
  const SectionRecord &manifestSection = sections[0];
  const SectionRecord &tableSection = sections[1];
  const SectionRecord &objectSection = sections[2];
  uint64_t expected = kHeaderSize;
  if (manifestSection.offset != expected)
    return "manifest offset " + std::to_string(manifestSection.offset) +
           ", expected " + std::to_string(expected);
  alignUpChecked(manifestSection.offset + manifestSection.size, kTableAlignment,
                 expected);
  if (tableSection.offset != expected)
    return "code-object table offset " + std::to_string(tableSection.offset) +
           ", expected " + std::to_string(expected);
  alignUpChecked(tableSection.offset + tableSection.size, alignment, expected);
  if (objectSection.offset != expected)
    return "code-object section offset " + std::to_string(objectSection.offset) +
           ", expected " + std::to_string(expected);
  if (objectSection.offset + objectSection.size != size)
    return "code-object section ends at " +
           std::to_string(objectSection.offset + objectSection.size) +
           ", file size is " + std::to_string(size);
  const uint64_t manifestEnd = manifestSection.offset + manifestSection.size;
  const uint64_t tableEnd = tableSection.offset + tableSection.size;
  if (!allZero(base + manifestEnd, tableSection.offset - manifestEnd) ||
      !allZero(base + tableEnd, objectSection.offset - tableEnd))
    return "padding between sections is not zero";

  if (xxh64(base + manifestSection.offset, manifestSection.size) !=
      manifestSection.checksum)
    return "manifest checksum mismatch";
  if (xxh64(base + tableSection.offset, tableSection.size) != tableSection.checksum)
    return "code-object table checksum mismatch";
  if (verifyObjects &&
      xxh64(base + objectSection.offset, objectSection.size) != objectSection.checksum)
    return "code-object section checksum mismatch";
  return "";
}

/// Reads the code-object table into `objects`: each entry's encoding, and
/// that the objects tile the code-object section at `alignment`.
std::string readCodeObjectTable(const uint8_t *base, uint64_t size,
                                uint32_t alignment,
                                const SectionRecord &tableSection,
                                const SectionRecord &objectSection,
                                std::vector<CodeObjectRecord> &objects) {
  if (tableSection.size < kCodeObjectTableHeaderSize)
    return "code-object table is " + std::to_string(tableSection.size) +
           " bytes, shorter than its header";
  const uint8_t *table = base + tableSection.offset;
  const uint32_t count = loadLE32(table);
  const uint32_t entrySize = loadLE32(table + 4);
  if (entrySize != kCodeObjectEntrySize)
    return "code-object table entry size " + std::to_string(entrySize) +
           ", expected " + std::to_string(kCodeObjectEntrySize);
  if (tableSection.size !=
      kCodeObjectTableHeaderSize + uint64_t(kCodeObjectEntrySize) * count)
    return "code-object table size " + std::to_string(tableSection.size) +
           " does not match its " + std::to_string(count) + " entries";
  if (!allZero(table + 8, 8))
    return "code-object table reserved bytes are not zero";
  objects.resize(count);
  uint64_t end = objectSection.offset, expected = objectSection.offset;
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t *entry = table + kCodeObjectTableHeaderSize + i * kCodeObjectEntrySize;
    CodeObjectRecord &object = objects[i];
    object.offset = loadLE64(entry);
    object.size = loadLE64(entry + 8);
    object.checksum = loadLE64(entry + 16);
    const uint32_t flags = loadLE32(entry + 24);
    const std::string name = "code object " + std::to_string(i);
    if (flags != kCodeObjectFlagsRawElf && flags != kEncodingMlirBytecode)
      return name + ": unsupported encoding flags " + std::to_string(flags);
    object.encoding = flags;
    if (loadLE32(entry + 28) != 0)
      return name + ": reserved bytes are not zero";
    // end <= size on entry (checked below), so alignUp cannot wrap; the
    // offset is checked to lie inside the file before the size is compared
    // with what remains, so offset + size never wraps.
    if (!alignUpChecked(end, alignment, expected) || expected >= size)
      return name + ": starts at " + std::to_string(expected) +
             ", at or past the end of the file (" + std::to_string(size) +
             " bytes)";
    if (object.offset != expected)
      return name + ": offset " + std::to_string(object.offset) + ", expected " +
             std::to_string(expected);
    if (object.size == 0 || object.size > size - object.offset)
      return name + ": size " + std::to_string(object.size) +
             " is empty or runs past the end of the file";
    end = object.offset + object.size;
  }
  if (end != size)
    return "code objects end at " + std::to_string(end) + ", file size is " +
           std::to_string(size);
  return "";
}

/// Parses the manifest `text` and checks it against the `objects` of the
/// file at `base` (their use, encodings and ELF headers) and builds the
/// selector.
std::string readManifest(std::string_view text, const uint8_t *base,
                         const std::vector<CodeObjectRecord> &objects,
                         Manifest &manifest, Selector &selector) {
  const uint32_t count = uint32_t(objects.size());
  std::string why;
  if (!parseCanonicalManifest(text, count, manifest, why))
    return "manifest: " + why;
  std::vector<uint32_t> encodings(count);
  std::vector<uint64_t> checksums(count);
  for (uint32_t i = 0; i < count; ++i) {
    encodings[i] = objects[i].encoding;
    checksums[i] = objects[i].checksum;
  }
  if (!checkObjectUse(manifest, encodings, checksums, why))
    return "manifest: " + why;
  if (manifest.bundleFormatVersion != kVersion)
    return "manifest: bundle_format.version is " +
           std::to_string(manifest.bundleFormatVersion) + ", header says " +
           std::to_string(kVersion);
  // Every code object is an AMDGPU ELF for the bundle's chip before
  // anything uses or writes it (its header only: 64 bytes, and the header
  // tables' bounds).
  for (uint32_t i = 0; i < count; ++i) {
    const CodeObjectRecord &object = objects[i];
    if (object.encoding == kCodeObjectFlagsRawElf &&
        !checkAmdgpuElf(base + object.offset, object.size, manifest.target.arch, why))
      return "code object " + std::to_string(i) + ": " + why;
  }
  if (!Selector::build(manifest.selection, manifest.configs.size(), selector, why))
    return "manifest: " + why;
  return "";
}

} // namespace

Bundle::~Bundle() {
  if (base_)
    ::munmap(const_cast<uint8_t *>(base_), size_);
}

std::unique_ptr<Bundle> Bundle::open(const std::string &path, std::string &error,
                                     const BundleOpenOptions &options) {
  Error failure;
  std::unique_ptr<Bundle> bundle = open(path, failure, options);
  if (!bundle)
    error = std::move(failure.message);
  return bundle;
}

std::unique_ptr<Bundle> Bundle::open(const std::string &path, Error &error,
                                     const BundleOpenOptions &options) {
  std::unique_ptr<Bundle> bundle(new Bundle());
  bundle->path_ = path;
  // Everything after the file is mapped is a verification failure; the
  // few failures before it pass Status::IoError.
  auto fail = [&](const std::string &what,
                  Status status = Status::CorruptBundle) -> std::unique_ptr<Bundle> {
    error.fail(status, path + ": " + what);
    return nullptr;
  };
  std::string why;
  Status mapStatus = Status::IoError;
  if (!mapFile(path, bundle->base_, bundle->size_, why, mapStatus))
    return fail(why, mapStatus);
  const uint8_t *base = bundle->base_;
  const uint64_t size = bundle->size_;

  uint32_t alignment = 0;
  SectionRecord sections[kSectionCount];
  const bool verifyObjectsNow = options.codeObjects == CodeObjectVerification::AtOpen;
  why = checkHeader(base, size, alignment);
  if (why.empty()) {
    bundle->codeObjectAlignment_ = alignment;
    why = readSections(base, size, sections);
  }
  if (why.empty())
    why = checkLayout(base, size, alignment, sections, verifyObjectsNow);
  std::vector<CodeObjectRecord> objects;
  if (why.empty())
    why = readCodeObjectTable(base, size, alignment, sections[1], sections[2],
                              objects);
  if (!why.empty())
    return fail(why);

  const uint32_t count = uint32_t(objects.size());
  for (const CodeObjectRecord &object : objects)
    bundle->codeObjects_.push_back(
        {object.offset, object.size, object.checksum, object.encoding});
  bundle->verified_.reset(new std::atomic<uint8_t>[count]);
  for (uint32_t i = 0; i < count; ++i)
    bundle->verified_[i].store(0, std::memory_order_relaxed);
  if (verifyObjectsNow) {
    // The section checksum covered every byte; also check each entry's own
    // checksum so a table/section mismatch cannot slip through.
    for (uint32_t i = 0; i < count; ++i) {
      if (xxh64(base + objects[i].offset, objects[i].size) != objects[i].checksum)
        return fail("code object " + std::to_string(i) + " checksum mismatch");
      bundle->verified_[i].store(1, std::memory_order_relaxed);
    }
  }

  const SectionRecord &manifestSection = sections[0];
  bundle->manifestText_ = std::string_view(
      reinterpret_cast<const char *>(base + manifestSection.offset),
      manifestSection.size);
  why = readManifest(bundle->manifestText_, base, objects, bundle->manifest_,
                     bundle->selector_);
  if (!why.empty())
    return fail(why);
  return bundle;
}

bool Bundle::codeObject(uint32_t index, CodeObjectView &out,
                        std::string &error) const {
  Error failure;
  if (codeObject(index, out, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool Bundle::codeObject(uint32_t index, CodeObjectView &out, Error &error) const {
  if (index >= codeObjects_.size())
    return error.fail(Status::InvalidArgument,
                      path_ + ": code object " + std::to_string(index) +
                          " out of range (" + std::to_string(codeObjects_.size()) +
                          " code objects)");
  const CodeObjectEntry &object = codeObjects_[index];
  if (!verified_[index].load(std::memory_order_acquire)) {
    if (xxh64(base_ + object.offset, object.size) != object.checksum)
      return error.fail(Status::CorruptBundle, path_ + ": code object " +
                                                   std::to_string(index) +
                                                   " checksum mismatch");
    verified_[index].store(1, std::memory_order_release);
  }
  out.data = base_ + object.offset;
  out.size = object.size;
  out.checksum = object.checksum;
  return true;
}

int64_t Bundle::findKernel(std::string_view name) const {
  for (size_t i = 0; i < manifest_.kernels.size(); ++i)
    if (manifest_.kernels[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

bool Bundle::applySelectionOverrides(std::string_view overrideJson,
                                     OverrideReport &report, std::string &error) {
  try {
    std::vector<SelectionTableOverride> overrides;
    if (!parseSelectionOverrides(overrideJson, manifest_.configs, overrides, error))
      return false;
    std::vector<SelectionTable> tables = selector_.tables();
    OverrideReport result;
    if (!mergeSelectionOverrides(tables, overrides, manifest_.configs.size(), result,
                                 error))
      return false;
    if (!detail::checkGridRulesAtRows(manifest_, tables, error)) {
      error = "override: " + error;
      return false;
    }
    Selector rebuilt;
    if (!Selector::build(std::move(tables), manifest_.configs.size(), rebuilt, error))
      return false;
    selector_ = std::move(rebuilt);
    report = std::move(result);
    return true;
  } catch (const std::exception &e) {
    error = std::string("override: ") + e.what();
  } catch (...) {
    error = "override: unexpected error";
  }
  return false;
}

bool Bundle::applySelectionOverridesFile(const std::string &overridePath,
                                         OverrideReport &report,
                                         std::string &error) {
  Error failure;
  if (applySelectionOverridesFile(overridePath, report, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool Bundle::applySelectionOverridesFile(const std::string &overridePath,
                                         OverrideReport &report, Error &error) {
  std::ifstream file(overridePath, std::ios::binary);
  if (!file)
    return error.fail(Status::IoError,
                      overridePath + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << file.rdbuf();
  std::string why;
  if (!applySelectionOverrides(text.str(), report, why))
    return error.fail(Status::InvalidArgument, overridePath + ": " + why);
  return true;
}

} // namespace moec::rt
