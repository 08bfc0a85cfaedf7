//===- grid_program.h - a launch-grid rule compiled once --------*- C++ -*-===//
//
// parseManifest compiles each kernel's grid rule text (grammar in
// grid_rule.h) into a GridProgram: postfix instructions over exact
// rationals. Evaluating a program for given variable values is a loop over a
// fixed-size stack, with no heap allocation, so an engine can compute a
// launch geometry for every M on its hot path. Syntax errors, nesting beyond
// kMaxGridRuleDepth and arithmetic errors between constants (`I / 0`) are
// found once, when the manifest is parsed.
//
// This header has no dependency on manifest.h: LaunchInfo holds programs.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_GRID_PROGRAM_H
#define MOEC_GRID_PROGRAM_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt {

/// A named value a grid rule may use.
struct RuleVariable {
  std::string_view name;
  int64_t value = 0;
};

/// The deepest nesting of parentheses, unary minus and ceil/floor/min/max
/// calls a grid rule may have (each opens one level). Bounds the compiler's
/// recursion and the evaluation stack; the codegen's rules use 1.
inline constexpr size_t kMaxGridRuleDepth = 32;

/// Evaluation stack slots a program may need: per nesting level at most a
/// pending sum, a pending product and a pending min/max operand.
inline constexpr size_t kGridEvaluationStackSize = 3 * (kMaxGridRuleDepth + 1);

/// One postfix instruction.
enum class GridOp : uint8_t {
  Constant, ///< push numerator / denominator
  Variable, ///< push the variable named by nameOffset, nameLength
  Add,
  Subtract,
  Multiply,
  Divide,
  Negate,
  Ceil,
  Floor,
  Min,
  Max,
};

struct GridInstruction {
  GridOp op = GridOp::Constant;
  /// Variable: the name, as a range of the program's rule text (offsets
  /// rather than a string_view so a copied program stays valid).
  uint32_t nameOffset = 0;
  uint32_t nameLength = 0;
  /// Constant: a reduced rational, denominator > 0.
  int64_t numerator = 0;
  int64_t denominator = 1;
};

/// A grid rule compiled to postfix code. Copyable; keeps its own copy of
/// the rule text for error messages and variable names.
class GridProgram {
public:
  /// Compiles `text`. On failure returns false with the bare problem in
  /// `problem` ("syntax error at column 5", "nesting deeper than 32 levels
  /// at column 40", "division by zero at column 3") and leaves the program
  /// empty.
  bool compile(std::string_view text, std::string &problem);

  /// Evaluates the program. Allocation-free on success; on failure `error`
  /// names the rule and the problem as evaluateGridRule does ("grid rule
  /// 'E / 2': unknown name 'E'", "grid rule 'H / 300' is 256/15, not a
  /// whole number").
  bool evaluate(const RuleVariable *variables, size_t variableCount,
                int64_t &out, std::string &error) const;

  /// True after a successful compile.
  bool compiled() const { return !code_.empty(); }
  /// The rule text the program was compiled from.
  const std::string &text() const { return text_; }
  const std::vector<GridInstruction> &code() const { return code_; }

private:
  std::string text_;
  std::vector<GridInstruction> code_;
};

} // namespace moec::rt

#endif // MOEC_GRID_PROGRAM_H
