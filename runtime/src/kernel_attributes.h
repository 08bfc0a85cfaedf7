//===- kernel_attributes.h - reading a kernel's manifest attributes -*- C++ -*-===//
//
// The manifest keeps each kernel's moe dialect attributes as their text
// ("#moe.problem<hidden = 5120, ...>", "16 : i64"). The layer and the
// open-time grid check read the few numbers they need from that text
// here, and size the sorted route list the same way.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_RUNTIME_KERNEL_ATTRIBUTES_H
#define MOEC_RUNTIME_KERNEL_ATTRIBUTES_H

#include "moec/manifest.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace moec::rt::detail {

inline uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// The text of attribute `name` of a kernel ("" when absent).
inline std::string_view attribute(const KernelInfo &kernel, std::string_view name) {
  for (const auto &[key, value] : kernel.attributes)
    if (key == name)
      return value;
  return {};
}

/// The value of `key = value` inside an attribute's `<...>` ("" if absent).
inline std::string_view parameter(std::string_view text, std::string_view key) {
  size_t open = text.find('<');
  if (open == std::string_view::npos)
    return {};
  size_t position = open + 1;
  while (position < text.size()) {
    while (position < text.size() && text[position] == ' ')
      ++position;
    size_t equals = text.find('=', position);
    if (equals == std::string_view::npos)
      return {};
    std::string_view name = text.substr(position, equals - position);
    while (!name.empty() && name.back() == ' ')
      name.remove_suffix(1);
    size_t start = equals + 1;
    while (start < text.size() && text[start] == ' ')
      ++start;
    size_t end = start;
    int depth = 0;
    while (end < text.size() && !(depth == 0 && (text[end] == ',' || text[end] == '>'))) {
      if (text[end] == '<')
        ++depth;
      if (text[end] == '>')
        --depth;
      ++end;
    }
    if (name == key)
      return text.substr(start, end - start);
    position = end + 1;
  }
  return {};
}

/// A leading unsigned integer of `text` ("16 : i64" -> 16); -1 if none.
inline int64_t leadingInteger(std::string_view text) {
  int64_t value = 0;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9' && value < (int64_t(1) << 40))
    value = value * 10 + (text[i++] - '0');
  return i == 0 ? -1 : value;
}

inline int64_t integerParameter(std::string_view text, std::string_view key,
                                int64_t fallback) {
  int64_t parsed = leadingInteger(parameter(text, key));
  return parsed < 0 ? fallback : parsed;
}

/// Padded length of the sorted route list: every route local, each
/// non-empty expert padded to the tile.
inline uint64_t sortedCapacity(uint64_t routes, uint64_t localExperts,
                               uint64_t tile) {
  const uint64_t padded = routes + std::min(routes, localExperts) * (tile - 1);
  return alignUp(padded, tile);
}

} // namespace moec::rt::detail

#endif // MOEC_RUNTIME_KERNEL_ATTRIBUTES_H
