//===- bundle_writer.cpp - deterministic, atomic bundle writer --*- C++ -*-===//
#include "moec/bundle.h"
#include "moec/hash.h"

#include "byte_io.h"
#include "json_fields.h"

#include "moec/target/target_info.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace moec::rt {

using namespace bundle_format;
using detail::alignUpChecked;
using detail::storeLE32;
using detail::storeLE64;

namespace {

bool isPowerOfTwo(uint32_t value) { return value && !(value & (value - 1)); }

bool canonicalManifest(std::string_view manifestJson, uint32_t codeObjectCount,
                       std::string &canonical, Manifest &parsed,
                       std::string &error) {
  detail::Json root;
  if (!detail::parseJsonText(manifestJson, root, error)) {
    error = "manifest: " + error;
    return false;
  }
  if (!root.is_object()) {
    error = "manifest: expected a JSON object";
    return false;
  }
  root["bundle_format"] = detail::Json{{"version", kVersion}};
  // The stored text is the model serialised (every known field, sorted
  // keys, no whitespace), checked to read back to itself byte for byte, as
  // the reader will check it. dump() throws on invalid UTF-8 (caught by
  // the caller).
  Manifest model;
  if (!parseManifest(root.dump(-1, ' ', /*ensure_ascii=*/false),
                     codeObjectCount, model, error)) {
    error = "manifest: " + error;
    return false;
  }
  canonical = serializeManifest(model);
  if (!parseCanonicalManifest(canonical, codeObjectCount, parsed, error)) {
    error = "manifest: " + error;
    return false;
  }
  return true;
}

std::string hex16(uint64_t value) {
  static const char digits[] = "0123456789abcdef";
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    text[i] = digits[value & 15];
  return text;
}

uint16_t load16(const uint8_t *p) { return uint16_t(p[0] | (p[1] << 8)); }

} // namespace

bool checkAmdgpuElf(const uint8_t *data, uint64_t size, std::string_view arch,
                    std::string &error) {
  constexpr uint64_t kElfHeaderSize = 64;
  if (size < kElfHeaderSize) {
    error = std::to_string(size) + " bytes, shorter than an ELF64 header";
    return false;
  }
  if (std::memcmp(data, "\x7f" "ELF", 4) != 0) {
    error = "not an ELF image";
    return false;
  }
  if (data[4] != 2 /*ELFCLASS64*/ || data[5] != 1 /*ELFDATA2LSB*/ ||
      data[6] != 1 /*EV_CURRENT*/) {
    error = "not a 64-bit little-endian ELF image";
    return false;
  }
  const uint16_t type = load16(data + 16), machine = load16(data + 18);
  if (machine != target::kElfMachineAmdgpu) {
    error = "ELF e_machine " + std::to_string(machine) + ", expected " +
            std::to_string(target::kElfMachineAmdgpu) + " (EM_AMDGPU)";
    return false;
  }
  if (type != 3 /*ET_DYN*/) {
    error = "ELF e_type " + std::to_string(type) +
            ", expected 3 (a shared object, as the linker writes code objects)";
    return false;
  }
  const target::TargetInfo *chip = target::lookupTargetInfo(arch);
  if (!chip) {
    error = "target '" + std::string(arch) + "' has no known ELF mach number";
    return false;
  }
  const uint32_t mach = detail::loadLE32(data + 48) & target::kElfMachMask;
  if (mach != chip->elfMach) {
    const target::TargetInfo *other = nullptr;
    for (const target::TargetInfo *known : target::kKnownTargets)
      if (known->elfMach == mach)
        other = known;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%03x", mach);
    error = std::string("ELF e_flags mach ") + hex +
            (other ? std::string(" (") + other->arch + ")" : std::string()) +
            ", the bundle's target is " + std::string(arch);
    return false;
  }
  // Program and section header tables within the image (a loader walks
  // them), with overflow-safe arithmetic.
  struct Table {
    const char *what;
    uint64_t offset, entrySize, count;
  } tables[] = {
      {"program", detail::loadLE64(data + 32), load16(data + 54), load16(data + 56)},
      {"section", detail::loadLE64(data + 40), load16(data + 58), load16(data + 60)},
  };
  for (const Table &t : tables) {
    if (t.count == 0)
      continue;
    const uint64_t bytes = t.entrySize * t.count; // both < 2^16
    if (t.offset > size || bytes > size - t.offset) {
      error = std::string("ELF ") + t.what + " header table [" +
              std::to_string(t.offset) + ", +" + std::to_string(bytes) +
              ") runs past the image's " + std::to_string(size) + " bytes";
      return false;
    }
  }
  return true;
}

bool checkObjectUse(const Manifest &manifest,
                    const std::vector<uint32_t> &encodings,
                    const std::vector<uint64_t> &checksums, std::string &error) {
  std::vector<bool> used(encodings.size(), false);
  for (size_t k = 0; k < manifest.kernels.size(); ++k) {
    const KernelInfo &kernel = manifest.kernels[k];
    const std::string where = "kernels[" + std::to_string(k) + "]";
    if (encodings[kernel.codeObject] != kCodeObjectFlagsRawElf) {
      error = where + ".code_object: entry " +
              std::to_string(kernel.codeObject) + " is not an ELF code object";
      return false;
    }
    used[kernel.codeObject] = true;
    if (!kernel.ir.present())
      continue;
    if (encodings[kernel.ir.object] != kEncodingMlirBytecode) {
      error = where + ".ir.object: entry " + std::to_string(kernel.ir.object) +
              " is not kernel IR";
      return false;
    }
    if (hex16(checksums[kernel.ir.object]) != kernel.ir.hash) {
      error = where + ".ir.hash: " + kernel.ir.hash +
              " does not match the stored IR (" +
              hex16(checksums[kernel.ir.object]) + ")";
      return false;
    }
    used[kernel.ir.object] = true;
  }
  for (size_t i = 0; i < used.size(); ++i)
    if (!used[i]) {
      error = "code object " + std::to_string(i) + ": not used by any kernel";
      return false;
    }
  return true;
}

namespace {

bool serializeImpl(std::string_view manifestJson,
                   const std::vector<std::vector<uint8_t>> &codeObjects,
                   std::vector<uint8_t> &out, std::string &error,
                   const BundleWriteOptions &options) {
  const uint32_t alignment = options.codeObjectAlignment;
  if (!isPowerOfTwo(alignment) || alignment < kMinCodeObjectAlignment ||
      alignment > 65536) {
    error = "code object alignment " + std::to_string(alignment) +
            " must be a power of two in [256, 65536]";
    return false;
  }
  if (codeObjects.size() > UINT32_MAX) {
    error = "too many code objects";
    return false;
  }
  const uint32_t count = static_cast<uint32_t>(codeObjects.size());
  std::vector<uint32_t> encodings(count);
  std::vector<uint64_t> checksums(count);
  for (uint32_t i = 0; i < count; ++i) {
    const std::vector<uint8_t> &object = codeObjects[i];
    if (object.size() >= 4 && std::memcmp(object.data(), "\x7f" "ELF", 4) == 0)
      encodings[i] = kCodeObjectFlagsRawElf;
    else if (object.size() >= 4 && std::memcmp(object.data(), "ML\xef" "R", 4) == 0)
      encodings[i] = kEncodingMlirBytecode;
    else {
      error = "code object " + std::to_string(i) +
              ": neither an ELF image nor MLIR bytecode (" +
              std::to_string(object.size()) + " bytes)";
      return false;
    }
    checksums[i] = xxh64(object.data(), object.size());
  }

  std::string manifestText;
  Manifest manifest;
  if (!canonicalManifest(manifestJson, count, manifestText, manifest, error) ||
      !checkObjectUse(manifest, encodings, checksums, error))
    return false;
  for (uint32_t i = 0; i < count; ++i) {
    std::string why;
    if (encodings[i] == kCodeObjectFlagsRawElf &&
        !checkAmdgpuElf(codeObjects[i].data(), codeObjects[i].size(),
                        manifest.target.arch, why)) {
      error = "code object " + std::to_string(i) + ": " + why;
      return false;
    }
  }

  // Layout: header | manifest | pad to 8 | table | pad to alignment | objects.
  const uint64_t manifestOffset = kHeaderSize;
  const uint64_t manifestSize = manifestText.size();
  uint64_t tableOffset = 0, objectsOffset = 0;
  const uint64_t tableSize =
      kCodeObjectTableHeaderSize + uint64_t(kCodeObjectEntrySize) * count;
  alignUpChecked(manifestOffset + manifestSize, kTableAlignment, tableOffset);
  alignUpChecked(tableOffset + tableSize, alignment, objectsOffset);
  std::vector<uint64_t> objectOffsets(count);
  uint64_t end = objectsOffset;
  for (uint32_t i = 0; i < count; ++i) {
    alignUpChecked(end, alignment, objectOffsets[i]);
    end = objectOffsets[i] + codeObjects[i].size();
  }
  const uint64_t objectsSize = end - objectsOffset;
  const uint64_t fileSize = end;

  std::vector<uint8_t> bytes(fileSize, 0);
  std::memcpy(bytes.data() + manifestOffset, manifestText.data(), manifestSize);
  uint8_t *table = bytes.data() + tableOffset;
  storeLE32(table, count);
  storeLE32(table + 4, kCodeObjectEntrySize);
  for (uint32_t i = 0; i < count; ++i) {
    const std::vector<uint8_t> &object = codeObjects[i];
    std::memcpy(bytes.data() + objectOffsets[i], object.data(), object.size());
    uint8_t *entry = table + kCodeObjectTableHeaderSize + i * kCodeObjectEntrySize;
    storeLE64(entry, objectOffsets[i]);
    storeLE64(entry + 8, object.size());
    storeLE64(entry + 16, xxh64(object.data(), object.size()));
    storeLE32(entry + 24, encodings[i]);
  }

  uint8_t *header = bytes.data();
  std::memcpy(header, kMagic, sizeof(kMagic));
  storeLE32(header + 8, kVersion);
  storeLE32(header + 12, kHeaderSize);
  storeLE64(header + 16, fileSize);
  storeLE32(header + 24, kSectionCount);
  storeLE32(header + 28, alignment);
  struct Section {
    uint32_t kind;
    uint64_t offset, size;
  } sections[kSectionCount] = {
      {kSectionKindManifest, manifestOffset, manifestSize},
      {kSectionKindCodeObjectTable, tableOffset, tableSize},
      {kSectionKindCodeObjects, objectsOffset, objectsSize},
  };
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    uint8_t *entry = header + kSectionTableOffset + s * kSectionEntrySize;
    storeLE32(entry, sections[s].kind);
    storeLE64(entry + 8, sections[s].offset);
    storeLE64(entry + 16, sections[s].size);
    storeLE64(entry + 24, xxh64(bytes.data() + sections[s].offset, sections[s].size));
  }
  storeLE64(header + kHeaderChecksumOffset, xxh64(header, kHeaderSize));
  out = std::move(bytes);
  return true;
}

bool writeAll(int fd, const uint8_t *data, size_t size, std::string &why) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR)
        continue;
      why = std::string("write failed: ") + std::strerror(errno);
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

std::string parentDirectory(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

} // namespace

bool serializeBundle(std::string_view manifestJson,
                     const std::vector<std::vector<uint8_t>> &codeObjects,
                     std::vector<uint8_t> &out, std::string &error,
                     const BundleWriteOptions &options) {
  try {
    return serializeImpl(manifestJson, codeObjects, out, error, options);
  } catch (const std::exception &e) {
    error = std::string("bundle: ") + e.what();
  } catch (...) {
    error = "bundle: unexpected error";
  }
  return false;
}

bool writeBundle(const std::string &path, std::string_view manifestJson,
                 const std::vector<std::vector<uint8_t>> &codeObjects,
                 std::string &error, const BundleWriteOptions &options) {
  std::vector<uint8_t> bytes;
  if (!serializeBundle(manifestJson, codeObjects, bytes, error, options)) {
    error = path + ": " + error;
    return false;
  }
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    // Left behind by a crashed writer whose pid this process now has.
    ::unlink(temporary.c_str());
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    error = path + ": cannot create " + temporary + ": " + std::strerror(errno);
    return false;
  }
  std::string why;
  bool ok = writeAll(fd, bytes.data(), bytes.size(), why);
  if (ok && ::fsync(fd) != 0) {
    why = std::string("fsync failed: ") + std::strerror(errno);
    ok = false;
  }
  if (::close(fd) != 0 && ok) {
    why = std::string("close failed: ") + std::strerror(errno);
    ok = false;
  }
  if (ok && ::rename(temporary.c_str(), path.c_str()) != 0) {
    why = std::string("rename failed: ") + std::strerror(errno);
    ok = false;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    error = path + ": " + why;
    return false;
  }
  // Persist the rename itself; failure here does not undo a complete write.
  int directory = ::open(parentDirectory(path).c_str(), O_RDONLY | O_CLOEXEC);
  if (directory >= 0) {
    (void)::fsync(directory);
    ::close(directory);
  }
  return true;
}

} // namespace moec::rt
