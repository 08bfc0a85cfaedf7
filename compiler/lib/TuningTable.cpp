//===- TuningTable.cpp - the tuning-table text format ---------------------===//

#include "moec/Compiler/TuningTable.h"
#include "moec/Compiler/KnobSpelling.h"
#include "moec/Dialect/Moe/MoeKnobs.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace moec {
namespace {

/// Reader bounds of a problem line (docs/table-format.md, "Limits"). The
/// sizes are what a gfx9 kernel can address and the compiler unrolls in
/// reasonable time; the per-rank weights must also fit one buffer resource
/// (checked in parseProblem).
constexpr int64_t kMaxHidden = 65536;
constexpr int64_t kMaxIntermediate = 65536;
constexpr int64_t kMaxExperts = 65536;
constexpr int64_t kMaxTopK = 256;
constexpr int64_t kMaxEp = 1024;
/// Selection numbers are stored as 32-bit unsigned integers in the bundle.
constexpr int64_t kMaxSelectionNumber = UINT32_MAX;

/// One `key=value` field of a line.
struct Field {
  std::string key, value;
};

/// Parser state: the file, the line being read and the first error.
class TableParser {
public:
  TableParser(const std::string &path, TuningTable &table)
      : path(path), table(table) {}

  bool parse(const std::string &text);
  std::string error;

private:
  bool fail(const std::string &field, const std::string &message) {
    std::ostringstream os;
    os << path << ":" << line << ": ";
    if (!field.empty())
      os << "field '" << field << "': ";
    os << message;
    error = os.str();
    return false;
  }
  SourceLine here() const { return {path, line}; }

  bool parseLine(const std::string &directive, const std::string &name,
                 std::vector<Field> &fields);
  bool parseProblem(const std::string &name, std::vector<Field> &fields);
  bool parseKernel(const std::string &name, std::vector<Field> &fields);
  bool parseConfig(const std::string &name, std::vector<Field> &fields);
  bool parseSelect(std::vector<Field> &fields);
  bool parseRow(std::vector<Field> &fields);
  bool checkReferences();

  /// Takes the field `key` out of `fields`; absent gives false.
  bool take(std::vector<Field> &fields, const std::string &key,
            std::string &value) {
    auto it = std::find_if(fields.begin(), fields.end(),
                           [&](const Field &f) { return f.key == key; });
    if (it == fields.end())
      return false;
    value = it->value;
    fields.erase(it);
    return true;
  }
  bool takeRequired(std::vector<Field> &fields, const std::string &key,
                    std::string &value) {
    if (take(fields, key, value))
      return true;
    return fail(key, "missing");
  }
  bool takeInt(std::vector<Field> &fields, const std::string &key,
               int64_t &value, bool required, int64_t min = 1,
               int64_t max = kMaxSelectionNumber) {
    std::string text;
    if (!take(fields, key, text))
      return required ? fail(key, "missing") : true;
    // strtoll, not stoll: the compiler is built without exceptions.
    errno = 0;
    char *end = nullptr;
    value = std::strtoll(text.c_str(), &end, 10);
    if (errno != 0 || end != text.c_str() + text.size())
      return fail(key, "expected an integer, got '" + text + "'");
    if (value < min || value > max)
      return fail(key, "must be in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "], got " + text);
    return true;
  }
  /// A time in microseconds: a finite decimal number >= 0.
  bool takeMicroseconds(std::vector<Field> &fields, const std::string &key,
                        std::string &value) {
    if (!takeRequired(fields, key, value))
      return false;
    errno = 0;
    char *end = nullptr;
    const double number = std::strtod(value.c_str(), &end);
    if (errno != 0 || value.empty() || end != value.c_str() + value.size() ||
        !(number >= 0) || number > 1e12 ||
        value.find_first_not_of("0123456789.") != std::string::npos)
      return fail(key, "expected a time in microseconds (a decimal number "
                       ">= 0), got '" + value + "'");
    return true;
  }
  /// The row's provenance fields: nothing, or model-ranked with its model
  /// and predicted time, or measured with device, method, date and time
  /// (and optionally the model's prediction beside it).
  bool parseRowProvenance(std::vector<Field> &fields, RowProvenance &p) {
    if (!take(fields, "provenance", p.kind)) {
      for (const char *key : {"model", "predicted_us", "device", "method",
                              "date", "measured_us"})
        if (std::any_of(fields.begin(), fields.end(),
                        [&](const Field &f) { return f.key == key; }))
          return fail(key, "needs provenance=model-ranked or provenance=measured");
      return true;
    }
    if (p.kind == "model-ranked") {
      for (const char *key : {"device", "method", "date", "measured_us"})
        if (std::any_of(fields.begin(), fields.end(),
                        [&](const Field &f) { return f.key == key; }))
          return fail(key, "only a measured row has it (nothing unmeasured "
                           "is labelled measured)");
      return takeRequired(fields, "model", p.model) &&
             takeMicroseconds(fields, "predicted_us", p.predictedUs);
    }
    if (p.kind == "measured") {
      if (!takeRequired(fields, "device", p.device) ||
          !takeRequired(fields, "method", p.method) ||
          !takeRequired(fields, "date", p.date) ||
          !takeMicroseconds(fields, "measured_us", p.measuredUs))
        return false;
      if (p.date.size() != 10 || p.date[4] != '-' || p.date[7] != '-' ||
          p.date.find_first_not_of("0123456789-") != std::string::npos)
        return fail("date", "expected YYYY-MM-DD, got '" + p.date + "'");
      if (take(fields, "model", p.model))
        return takeMicroseconds(fields, "predicted_us", p.predictedUs);
      return true;
    }
    return fail("provenance", "expected model-ranked or measured, got '" +
                                  p.kind + "'");
  }
  bool noneLeft(const std::vector<Field> &fields) {
    if (fields.empty())
      return true;
    return fail(fields.front().key, "unknown field");
  }

  const std::string &path;
  TuningTable &table;
  int line = 0;
  /// Name -> index of every problem, kernel and config, and the lines of
  /// every selection key and row, so every duplicate check is one lookup
  /// (a 100,000-row table reads in linear time).
  std::unordered_map<std::string, size_t> problemIndex, kernelIndex, configIndex;
  std::unordered_map<std::string, int> selectionLines;
  std::unordered_map<int64_t, int> rowLines; ///< of the current selection
};

bool TableParser::parse(const std::string &text) {
  std::istringstream input(text);
  std::string raw;
  bool sawHeader = false;
  while (std::getline(input, raw)) {
    ++line;
    if (auto hash = raw.find('#'); hash != std::string::npos)
      raw.resize(hash);
    std::istringstream words(raw);
    std::string directive, word, name;
    if (!(words >> directive))
      continue;
    if (!sawHeader) {
      std::string version;
      words >> version;
      if (directive != "moec-table" || version != "1")
        return fail("", "expected the header 'moec-table 1'");
      sawHeader = true;
      continue;
    }
    std::vector<Field> fields;
    while (words >> word) {
      auto eq = word.find('=');
      if (eq == std::string::npos) {
        if (!name.empty() || !fields.empty())
          return fail("", "expected key=value, got '" + word + "'");
        name = word;
        continue;
      }
      Field field{word.substr(0, eq), word.substr(eq + 1)};
      if (field.key.empty() || field.value.empty())
        return fail(field.key, "expected key=value, got '" + word + "'");
      for (const Field &seen : fields)
        if (seen.key == field.key)
          return fail(field.key, "given twice");
      fields.push_back(field);
    }
    if (!parseLine(directive, name, fields))
      return false;
  }
  if (!sawHeader) {
    line = 1;
    return fail("", "empty table: expected the header 'moec-table 1'");
  }
  return checkReferences();
}

bool TableParser::parseLine(const std::string &directive,
                            const std::string &name,
                            std::vector<Field> &fields) {
  bool named = directive == "problem" || directive == "kernel" ||
               directive == "config";
  if (named && name.empty())
    return fail("", "'" + directive + "' needs a name");
  if (!named && !name.empty())
    return fail("", "'" + directive + "' takes no name, got '" + name + "'");
  if (directive == "problem")
    return parseProblem(name, fields);
  if (directive == "kernel")
    return parseKernel(name, fields);
  if (directive == "config")
    return parseConfig(name, fields);
  if (directive == "select")
    return parseSelect(fields);
  if (directive == "row")
    return parseRow(fields);
  return fail("", "unknown directive '" + directive +
                      "' (expected problem, kernel, config, select or row)");
}

bool TableParser::parseProblem(const std::string &name,
                               std::vector<Field> &fields) {
  if (problemIndex.count(name))
    return fail("", "problem '" + name + "' defined twice");
  TableProblem p;
  p.name = name;
  p.where = here();
  if (!takeRequired(fields, "family", p.family))
    return false;
  if (p.family != "megamoe" && p.family != "tp" && p.family != "fhmoe")
    return fail("family", "expected megamoe, tp or fhmoe, got '" + p.family + "'");
  if (!takeInt(fields, "hidden", p.hidden, true, 1, kMaxHidden) ||
      !takeInt(fields, "intermediate", p.intermediate, true, 1,
               kMaxIntermediate) ||
      !takeInt(fields, "experts", p.experts, true, 1, kMaxExperts) ||
      !takeInt(fields, "top_k", p.topK, true, 1, kMaxTopK) ||
      !takeInt(fields, "ep", p.ep, false, 1, kMaxEp))
    return false;
  if (p.experts % p.ep != 0)
    return fail("ep", "experts=" + std::to_string(p.experts) +
                          " is not divisible by ep=" + std::to_string(p.ep));
  for (auto [key, format] : {std::pair<const char *, std::string *>{
                                 "a_format", &p.aFormat},
                             {"mid_format", &p.midFormat}}) {
    if (take(fields, key, *format) && *format != "fp8" && *format != "fp4" &&
        *format != "bf16")
      return fail(key, "expected fp8, fp4 or bf16, got '" + *format + "'");
  }
  // A16W4: BF16 tokens go to W13 unquantised, and W13 writes a BF16
  // intermediate.
  if ((p.aFormat == "bf16") != (p.midFormat == "bf16"))
    return fail(p.aFormat == "bf16" ? "mid_format" : "a_format",
                "a_format=bf16 (A16W4) and mid_format=bf16 go together");
  // One rank's W13 weights (E/ep experts of [2I, H] E2M1 pairs, I x H bytes
  // each; the FHMoE shared expert's FP8 [2I, H] is 2 I H) are addressed
  // through one buffer resource, whose range is 32 bits. All factors are
  // bounded above, so the product fits int64.
  const int64_t weightBytes = std::max(p.experts / p.ep * p.intermediate * p.hidden,
                                       2 * p.intermediate * p.hidden);
  if (weightBytes > int64_t(target::kMaxBufferBytes))
    return fail("hidden", "one rank's weights need " +
                              std::to_string(weightBytes) +
                              " bytes, more than one buffer resource addresses (" +
                              std::to_string(target::kMaxBufferBytes) + ")");
  problemIndex.emplace(name, table.problems.size());
  table.problems.push_back(p);
  return noneLeft(fields);
}

bool TableParser::parseKernel(const std::string &name,
                              std::vector<Field> &fields) {
  if (kernelIndex.count(name))
    return fail("", "kernel '" + name + "' defined twice");
  TableKernel k;
  k.name = name;
  k.where = here();
  std::string stageText;
  if (!takeRequired(fields, "stage", stageText) ||
      !takeRequired(fields, "problem", k.problem))
    return false;
  // Knob names are checked here against the dialect's knob table; values
  // when the stage op is built (StageBuilder), with this line in the
  // message.
  const std::optional<abi::Stage> stage = abi::parseStage(stageText);
  const moe::StageKnobs *knobs =
      stage ? moe::lookupStageKnobs(abi::stageName(*stage)) : nullptr;
  if (!knobs)
    return fail("stage", "unsupported stage '" + stageText + "' (expected " +
                             moe::stageNameList() + ")");
  k.stage = *stage;
  for (const Field &f : fields) {
    if (std::string old = oldKnobSpelling(k.stage, f.key, f.value); !old.empty())
      return fail("", old);
    const moe::KnobInfo *knob = knobs->find(f.key);
    if (!knob)
      return fail(f.key, "not a knob of a " + stageText + " kernel");
    if (std::string(knob->owner) == "problem")
      return fail(f.key, "belongs on the problem line");
    k.knobs[f.key] = f.value;
  }
  kernelIndex.emplace(name, table.kernels.size());
  table.kernels.push_back(k);
  return true;
}

bool TableParser::parseConfig(const std::string &name,
                              std::vector<Field> &fields) {
  if (configIndex.count(name))
    return fail("", "config '" + name + "' defined twice");
  TableConfig c;
  c.name = name;
  c.where = here();
  std::string list;
  if (!takeRequired(fields, "kernels", list))
    return false;
  std::istringstream items(list);
  std::string item;
  while (std::getline(items, item, ','))
    if (!item.empty())
      c.kernels.push_back(item);
  if (c.kernels.empty())
    return fail("kernels", "needs at least one kernel");
  take(fields, "provenance", c.provenance);
  if (c.provenance != "measured" && c.provenance != "model-ranked")
    return fail("provenance", "expected measured or model-ranked, got '" +
                                  c.provenance + "'");
  configIndex.emplace(name, table.configs.size());
  table.configs.push_back(c);
  return noneLeft(fields);
}

bool TableParser::parseSelect(std::vector<Field> &fields) {
  TableSelection s;
  s.where = here();
  if (!takeRequired(fields, "network", s.network) ||
      !takeRequired(fields, "family", s.family) ||
      !takeInt(fields, "ep", s.ep, true, 1, kMaxEp) ||
      !takeInt(fields, "workspace", s.workspace, true) ||
      !takeRequired(fields, "transport", s.transport))
    return false;
  if (s.family != "megamoe" && s.family != "tp" && s.family != "fhmoe")
    return fail("family", "expected megamoe, tp or fhmoe, got '" + s.family + "'");
  if (s.transport == "fixed-slot")
    return fail("transport", "write transport=fixed_slot ('fixed-slot' is the "
                             "old spelling)");
  if (s.transport != "fixed_slot" && s.transport != "compact" &&
      s.transport != "none")
    return fail("transport", "expected fixed_slot, compact or none, got '" +
                                 s.transport + "'");
  take(fields, "above_max", s.aboveMax);
  if (s.aboveMax != "largest" && s.aboveMax != "error")
    return fail("above_max", "expected largest or error, got '" + s.aboveMax + "'");
  const std::string key = s.network + '\n' + std::to_string(s.ep) + '\n' +
                          std::to_string(s.workspace);
  if (auto [it, added] = selectionLines.emplace(key, line); !added)
    return fail("workspace", "selection table for network " + s.network +
                                 " ep " + std::to_string(s.ep) +
                                 " workspace " + std::to_string(s.workspace) +
                                 " already defined at line " +
                                 std::to_string(it->second));
  rowLines.clear();
  table.selections.push_back(s);
  return noneLeft(fields);
}

bool TableParser::parseRow(std::vector<Field> &fields) {
  if (table.selections.empty())
    return fail("", "'row' before any 'select'");
  TableRow r;
  r.where = here();
  if (!takeInt(fields, "m", r.m, true) ||
      !takeRequired(fields, "config", r.config) ||
      !parseRowProvenance(fields, r.provenance))
    return false;
  TableSelection &s = table.selections.back();
  if (auto [it, added] = rowLines.emplace(r.m, line); !added)
    return fail("m", "row m=" + std::to_string(r.m) +
                         " already given at line " +
                         std::to_string(it->second));
  s.rows.push_back(r);
  return noneLeft(fields);
}

bool TableParser::checkReferences() {
  for (const TableKernel &k : table.kernels)
    if (!problemIndex.count(k.problem)) {
      line = k.where.line;
      return fail("problem", "unknown problem '" + k.problem + "'");
    }
  std::unordered_set<std::string> usedConfigs, usedKernels;
  for (const TableSelection &s : table.selections) {
    if (s.rows.empty()) {
      line = s.where.line;
      return fail("", "selection table has no rows");
    }
    for (const TableRow &r : s.rows) {
      if (!configIndex.count(r.config)) {
        line = r.where.line;
        return fail("config", "unknown config '" + r.config + "'");
      }
      usedConfigs.insert(r.config);
    }
  }
  for (const TableConfig &c : table.configs) {
    line = c.where.line;
    if (!usedConfigs.count(c.name))
      return fail("", "config '" + c.name +
                          "' is not selected by any row, so no key reaches it");
    for (const std::string &k : c.kernels) {
      if (!kernelIndex.count(k))
        return fail("kernels", "unknown kernel '" + k + "'");
      usedKernels.insert(k);
    }
  }
  // A selection serves the problem its kernels were built for: the same
  // family and EP size (each config checked once per selection).
  for (const TableSelection &s : table.selections) {
    std::unordered_set<std::string> seen;
    for (const TableRow &r : s.rows) {
      if (!seen.insert(r.config).second)
        continue;
      const TableConfig &c = table.configs[configIndex.at(r.config)];
      for (const std::string &name : c.kernels) {
        const TableKernel &k = table.kernels[kernelIndex.at(name)];
        const TableProblem &p = table.problems[problemIndex.at(k.problem)];
        line = s.where.line;
        const std::string via = " (row m=" + std::to_string(r.m) + " at line " +
                                std::to_string(r.where.line) + ": config '" +
                                c.name + "', kernel '" + k.name + "')";
        if (p.family != s.family)
          return fail("family", "family=" + s.family + " but problem '" +
                                    p.name + "' is family=" + p.family + via);
        if (p.ep != s.ep)
          return fail("ep", "ep=" + std::to_string(s.ep) + " but problem '" +
                                p.name + "' is ep=" + std::to_string(p.ep) + via);
      }
    }
  }
  for (const TableKernel &k : table.kernels)
    if (!usedKernels.count(k.name)) {
      line = k.where.line;
      return fail("", "kernel '" + k.name + "' is used by no config");
    }
  if (table.selections.empty()) {
    line = 1;
    return fail("", "the table has no 'select' section");
  }
  return true;
}

template <typename T>
const T *findByName(const std::vector<T> &items, const std::string &name) {
  for (const T &item : items)
    if (item.name == name)
      return &item;
  return nullptr;
}

} // namespace

const TableProblem *TuningTable::findProblem(const std::string &name) const {
  return findByName(problems, name);
}
const TableKernel *TuningTable::findKernel(const std::string &name) const {
  return findByName(kernels, name);
}
const TableConfig *TuningTable::findConfig(const std::string &name) const {
  return findByName(configs, name);
}

bool parseTuningTable(const std::string &path, const std::string &text,
                      TuningTable &table, std::string &error) {
  table = TuningTable();
  table.path = path;
  table.text = text;
  TableParser parser(path, table);
  if (parser.parse(text))
    return true;
  error = parser.error;
  return false;
}

bool readTuningTable(const std::string &path, TuningTable &table,
                     std::string &error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    error = path + ": cannot open the tuning table";
    return false;
  }
  std::ostringstream text;
  text << file.rdbuf();
  return parseTuningTable(path, text.str(), table, error);
}

} // namespace moec
