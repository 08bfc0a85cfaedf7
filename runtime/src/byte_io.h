//===- byte_io.h - little-endian field access -------------------*- C++ -*-===//
// Internal to the runtime: host-endianness-independent reads and writes.
#ifndef MOEC_RUNTIME_SRC_BYTE_IO_H
#define MOEC_RUNTIME_SRC_BYTE_IO_H

#include <cstdint>

namespace moec::rt::detail {

inline void storeLE32(uint8_t *p, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline void storeLE64(uint8_t *p, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(value >> (8 * i));
}

inline uint32_t loadLE32(const uint8_t *p) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i)
    value = (value << 8) | p[i];
  return value;
}

inline uint64_t loadLE64(const uint8_t *p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | p[i];
  return value;
}

/// value rounded up to a multiple of `alignment` (a power of two); false on
/// overflow.
inline bool alignUpChecked(uint64_t value, uint64_t alignment, uint64_t &out) {
  const uint64_t mask = alignment - 1;
  if (value > UINT64_MAX - mask)
    return false;
  out = (value + mask) & ~mask;
  return true;
}

} // namespace moec::rt::detail

#endif // MOEC_RUNTIME_SRC_BYTE_IO_H
