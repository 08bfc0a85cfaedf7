//===- hash.cpp - XXH64 -----------------------------------------*- C++ -*-===//
//
// XXH64 written from the algorithm description (four 64-bit lanes over
// 32-byte stripes, merge, tail, avalanche). Reads are little-endian and
// unaligned-safe (memcpy), so the result is the same on every host.
//
//===----------------------------------------------------------------------===//
#include "moec/hash.h"

#include <cstring>

namespace moec::rt {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotateLeft(uint64_t value, unsigned bits) {
  return (value << bits) | (value >> (64 - bits));
}

inline uint64_t readLE64(const uint8_t *p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | p[i];
  return value;
}

inline uint32_t readLE32(const uint8_t *p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
         (uint32_t(p[3]) << 24);
}

inline uint64_t mixLane(uint64_t accumulator, uint64_t input) {
  accumulator += input * kPrime2;
  accumulator = rotateLeft(accumulator, 31);
  return accumulator * kPrime1;
}

inline uint64_t mergeLane(uint64_t hash, uint64_t lane) {
  hash ^= mixLane(0, lane);
  return hash * kPrime1 + kPrime4;
}

} // namespace

uint64_t xxh64(const void *data, size_t size, uint64_t seed) noexcept {
  const uint8_t *p = static_cast<const uint8_t *>(data);
  const uint8_t *end = p + size;
  uint64_t hash;

  if (size >= 32) {
    uint64_t lane1 = seed + kPrime1 + kPrime2;
    uint64_t lane2 = seed + kPrime2;
    uint64_t lane3 = seed;
    uint64_t lane4 = seed - kPrime1;
    const uint8_t *lastStripe = end - 32;
    do {
      lane1 = mixLane(lane1, readLE64(p));
      lane2 = mixLane(lane2, readLE64(p + 8));
      lane3 = mixLane(lane3, readLE64(p + 16));
      lane4 = mixLane(lane4, readLE64(p + 24));
      p += 32;
    } while (p <= lastStripe);
    hash = rotateLeft(lane1, 1) + rotateLeft(lane2, 7) +
           rotateLeft(lane3, 12) + rotateLeft(lane4, 18);
    hash = mergeLane(hash, lane1);
    hash = mergeLane(hash, lane2);
    hash = mergeLane(hash, lane3);
    hash = mergeLane(hash, lane4);
  } else {
    hash = seed + kPrime5;
  }

  hash += static_cast<uint64_t>(size);

  while (end - p >= 8) {
    hash ^= mixLane(0, readLE64(p));
    hash = rotateLeft(hash, 27) * kPrime1 + kPrime4;
    p += 8;
  }
  if (end - p >= 4) {
    hash ^= static_cast<uint64_t>(readLE32(p)) * kPrime1;
    hash = rotateLeft(hash, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  while (p < end) {
    hash ^= static_cast<uint64_t>(*p) * kPrime5;
    hash = rotateLeft(hash, 11) * kPrime1;
    ++p;
  }

  hash ^= hash >> 33;
  hash *= kPrime2;
  hash ^= hash >> 29;
  hash *= kPrime3;
  hash ^= hash >> 32;
  return hash;
}

} // namespace moec::rt
