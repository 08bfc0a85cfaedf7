//===- grid_rule.cpp - launch-grid rule evaluator ---------------*- C++ -*-===//
//
// A recursive-descent parser over exact rationals (int64 numerator and
// positive denominator, reduced; overflow is an error).
//
//===----------------------------------------------------------------------===//
#include "moec/grid_rule.h"

#include <cctype>
#include <cstdlib>
#include <numeric>

namespace moec::rt {
namespace {

struct Rational {
  int64_t numerator = 0;
  int64_t denominator = 1;
};

class RuleParser {
public:
  RuleParser(std::string_view text, const RuleVariable *variables, size_t count)
      : text_(text), variables_(variables), variableCount_(count) {}

  bool parse(Rational &out, std::string &why) {
    if (!parseExpression(out))
      return fail(why);
    skipSpace();
    if (position_ != text_.size()) {
      problem_ = "syntax error at column " + std::to_string(position_ + 1);
      return fail(why);
    }
    return true;
  }

private:
  bool fail(std::string &why) {
    why = problem_.empty() ? "syntax error" : problem_;
    return false;
  }

  void skipSpace() {
    while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[position_])))
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

  bool normalize(__int128 numerator, __int128 denominator, Rational &out) {
    if (denominator == 0) {
      problem_ = "division by zero";
      return false;
    }
    if (denominator < 0) {
      numerator = -numerator;
      denominator = -denominator;
    }
    __int128 a = numerator < 0 ? -numerator : numerator, b = denominator;
    while (b != 0) {
      __int128 t = a % b;
      a = b;
      b = t;
    }
    if (a > 1) {
      numerator /= a;
      denominator /= a;
    }
    if (numerator > INT64_MAX || numerator < -INT64_MAX || denominator > INT64_MAX) {
      problem_ = "value out of range";
      return false;
    }
    out.numerator = static_cast<int64_t>(numerator);
    out.denominator = static_cast<int64_t>(denominator);
    return true;
  }

  bool add(const Rational &a, const Rational &b, int sign, Rational &out) {
    return normalize(__int128(a.numerator) * b.denominator +
                         sign * __int128(b.numerator) * a.denominator,
                     __int128(a.denominator) * b.denominator, out);
  }

  bool parseExpression(Rational &out) {
    if (!parseTerm(out))
      return false;
    while (true) {
      int sign = accept('+') ? 1 : accept('-') ? -1 : 0;
      if (!sign)
        return true;
      Rational rhs;
      if (!parseTerm(rhs) || !add(out, rhs, sign, out))
        return false;
    }
  }

  bool parseTerm(Rational &out) {
    if (!parseFactor(out))
      return false;
    while (true) {
      bool multiply = accept('*');
      bool divide = !multiply && accept('/');
      if (!multiply && !divide)
        return true;
      Rational rhs;
      if (!parseFactor(rhs))
        return false;
      bool ok = multiply ? normalize(__int128(out.numerator) * rhs.numerator,
                                     __int128(out.denominator) * rhs.denominator, out)
                         : normalize(__int128(out.numerator) * rhs.denominator,
                                     __int128(out.denominator) * rhs.numerator, out);
      if (!ok)
        return false;
    }
  }

  bool parseName(std::string_view &name) {
    skipSpace();
    size_t start = position_;
    while (position_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[position_])) || text_[position_] == '_'))
      ++position_;
    name = text_.substr(start, position_ - start);
    return !name.empty();
  }

  bool parseFactor(Rational &out) {
    skipSpace();
    if (position_ >= text_.size()) {
      problem_ = "unexpected end of rule";
      return false;
    }
    const char c = text_[position_];
    if (accept('(')) {
      return parseExpression(out) && expect(')');
    }
    if (accept('-')) {
      if (!parseFactor(out))
        return false;
      out.numerator = -out.numerator;
      return true;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t value = 0;
      while (position_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[position_]))) {
        if (value > (INT64_MAX - 9) / 10) {
          problem_ = "integer out of range";
          return false;
        }
        value = value * 10 + (text_[position_++] - '0');
      }
      out = {value, 1};
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::string_view name;
      parseName(name);
      if (name == "ceil" || name == "floor") {
        Rational inner;
        if (!expect('(') || !parseExpression(inner) || !expect(')'))
          return false;
        int64_t quotient = inner.numerator / inner.denominator; // toward zero
        int64_t remainder = inner.numerator % inner.denominator;
        if (remainder != 0) {
          if (name == "ceil" && inner.numerator > 0)
            ++quotient;
          if (name == "floor" && inner.numerator < 0)
            --quotient;
        }
        out = {quotient, 1};
        return true;
      }
      if (name == "min" || name == "max") {
        Rational a, b, difference;
        if (!expect('(') || !parseExpression(a) || !expect(',') || !parseExpression(b) ||
            !expect(')') || !add(a, b, -1, difference))
          return false;
        const bool aSmaller = difference.numerator < 0;
        out = (name == "min") == aSmaller ? a : b;
        return true;
      }
      for (size_t i = 0; i < variableCount_; ++i)
        if (variables_[i].name == name) {
          out = {variables_[i].value, 1};
          return true;
        }
      problem_ = "unknown name '" + std::string(name) + "'";
      return false;
    }
    problem_ = "syntax error at column " + std::to_string(position_ + 1);
    return false;
  }

  std::string_view text_;
  const RuleVariable *variables_;
  size_t variableCount_;
  size_t position_ = 0;
  std::string problem_;
};

std::string formatRational(const Rational &value) {
  // The denominator of a non-whole result may not be a power of two; print a
  // fraction, which is exact.
  return std::to_string(value.numerator) + "/" + std::to_string(value.denominator);
}

} // namespace

bool evaluateGridRule(std::string_view rule, const RuleVariable *variables,
                      size_t variableCount, int64_t &out, std::string &error) {
  Rational value;
  std::string why;
  RuleParser parser(rule, variables, variableCount);
  if (!parser.parse(value, why)) {
    error = "grid rule '" + std::string(rule) + "': " + why;
    return false;
  }
  if (value.denominator != 1) {
    error = "grid rule '" + std::string(rule) + "' is " + formatRational(value) +
            ", not a whole number";
    return false;
  }
  out = value.numerator;
  return true;
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
    int64_t value = 0;
    if (!evaluateGridRule(*rules[d], variables, variableCount, value, error)) {
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
