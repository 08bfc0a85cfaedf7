//===- grid_fuzzer.cpp - libFuzzer target: grid-rule compiler/evaluator ---===//
//
// Input: rule text, then (after the first NUL, if any) 8-byte values for the
// variables the rules may name. The rule is compiled (depth-bounded, no
// recursion) and evaluated with checked arithmetic; the program must never
// crash, overflow (UBSan) or allocate on evaluation.
//
//===----------------------------------------------------------------------===//
#include "moec/grid_program.h"

#include <cstring>
#include <iterator>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = reinterpret_cast<const char *>(data);
  const void *nul = std::memchr(text, '\0', size);
  const size_t ruleSize = nul ? static_cast<const char *>(nul) - text : size;
  moec::rt::RuleVariable variables[] = {
      {"num_tokens", 7}, {"num_sorted", 64}, {"num_routes", 42}, {"m", 5},
      {"n", 128},        {"H", 5120},        {"I", 2304},         {"E", 96},
      {"N", INT64_MIN},  {"P", INT64_MAX}};
  if (nul) {
    const uint8_t *values = data + ruleSize + 1;
    size_t left = size - ruleSize - 1;
    for (auto &variable : variables) {
      if (left < 8)
        break;
      int64_t value;
      std::memcpy(&value, values, 8);
      variable.value = value;
      values += 8;
      left -= 8;
    }
  }
  moec::rt::GridProgram program;
  std::string problem;
  if (!program.compile(std::string_view(text, ruleSize), problem)) {
    if (problem.empty() || program.compiled())
      __builtin_trap();
    return 0;
  }
  int64_t value = 0;
  std::string error;
  if (!program.evaluate(variables, std::size(variables), value, error) &&
      error.empty())
    __builtin_trap();
  return 0;
}
