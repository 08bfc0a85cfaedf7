//===- grid_rule.cpp - launch-grid rule compiler and evaluator --*- C++ -*-===//
//
// A recursive-descent parser (bounded depth) emits postfix code; constant
// subexpressions are folded while emitting, so arithmetic errors between
// literals are compile errors. The evaluator runs the code over exact
// rationals (int64 numerator and positive denominator, reduced; overflow is
// an error) on a fixed-size stack.
//
//===----------------------------------------------------------------------===//
#include "moec/grid_rule.h"

#include <cctype>
#include <cstdlib>

namespace moec::rt {
namespace {

/// A reduced rational with a positive denominator. No member initialisers:
/// the evaluation stack is an uninitialised array.
struct Rational {
  int64_t numerator;
  int64_t denominator;
};

enum class ArithmeticProblem { None, DivisionByZero, OutOfRange };

const char *problemText(ArithmeticProblem problem) {
  return problem == ArithmeticProblem::DivisionByZero ? "division by zero"
                                                      : "value out of range";
}

unsigned __int128 greatestCommonDivisor(unsigned __int128 a, unsigned __int128 b) {
  while (b != 0) {
    if ((a >> 64) == 0 && (b >> 64) == 0) {
      // 64-bit division is much cheaper than 128-bit; most operands fit.
      uint64_t x = static_cast<uint64_t>(a), y = static_cast<uint64_t>(b);
      while (y != 0) {
        const uint64_t t = x % y;
        x = y;
        y = t;
      }
      return x;
    }
    const unsigned __int128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

ArithmeticProblem normalize(__int128 numerator, __int128 denominator, Rational &out) {
  if (denominator == 0)
    return ArithmeticProblem::DivisionByZero;
  if (denominator < 0) {
    numerator = -numerator;
    denominator = -denominator;
  }
  if (numerator >= -INT64_MAX && numerator <= INT64_MAX && denominator <= INT64_MAX) {
    // The common case: 64-bit operands, where division is far cheaper.
    int64_t n = static_cast<int64_t>(numerator), d = static_cast<int64_t>(denominator);
    if (d != 1) {
      const int64_t divisor = static_cast<int64_t>(
          greatestCommonDivisor(static_cast<uint64_t>(n < 0 ? -n : n), static_cast<uint64_t>(d)));
      if (divisor > 1) {
        n /= divisor;
        d /= divisor;
      }
    }
    out.numerator = n;
    out.denominator = d;
    return ArithmeticProblem::None;
  }
  if (denominator != 1) {
    const unsigned __int128 magnitude =
        numerator < 0 ? -static_cast<unsigned __int128>(numerator)
                      : static_cast<unsigned __int128>(numerator);
    const __int128 divisor = static_cast<__int128>(
        greatestCommonDivisor(magnitude, static_cast<unsigned __int128>(denominator)));
    if (divisor > 1) {
      numerator /= divisor;
      denominator /= divisor;
    }
  }
  if (numerator > INT64_MAX || numerator < -INT64_MAX || denominator > INT64_MAX)
    return ArithmeticProblem::OutOfRange;
  out.numerator = static_cast<int64_t>(numerator);
  out.denominator = static_cast<int64_t>(denominator);
  return ArithmeticProblem::None;
}

/// a <op> b for the binary operations. `out` may alias `a` or `b`.
ArithmeticProblem applyBinary(GridOp op, const Rational &a, const Rational &b,
                              Rational &out) {
  const __int128 an = a.numerator, ad = a.denominator;
  const __int128 bn = b.numerator, bd = b.denominator;
  switch (op) {
  case GridOp::Add:
    return normalize(an * bd + bn * ad, ad * bd, out);
  case GridOp::Subtract:
    return normalize(an * bd - bn * ad, ad * bd, out);
  case GridOp::Multiply:
    return normalize(an * bn, ad * bd, out);
  case GridOp::Divide:
    return normalize(an * bd, ad * bn, out);
  case GridOp::Min:
  case GridOp::Max: {
    // Denominators are positive: compare cross products (they fit in 127 bits).
    const bool aSmaller = an * bd < bn * ad;
    out = (op == GridOp::Min) == aSmaller ? a : b;
    return ArithmeticProblem::None;
  }
  default:
    return ArithmeticProblem::OutOfRange; // not a binary operation
  }
}

/// <op> a for the unary operations. `out` may alias `a`.
ArithmeticProblem applyUnary(GridOp op, const Rational &a, Rational &out) {
  if (op == GridOp::Negate) {
    if (a.numerator == INT64_MIN) // a variable may hold it; its negation does not fit
      return ArithmeticProblem::OutOfRange;
    out = {-a.numerator, a.denominator};
    return ArithmeticProblem::None;
  }
  int64_t quotient = a.numerator / a.denominator; // toward zero
  if (a.numerator % a.denominator != 0) {
    if (op == GridOp::Ceil && a.numerator > 0)
      ++quotient;
    if (op == GridOp::Floor && a.numerator < 0)
      --quotient;
  }
  out = {quotient, 1};
  return ArithmeticProblem::None;
}

bool isUnary(GridOp op) {
  return op == GridOp::Negate || op == GridOp::Ceil || op == GridOp::Floor;
}

/// Parses rule text into postfix code, folding constant subexpressions.
class RuleCompiler {
public:
  RuleCompiler(std::string_view text, std::vector<GridInstruction> &code)
      : text_(text), code_(code) {}

  bool compile(std::string &problem) {
    bool blank = true;
    for (char c : text_)
      blank &= std::isspace(static_cast<unsigned char>(c)) != 0;
    if (blank) {
      problem = "empty rule";
      return false;
    }
    if (text_.size() > UINT32_MAX) {
      problem = "rule text too long";
      return false;
    }
    if (!parseExpression())
      return fail(problem);
    skipSpace();
    if (position_ != text_.size()) {
      problem_ = "syntax error at column " + std::to_string(position_ + 1);
      return fail(problem);
    }
    return true;
  }

private:
  bool fail(std::string &problem) {
    problem = problem_.empty() ? "syntax error" : problem_;
    return false;
  }

  void skipSpace() {
    while (position_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[position_])))
      ++position_;
  }

  bool accept(char c) {
    skipSpace();
    if (position_ < text_.size() && text_[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }

  bool expect(char c) {
    if (accept(c))
      return true;
    problem_ = std::string("expected '") + c + "' at column " + std::to_string(position_ + 1);
    return false;
  }

  /// Opens one nesting level (parenthesis, unary minus, call) at `column`;
  /// the bound keeps recursion and the evaluation stack small.
  bool enter(size_t column) {
    if (++depth_ <= kMaxGridRuleDepth)
      return true;
    problem_ = "nesting deeper than " + std::to_string(kMaxGridRuleDepth) +
               " levels at column " + std::to_string(column);
    return false;
  }
  void leave() { --depth_; }

  bool isConstant(size_t fromEnd) const {
    return code_.size() > fromEnd &&
           code_[code_.size() - 1 - fromEnd].op == GridOp::Constant;
  }

  void emitConstant(const Rational &value) {
    GridInstruction instruction;
    instruction.op = GridOp::Constant;
    instruction.numerator = value.numerator;
    instruction.denominator = value.denominator;
    code_.push_back(instruction);
  }

  /// Emits `op`, or folds it when its operands are constants. In postfix a
  /// trailing Constant is a whole operand, so the last one (unary) or two
  /// (binary) instructions being constants means every operand is one.
  /// `column` locates the operator in a folding error.
  bool emitOperation(GridOp op, size_t column) {
    if (op == GridOp::Divide && isConstant(0) && code_.back().numerator == 0) {
      // `I / 0` fails for every I: refuse it now.
      problem_ = "division by zero at column " + std::to_string(column);
      return false;
    }
    const bool unary = isUnary(op);
    if (isConstant(0) && (unary || isConstant(1))) {
      const GridInstruction &last = code_.back();
      const Rational b{last.numerator, last.denominator};
      Rational result{0, 1};
      ArithmeticProblem problem;
      if (unary) {
        problem = applyUnary(op, b, result);
        code_.pop_back();
      } else {
        const GridInstruction &first = code_[code_.size() - 2];
        const Rational a{first.numerator, first.denominator};
        problem = applyBinary(op, a, b, result);
        code_.resize(code_.size() - 2);
      }
      if (problem != ArithmeticProblem::None) {
        problem_ = std::string(problemText(problem)) + " at column " + std::to_string(column);
        return false;
      }
      emitConstant(result);
      return true;
    }
    GridInstruction instruction;
    instruction.op = op;
    code_.push_back(instruction);
    return true;
  }

  bool parseExpression() {
    if (!parseTerm())
      return false;
    while (true) {
      GridOp op;
      if (accept('+'))
        op = GridOp::Add;
      else if (accept('-'))
        op = GridOp::Subtract;
      else
        return true;
      const size_t column = position_;
      if (!parseTerm() || !emitOperation(op, column))
        return false;
    }
  }

  bool parseTerm() {
    if (!parseFactor())
      return false;
    while (true) {
      GridOp op;
      if (accept('*'))
        op = GridOp::Multiply;
      else if (accept('/'))
        op = GridOp::Divide;
      else
        return true;
      const size_t column = position_;
      if (!parseFactor() || !emitOperation(op, column))
        return false;
    }
  }

  bool parseFactor() {
    skipSpace();
    if (position_ >= text_.size()) {
      problem_ = "unexpected end of rule";
      return false;
    }
    const char c = text_[position_];
    const size_t column = position_ + 1;
    if (accept('(')) {
      if (!enter(column) || !parseExpression() || !expect(')'))
        return false;
      leave();
      return true;
    }
    if (accept('-')) {
      if (!enter(column) || !parseFactor() || !emitOperation(GridOp::Negate, column))
        return false;
      leave();
      return true;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t value = 0;
      while (position_ < text_.size() &&
             std::isdigit(static_cast<unsigned char>(text_[position_]))) {
        if (value > (INT64_MAX - 9) / 10) {
          problem_ = "integer out of range";
          return false;
        }
        value = value * 10 + (text_[position_++] - '0');
      }
      emitConstant({value, 1});
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = position_;
      while (position_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[position_])) ||
              text_[position_] == '_'))
        ++position_;
      const std::string_view name = text_.substr(start, position_ - start);
      if (name == "ceil" || name == "floor") {
        if (!enter(column) || !expect('(') || !parseExpression() || !expect(')') ||
            !emitOperation(name == "ceil" ? GridOp::Ceil : GridOp::Floor, column))
          return false;
        leave();
        return true;
      }
      if (name == "min" || name == "max") {
        if (!enter(column) || !expect('(') || !parseExpression() || !expect(',') ||
            !parseExpression() || !expect(')') ||
            !emitOperation(name == "min" ? GridOp::Min : GridOp::Max, column))
          return false;
        leave();
        return true;
      }
      GridInstruction instruction;
      instruction.op = GridOp::Variable;
      instruction.nameOffset = static_cast<uint32_t>(start);
      instruction.nameLength = static_cast<uint32_t>(name.size());
      code_.push_back(instruction);
      return true;
    }
    problem_ = "syntax error at column " + std::to_string(position_ + 1);
    return false;
  }

  std::string_view text_;
  std::vector<GridInstruction> &code_;
  size_t position_ = 0;
  size_t depth_ = 0;
  std::string problem_;
};

/// The most stack slots `code` uses (it is well formed: the compiler made it).
size_t stackNeeded(const std::vector<GridInstruction> &code) {
  size_t height = 0, most = 0;
  for (const GridInstruction &instruction : code) {
    if (instruction.op == GridOp::Constant || instruction.op == GridOp::Variable)
      ++height;
    else if (!isUnary(instruction.op))
      --height;
    if (height > most)
      most = height;
  }
  return most;
}

std::string formatRational(const Rational &value) {
  // The denominator of a non-whole result may not be a power of two; print a
  // fraction, which is exact.
  return std::to_string(value.numerator) + "/" + std::to_string(value.denominator);
}

} // namespace

bool GridProgram::compile(std::string_view text, std::string &problem) {
  text_.clear();
  code_.clear();
  std::vector<GridInstruction> code;
  RuleCompiler compiler(text, code);
  if (!compiler.compile(problem))
    return false;
  if (stackNeeded(code) > kGridEvaluationStackSize) { // the depth bound prevents it
    problem = "rule needs more than " + std::to_string(kGridEvaluationStackSize) +
              " evaluation stack slots";
    return false;
  }
  code.shrink_to_fit();
  text_.assign(text);
  code_ = std::move(code);
  return true;
}

bool GridProgram::evaluate(const RuleVariable *variables, size_t variableCount,
                           int64_t &out, std::string &error) const {
  if (code_.empty()) {
    error = "grid rule '" + text_ + "': not compiled";
    return false;
  }
  Rational stack[kGridEvaluationStackSize];
  size_t height = 0;
  for (const GridInstruction &instruction : code_) {
    ArithmeticProblem problem = ArithmeticProblem::None;
    switch (instruction.op) {
    case GridOp::Constant:
      stack[height++] = {instruction.numerator, instruction.denominator};
      continue;
    case GridOp::Variable: {
      const std::string_view name(text_.data() + instruction.nameOffset,
                                  instruction.nameLength);
      size_t i = 0;
      while (i < variableCount && variables[i].name != name)
        ++i;
      if (i == variableCount) {
        error = "grid rule '" + text_ + "': unknown name '" + std::string(name) + "'";
        return false;
      }
      stack[height++] = {variables[i].value, 1};
      continue;
    }
    case GridOp::Negate:
    case GridOp::Ceil:
    case GridOp::Floor:
      problem = applyUnary(instruction.op, stack[height - 1], stack[height - 1]);
      break;
    default:
      problem = applyBinary(instruction.op, stack[height - 2], stack[height - 1],
                            stack[height - 2]);
      --height;
      break;
    }
    if (problem != ArithmeticProblem::None) {
      error = "grid rule '" + text_ + "': " + problemText(problem);
      return false;
    }
  }
  const Rational &value = stack[0];
  if (value.denominator != 1) {
    error = "grid rule '" + text_ + "' is " + formatRational(value) +
            ", not a whole number";
    return false;
  }
  out = value.numerator;
  return true;
}

bool evaluateGridRule(std::string_view rule, const RuleVariable *variables,
                      size_t variableCount, int64_t &out, std::string &error) {
  GridProgram program;
  std::string why;
  if (!program.compile(rule, why)) {
    error = "grid rule '" + std::string(rule) + "': " + why;
    return false;
  }
  return program.evaluate(variables, variableCount, out, error);
}

bool computeLaunchGrid(const KernelInfo &kernel, const RuleVariable *variables,
                       size_t variableCount, std::array<uint32_t, 3> &grid,
                       std::string &error) {
  const std::string *rules[3] = {&kernel.launch.gridX, &kernel.launch.gridY,
                                 &kernel.launch.gridZ};
  const char *axes = "xyz";
  std::array<uint32_t, 3> result{};
  for (int d = 0; d < 3; ++d) {
    if (rules[d]->empty()) {
      error = kernel.name + ": no grid rule for " + axes[d];
      return false;
    }
    const GridProgram &program = kernel.launch.gridPrograms[d];
    int64_t value = 0;
    // parseManifest compiled the text; a LaunchInfo filled (or changed) by
    // hand has no matching program and takes the compile-now path.
    const bool ok = program.compiled() && program.text() == *rules[d]
                        ? program.evaluate(variables, variableCount, value, error)
                        : evaluateGridRule(*rules[d], variables, variableCount, value, error);
    if (!ok) {
      error = kernel.name + ": grid." + axes[d] + ": " + error;
      return false;
    }
    if (value < 1 || value > int64_t(UINT32_MAX)) {
      error = kernel.name + ": grid." + axes[d] + " = " + std::to_string(value) +
              " (rule '" + *rules[d] + "'), expected 1 .. 4294967295";
      return false;
    }
    result[d] = static_cast<uint32_t>(value);
  }
  grid = result;
  return true;
}

} // namespace moec::rt
