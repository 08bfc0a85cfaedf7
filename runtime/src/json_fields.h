//===- json_fields.h - typed JSON field access with path errors -*- C++ -*-===//
//
// Internal to the runtime. Every reader names the full field path in its
// error ("kernels[2].launch.workgroup_size[1]: expected an unsigned integer").
// None of these throw.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_RUNTIME_SRC_JSON_FIELDS_H
#define MOEC_RUNTIME_SRC_JSON_FIELDS_H

#include "moec/manifest.h"
#include "moec/selection.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt::detail {

using Json = nlohmann::json;

/// Bounds of the JSON the runtime reads (manifests, selection overrides):
/// checked before a tree is built, so hostile text can neither recurse nor
/// allocate beyond them.
inline constexpr size_t kMaxJsonDepth = 16;
inline constexpr size_t kMaxJsonStringBytes = 16384;
inline constexpr size_t kMaxJsonTextBytes = size_t(64) << 20;

/// Parses JSON text without throwing. Refuses a NUL byte (naming its
/// offset), nesting deeper than kMaxJsonDepth, a string or key longer than
/// kMaxJsonStringBytes, a duplicate key in one object (naming the field
/// path) and malformed JSON ("invalid JSON at byte N: ...").
bool parseJsonText(std::string_view text, Json &out, std::string &error);

/// False with "`where.key`: unknown field" when `object` has a key not in
/// `known`.
bool knownFieldsOnly(const Json &object, const std::string &where,
                     std::initializer_list<std::string_view> known,
                     std::string &error);

/// `where.key`, or `key` when where is empty.
std::string fieldPath(const std::string &where, std::string_view key);
std::string indexPath(const std::string &where, size_t index);

bool expectObject(const Json &value, const std::string &where, std::string &error);
bool expectArray(const Json &value, const std::string &where, std::string &error);

/// Field `key` of `object` or nullptr.
const Json *findField(const Json &object, std::string_view key);

bool readString(const Json &object, std::string_view key, const std::string &where,
                bool required, std::string &out, std::string &error);
bool readUnsigned(const Json &object, std::string_view key,
                  const std::string &where, bool required, uint64_t maxValue,
                  uint64_t &out, std::string &error);
bool readU32(const Json &object, std::string_view key, const std::string &where,
             bool required, uint32_t &out, std::string &error);

/// Which optional table-level fields were present.
struct TableFieldsPresent {
  bool family = false, transport = false, aboveMax = false;
};

/// Parses one selection table object. `configs` resolves string config ids;
/// with `partial`, family/transport/above_max may be absent.
bool parseSelectionTableJson(const Json &value, const std::string &where,
                             const std::vector<ConfigInfo> &configs, bool partial,
                             SelectionTable &out, TableFieldsPresent &present,
                             std::string &error);

} // namespace moec::rt::detail

#endif // MOEC_RUNTIME_SRC_JSON_FIELDS_H
