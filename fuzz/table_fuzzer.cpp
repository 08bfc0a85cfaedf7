//===- table_fuzzer.cpp - libFuzzer target: the tuning-table parser -------===//
//
// Input: the text of a tuning table, parsed by parseTuningTable (the reader
// `moec compile` and `moec check` use before any MLIR is built). A refused
// table must give one line "fuzz.table:LINE: ..." with LINE inside the
// text; an accepted one must satisfy what the compiler relies on after
// parsing: every reference resolves, every number is within the reader's
// documented limits (docs/table-format.md, "Limits"), every selection serves
// the family and EP size of its kernels' problems and its rows have
// distinct M.
//
// Links only the parser, the old-spelling check and the dialect's generated
// knob table (plain C++ data), not MLIR.
//
//===----------------------------------------------------------------------===//
#include "moec/Compiler/TuningTable.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

namespace {

void require(bool condition, const char *what, const std::string &detail = "") {
  if (condition)
    return;
  std::fprintf(stderr, "table fuzzer: %s %s\n", what, detail.c_str());
  std::abort();
}

bool inRange(int64_t value, int64_t low, int64_t high) {
  return value >= low && value <= high;
}

/// A refusal: one line naming the file and a line of the text.
void checkRefusal(const std::string &text, const std::string &error) {
  const std::string prefix = "fuzz.table:";
  require(error.compare(0, prefix.size(), prefix) == 0,
          "refusal does not name the file:", error);
  require(error.find('\n') == std::string::npos, "refusal is not one line:",
          error);
  size_t end = prefix.size();
  while (end < error.size() && error[end] >= '0' && error[end] <= '9')
    ++end;
  require(end > prefix.size() && end < error.size() && error[end] == ':',
          "refusal does not name a line:", error);
  const long line = std::strtol(error.c_str() + prefix.size(), nullptr, 10);
  const long lines =
      long(std::count(text.begin(), text.end(), '\n')) + 1;
  require(line >= 1 && line <= lines, "refusal names a line outside the text:",
          error);
}

/// An accepted table: what the compiler relies on after parsing.
void checkAccepted(const moec::TuningTable &table) {
  require(!table.selections.empty(), "accepted a table without selections");
  for (const moec::TableProblem &p : table.problems) {
    require(p.family == "megamoe" || p.family == "tp" || p.family == "fhmoe",
            "accepted family", p.family);
    require(inRange(p.hidden, 1, 65536) && inRange(p.intermediate, 1, 65536) &&
                inRange(p.experts, 1, 65536) && inRange(p.topK, 1, 256) &&
                inRange(p.ep, 1, 1024),
            "accepted a problem size out of range:", p.name);
    require(p.experts % p.ep == 0, "accepted experts not divisible by ep:",
            p.name);
  }
  for (const moec::TableKernel &k : table.kernels) {
    require(table.findProblem(k.problem), "kernel of an unknown problem:",
            k.name);
    const char *stage = moec::abi::stageName(k.stage);
    const moec::moe::StageKnobs *knobs = moec::moe::lookupStageKnobs(stage);
    require(knobs, "kernel of an unknown stage:", stage);
    for (const auto &[name, value] : k.knobs)
      require(knobs->find(name) && !value.empty(), "accepted knob", name);
  }
  std::set<std::string> usedKernels;
  for (const moec::TableConfig &c : table.configs) {
    require(!c.kernels.empty(), "config without kernels:", c.name);
    for (const std::string &k : c.kernels) {
      require(table.findKernel(k), "config names an unknown kernel:", k);
      usedKernels.insert(k);
    }
  }
  for (const moec::TableKernel &k : table.kernels)
    require(usedKernels.count(k.name), "accepted an unused kernel:", k.name);
  for (const moec::TableSelection &s : table.selections) {
    require(!s.rows.empty(), "accepted a selection without rows");
    require(inRange(s.ep, 1, 1024) && inRange(s.workspace, 1, UINT32_MAX),
            "accepted a selection number out of range");
    std::set<int64_t> ms;
    for (const moec::TableRow &r : s.rows) {
      require(inRange(r.m, 1, UINT32_MAX), "accepted row m out of range");
      require(ms.insert(r.m).second, "accepted a repeated row m");
      const moec::TableConfig *c = table.findConfig(r.config);
      require(c, "row names an unknown config:", r.config);
      for (const std::string &name : c->kernels) {
        const moec::TableProblem *p =
            table.findProblem(table.findKernel(name)->problem);
        require(p->family == s.family && p->ep == s.ep,
                "a selection serves another problem:", p->name);
      }
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  moec::TuningTable table;
  std::string error;
  if (moec::parseTuningTable("fuzz.table", text, table, error))
    checkAccepted(table);
  else
    checkRefusal(text, error);
  return 0;
}
