//===- hostile_support.h - bundles laid out by hand, as an attacker would -===//
//
// Builds bundle bytes without the writer's checks: any manifest text, any
// code-object table entries, with every checksum recomputed. Shared by the
// hostile-input tests and the bundle fuzz target (fuzz/bundle_fuzzer.cpp).
// Header-only; needs only the runtime's public headers.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TEST_HOSTILE_SUPPORT_H
#define MOEC_TEST_HOSTILE_SUPPORT_H

#include "moec/bundle.h"
#include "moec/hash.h"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace moec::test {

inline void putLE(uint8_t *p, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint64_t getLE(const uint8_t *p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = (value << 8) | p[i];
  return value;
}

/// One code-object table entry as written into the table.
struct CraftedEntry {
  uint64_t offset = 0, size = 0;
  uint32_t encoding = 0;
};

/// Recomputes every checksum of `bytes` in place, trusting nothing: each
/// section's and each table entry's checksum is recomputed only where its
/// range lies inside the buffer. Mutated bundles then fail (or pass) on
/// their content, never on a checksum.
inline void recomputeChecksums(std::vector<uint8_t> &bytes) {
  using namespace moec::rt::bundle_format;
  const uint64_t size = bytes.size();
  if (size < kHeaderSize)
    return;
  uint8_t *base = bytes.data();
  auto inside = [&](uint64_t offset, uint64_t length) {
    return offset <= size && length <= size - offset;
  };
  // The table first (entries), then the sections, then the header.
  const uint64_t tableOffset = getLE(base + kSectionTableOffset + 32 + 8, 8);
  const uint64_t tableSize = getLE(base + kSectionTableOffset + 32 + 16, 8);
  if (inside(tableOffset, tableSize) && tableSize >= kCodeObjectTableHeaderSize) {
    const uint64_t count = getLE(base + tableOffset, 4);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t at = tableOffset + kCodeObjectTableHeaderSize + i * kCodeObjectEntrySize;
      if (!inside(at, kCodeObjectEntrySize) || at + kCodeObjectEntrySize > tableOffset + tableSize)
        break;
      const uint64_t offset = getLE(base + at, 8), length = getLE(base + at + 8, 8);
      if (inside(offset, length))
        putLE(base + at + 16, moec::rt::xxh64(base + offset, length), 8);
    }
  }
  for (uint32_t s = 0; s < kSectionCount; ++s) {
    uint8_t *entry = base + kSectionTableOffset + s * kSectionEntrySize;
    const uint64_t offset = getLE(entry + 8, 8), length = getLE(entry + 16, 8);
    if (inside(offset, length))
      putLE(entry + 24, moec::rt::xxh64(base + offset, length), 8);
  }
  std::memset(base + kHeaderChecksumOffset, 0, 8);
  putLE(base + kHeaderChecksumOffset, moec::rt::xxh64(base, kHeaderSize), 8);
}

/// A bundle holding `manifest` verbatim and `objects`, laid out as the
/// format says, with `extra` table entries (pointing anywhere) appended
/// after the real ones. All checksums are right.
inline std::vector<uint8_t>
craftBundle(std::string_view manifest, const std::vector<std::vector<uint8_t>> &objects,
            const std::vector<uint32_t> &encodings = {},
            const std::vector<CraftedEntry> &extra = {}, uint32_t alignment = 256) {
  using namespace moec::rt::bundle_format;
  auto alignUp = [](uint64_t value, uint64_t to) { return (value + to - 1) / to * to; };
  const uint64_t count = objects.size() + extra.size();
  const uint64_t tableOffset = alignUp(kHeaderSize + manifest.size(), kTableAlignment);
  const uint64_t tableSize = kCodeObjectTableHeaderSize + kCodeObjectEntrySize * count;
  const uint64_t objectsOffset = alignUp(tableOffset + tableSize, alignment);
  std::vector<uint64_t> offsets;
  uint64_t end = objectsOffset;
  for (const auto &object : objects) {
    offsets.push_back(alignUp(end, alignment));
    end = offsets.back() + object.size();
  }
  std::vector<uint8_t> bytes(end, 0);
  uint8_t *base = bytes.data();
  std::memcpy(base, kMagic, sizeof(kMagic));
  putLE(base + 8, kVersion, 4);
  putLE(base + 12, kHeaderSize, 4);
  putLE(base + 16, end, 8);
  putLE(base + 24, kSectionCount, 4);
  putLE(base + 28, alignment, 4);
  const uint64_t sections[3][2] = {{kHeaderSize, manifest.size()},
                                   {tableOffset, tableSize},
                                   {objectsOffset, end - objectsOffset}};
  for (uint32_t s = 0; s < 3; ++s) {
    uint8_t *entry = base + kSectionTableOffset + s * kSectionEntrySize;
    putLE(entry, s + 1, 4);
    putLE(entry + 8, sections[s][0], 8);
    putLE(entry + 16, sections[s][1], 8);
  }
  if (!manifest.empty())
    std::memcpy(base + kHeaderSize, manifest.data(), manifest.size());
  uint8_t *table = base + tableOffset;
  putLE(table, count, 4);
  putLE(table + 4, kCodeObjectEntrySize, 4);
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t *entry = table + kCodeObjectTableHeaderSize + i * kCodeObjectEntrySize;
    if (i < objects.size()) {
      std::memcpy(base + offsets[i], objects[i].data(), objects[i].size());
      putLE(entry, offsets[i], 8);
      putLE(entry + 8, objects[i].size(), 8);
      putLE(entry + 24, i < encodings.size() ? encodings[i] : 0, 4);
    } else {
      const CraftedEntry &e = extra[i - objects.size()];
      putLE(entry, e.offset, 8);
      putLE(entry + 8, e.size, 8);
      putLE(entry + 24, e.encoding, 4);
    }
  }
  recomputeChecksums(bytes);
  return bytes;
}

} // namespace moec::test

#endif // MOEC_TEST_HOSTILE_SUPPORT_H
