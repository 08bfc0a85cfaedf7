//===- json_fields.cpp - typed JSON field access ----------------*- C++ -*-===//
#include "json_fields.h"

#include <cstring>
#include <unordered_set>

namespace moec::rt::detail {

namespace {

/// A SAX pass run before any tree is built: it bounds nesting and string
/// lengths and refuses duplicate keys, naming the field path it is in. It
/// never recurses (nlohmann's SAX parser keeps its own stack), so a
/// 100,000-deep array is refused without touching the call stack, and no
/// deep tree ever exists to be destroyed or dumped recursively.
class LimitChecker {
public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  std::string error;

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(number_integer_t) { return value(); }
  bool number_unsigned(number_unsigned_t) { return value(); }
  bool number_float(number_float_t, const string_t &) { return value(); }
  bool string(string_t &text) {
    if (text.size() > kMaxJsonStringBytes)
      return fail("string of " + std::to_string(text.size()) +
                  " bytes (max " + std::to_string(kMaxJsonStringBytes) + ")");
    return value();
  }
  bool binary(binary_t &) { return fail("binary value"); }
  bool start_object(std::size_t) { return open(true); }
  bool key(string_t &name) {
    if (name.size() > kMaxJsonStringBytes)
      return fail("key of " + std::to_string(name.size()) + " bytes (max " +
                  std::to_string(kMaxJsonStringBytes) + ")");
    Level &level = stack_.back();
    if (!level.keys.insert(name).second) {
      level.key = name;
      return fail("duplicate key");
    }
    level.key = name;
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string &,
                   const nlohmann::detail::exception &e) {
    if (error.empty()) {
      // e.what() is "[json.exception.parse_error.101] parse error at line
      // 1, column 7: syntax error ..."; keep the part after the id.
      std::string what = e.what();
      if (auto cut = what.find("] "); cut != std::string::npos)
        what = what.substr(cut + 2);
      error = "invalid JSON at byte " + std::to_string(position) + ": " + what;
    }
    return false;
  }

private:
  struct Level {
    bool object = false;
    size_t index = 0; ///< arrays: the element being read
    std::string key;  ///< objects: the key being read
    std::unordered_set<std::string> keys;
  };

  std::string path() const {
    std::string text;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Level &level = stack_[i];
      if (level.object) {
        if (level.key.empty())
          break;
        if (!text.empty())
          text += '.';
        text += level.key;
      } else {
        text += "[" + std::to_string(level.index) + "]";
      }
    }
    return text.empty() ? "manifest" : text;
  }
  bool fail(const std::string &what) {
    if (error.empty())
      error = path() + ": " + what;
    return false;
  }
  /// A scalar or a whole container was read: the next array element.
  bool value() {
    if (!stack_.empty() && !stack_.back().object)
      ++stack_.back().index;
    return true;
  }
  bool open(bool object) {
    if (stack_.size() >= kMaxJsonDepth)
      return fail("nested deeper than " + std::to_string(kMaxJsonDepth) +
                  " levels");
    stack_.push_back(Level{object, 0, {}, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return value();
  }

  std::vector<Level> stack_;
};

} // namespace

bool parseJsonText(std::string_view text, Json &out, std::string &error) {
  if (text.size() > kMaxJsonTextBytes) {
    error = "JSON text of " + std::to_string(text.size()) + " bytes (max " +
            std::to_string(kMaxJsonTextBytes) + ")";
    return false;
  }
  if (const void *nul = std::memchr(text.data(), '\0', text.size())) {
    error = "NUL byte at offset " +
            std::to_string(static_cast<const char *>(nul) - text.data());
    return false;
  }
  {
    LimitChecker checker;
    const bool ok = Json::sax_parse(text.begin(), text.end(), &checker,
                                    Json::input_format_t::json,
                                    /*strict=*/true);
    if (!ok) {
      error = checker.error.empty() ? "invalid JSON" : checker.error;
      return false;
    }
  }
  Json parsed = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    error = "invalid JSON";
    return false;
  }
  out = std::move(parsed);
  return true;
}

bool knownFieldsOnly(const Json &object, const std::string &where,
                     std::initializer_list<std::string_view> known,
                     std::string &error) {
  if (!object.is_object())
    return true;
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (std::string_view name : known)
      found |= it.key() == name;
    if (!found) {
      error = fieldPath(where, it.key()) + ": unknown field";
      return false;
    }
  }
  return true;
}

std::string fieldPath(const std::string &where, std::string_view key) {
  if (where.empty())
    return std::string(key);
  std::string path = where;
  path += '.';
  path += key;
  return path;
}

std::string indexPath(const std::string &where, size_t index) {
  return where + "[" + std::to_string(index) + "]";
}

bool expectObject(const Json &value, const std::string &where, std::string &error) {
  if (value.is_object())
    return true;
  error = (where.empty() ? std::string("manifest") : where) + ": expected an object";
  return false;
}

bool expectArray(const Json &value, const std::string &where, std::string &error) {
  if (value.is_array())
    return true;
  error = where + ": expected an array";
  return false;
}

const Json *findField(const Json &object, std::string_view key) {
  if (!object.is_object())
    return nullptr;
  auto it = object.find(std::string(key));
  return it == object.end() ? nullptr : &*it;
}

namespace {

/// Points `field` at `key` (nullptr when absent); false, with the error, when
/// a `required` field is absent.
bool findRequired(const Json &object, std::string_view key,
                  const std::string &where, bool required, const Json *&field,
                  std::string &error) {
  field = findField(object, key);
  if (field || !required)
    return true;
  error = fieldPath(where, key) + ": missing";
  return false;
}

} // namespace

bool readString(const Json &object, std::string_view key, const std::string &where,
                bool required, std::string &out, std::string &error) {
  const Json *field = nullptr;
  if (!findRequired(object, key, where, required, field, error))
    return false;
  if (!field) // optional and absent
    return true;
  if (!field->is_string()) {
    error = fieldPath(where, key) + ": expected a string";
    return false;
  }
  out = field->get_ref<const std::string &>();
  return true;
}

bool readUnsigned(const Json &object, std::string_view key,
                  const std::string &where, bool required, uint64_t maxValue,
                  uint64_t &out, std::string &error) {
  const Json *field = nullptr;
  if (!findRequired(object, key, where, required, field, error))
    return false;
  if (!field) // optional and absent
    return true;
  uint64_t value = 0;
  if (field->is_number_unsigned()) {
    value = field->get<uint64_t>();
  } else if (field->is_number_integer() && field->get<int64_t>() >= 0) {
    value = static_cast<uint64_t>(field->get<int64_t>());
  } else {
    error = fieldPath(where, key) + ": expected an unsigned integer";
    return false;
  }
  if (value > maxValue) {
    error = fieldPath(where, key) + ": " + std::to_string(value) +
            " is out of range (max " + std::to_string(maxValue) + ")";
    return false;
  }
  out = value;
  return true;
}

bool readU32(const Json &object, std::string_view key, const std::string &where,
             bool required, uint32_t &out, std::string &error) {
  uint64_t value = out;
  if (!readUnsigned(object, key, where, required, UINT32_MAX, value, error))
    return false;
  out = static_cast<uint32_t>(value);
  return true;
}

namespace {

/// One spelling of an enum value in a selection table's JSON.
template <typename E> struct EnumName {
  const char *text;
  E value;
};

constexpr EnumName<KernelFamily> kFamilyNames[] = {
    {"megamoe", KernelFamily::MegaMoe},
    {"tp", KernelFamily::Tp},
    {"fhmoe", KernelFamily::FhMoe}};
constexpr EnumName<Transport> kTransportNames[] = {
    {"fixed-slot", Transport::FixedSlot},
    {"compact", Transport::Compact},
    {"none", Transport::None}};
constexpr EnumName<AboveMaxPolicy> kAboveMaxNames[] = {
    {"largest", AboveMaxPolicy::Largest},
    {"error", AboveMaxPolicy::Error}};

/// Reads the enum field `key` spelled as one of `names`; a partial table may
/// leave it out. `noun` names the field in the error ("unknown family ...").
template <typename E, size_t N>
bool readEnumField(const Json &object, const char *key, const std::string &where,
                   bool partial, const char *noun, const EnumName<E> (&names)[N],
                   E &out, bool &present, std::string &error) {
  if (!findField(object, key) && partial)
    return true;
  std::string text;
  if (!readString(object, key, where, true, text, error))
    return false;
  for (const EnumName<E> &name : names)
    if (text == name.text) {
      out = name.value;
      present = true;
      return true;
    }
  // "(expected a, b or c)"
  std::string expected;
  for (size_t i = 0; i < N; ++i)
    expected += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + names[i].text;
  error = fieldPath(where, key) + ": unknown " + noun + " '" + text +
          "' (expected " + expected + ")";
  return false;
}

} // namespace

bool parseSelectionTableJson(const Json &value, const std::string &where,
                             const std::vector<ConfigInfo> &configs, bool partial,
                             SelectionTable &out, TableFieldsPresent &present,
                             std::string &error) {
  if (!expectObject(value, where, error))
    return false;
  SelectionTable table;
  if (!readString(value, "network", where, true, table.network, error) ||
      !readU32(value, "ep", where, true, table.ep, error) ||
      !readU32(value, "workspace", where, true, table.workspace, error))
    return false;

  present = TableFieldsPresent{};
  if (!readEnumField(value, "family", where, partial, "family", kFamilyNames,
                     table.family, present.family, error) ||
      !readEnumField(value, "transport", where, partial, "transport",
                     kTransportNames, table.transport, present.transport, error) ||
      !readEnumField(value, "above_max", where, partial, "policy",
                     kAboveMaxNames, table.aboveMax, present.aboveMax, error))
    return false;

  const Json *rows = findField(value, "rows");
  const std::string rowsPath = fieldPath(where, "rows");
  if (!rows) {
    error = rowsPath + ": missing";
    return false;
  }
  if (!expectArray(*rows, rowsPath, error))
    return false;
  table.rows.reserve(rows->size());
  for (size_t i = 0; i < rows->size(); ++i) {
    const Json &rowJson = (*rows)[i];
    const std::string rowPath = indexPath(rowsPath, i);
    if (!expectObject(rowJson, rowPath, error))
      return false;
    SelectionRow row;
    if (!readU32(rowJson, "m", rowPath, true, row.m, error))
      return false;
    const Json *config = findField(rowJson, "config");
    if (!config) {
      error = fieldPath(rowPath, "config") + ": missing";
      return false;
    }
    if (config->is_string()) {
      const std::string &id = config->get_ref<const std::string &>();
      size_t found = configs.size();
      for (size_t c = 0; c < configs.size(); ++c)
        if (configs[c].id == id) {
          found = c;
          break;
        }
      if (found == configs.size()) {
        error = fieldPath(rowPath, "config") + ": no configuration with id '" + id + "'";
        return false;
      }
      row.config = static_cast<uint32_t>(found);
    } else if (!readU32(rowJson, "config", rowPath, true, row.config, error)) {
      error = fieldPath(rowPath, "config") +
              ": expected a configuration index or id string";
      return false;
    }
    table.rows.push_back(row);
  }
  out = std::move(table);
  return true;
}

} // namespace moec::rt::detail
