//===- hash.h - 64-bit checksums for bundle sections ------------*- C++ -*-===//
//
// The bundle format checksums every section with XXH64 (seed 0), implemented
// here from the published algorithm description; `xxhsum -H1` on an extracted
// section prints the same value. See docs/bundle-format.md.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_HASH_H
#define MOEC_HASH_H

#include <cstddef>
#include <cstdint>

namespace moec::rt {

/// XXH64 of `size` bytes at `data` with the given seed (bundle v1 uses 0).
uint64_t xxh64(const void *data, size_t size, uint64_t seed = 0) noexcept;

} // namespace moec::rt

#endif // MOEC_HASH_H
