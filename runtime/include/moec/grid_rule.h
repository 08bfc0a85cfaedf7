//===- grid_rule.h - evaluate a kernel's launch-grid rule -------*- C++ -*-===//
//
// The manifest gives each kernel's grid as rule text per dimension, e.g.
// "H / 256", "num_sorted / 64", "ceil(num_tokens / 4)", "1". The engine knows
// the values of the names; parseManifest compiles the text once into a
// GridProgram (grid_program.h) and computeLaunchGrid evaluates the programs
// without allocating. evaluateGridRule compiles and evaluates text in one
// step (the CLI, tests).
//
// Grammar (whitespace ignored):
//   expr   := term (('+' | '-') term)*
//   term   := factor (('*' | '/') factor)*
//   factor := integer | name | '(' expr ')' | '-' factor
//           | ('ceil' | 'floor') '(' expr ')'
//           | ('min' | 'max') '(' expr ',' expr ')'
//   name   := [A-Za-z_][A-Za-z0-9_]*
// Arithmetic is exact (rational numbers; '/' does not round). ceil and floor
// round explicitly. The result must be a whole number, so "H / 256" with
// H = 5000 is an error instead of a silently truncated grid. Parentheses,
// unary minus and calls nest at most kMaxGridRuleDepth (32) levels deep.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_GRID_RULE_H
#define MOEC_GRID_RULE_H

#include "moec/grid_program.h"
#include "moec/manifest.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace moec::rt {

/// Compiles and evaluates `rule` (allocates; for one-off use such as the
/// CLI). Errors name the rule and the problem: "grid rule 'H / 256':
/// unknown name 'H'", "grid rule 'H / 300' is 256/15, not a whole number",
/// "... division by zero", "... syntax error at column 5".
bool evaluateGridRule(std::string_view rule, const RuleVariable *variables,
                      size_t variableCount, int64_t &out, std::string &error);

/// Evaluates a kernel's x, y and z rules. Each must give a value in
/// [1, 2^32 - 1]; a missing rule is an error naming the kernel and dimension.
/// Uses the programs parseManifest compiled (kernel.launch.gridPrograms),
/// without heap allocation unless it fails; a rule whose text differs from
/// its program's (a LaunchInfo filled by hand) is compiled on the fly.
bool computeLaunchGrid(const KernelInfo &kernel, const RuleVariable *variables,
                       size_t variableCount, std::array<uint32_t, 3> &grid,
                       std::string &error);

} // namespace moec::rt

#endif // MOEC_GRID_RULE_H
