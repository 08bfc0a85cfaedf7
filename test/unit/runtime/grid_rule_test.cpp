#include "test_support.h"

#include "moec/grid_rule.h"
#include "moec/hip_loader.h"
#include "moec/manifest.h"

#include <catch2/catch.hpp>

#include <cctype>
#include <climits>
#include <vector>

using namespace moec::rt;

namespace {

/// The text evaluator the runtime had before rules were compiled (a
/// recursive-descent parser that evaluates while parsing), kept as the
/// reference the compiled programs must agree with. Two fixes over the
/// original: negating INT64_MIN is an error instead of overflowing, and
/// min/max compare exactly instead of failing when a - b does not fit.
namespace reference {

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
      if (out.numerator == INT64_MIN) { // fix: the old code overflowed here
        problem_ = "value out of range";
        return false;
      }
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
        Rational a, b;
        if (!expect('(') || !parseExpression(a) || !expect(',') || !parseExpression(b) ||
            !expect(')'))
          return false;
        // fix: the old code subtracted, failing when a - b did not fit
        const bool aSmaller =
            __int128(a.numerator) * b.denominator < __int128(b.numerator) * a.denominator;
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


bool evaluate(std::string_view rule, const RuleVariable *variables, size_t count,
              int64_t &out, std::string &error) {
  Rational value;
  std::string why;
  RuleParser parser(rule, variables, count);
  if (!parser.parse(value, why)) {
    error = "grid rule '" + std::string(rule) + "': " + why;
    return false;
  }
  if (value.denominator != 1) {
    error = "grid rule '" + std::string(rule) + "' is " + std::to_string(value.numerator) +
            "/" + std::to_string(value.denominator) + ", not a whole number";
    return false;
  }
  out = value.numerator;
  return true;
}

} // namespace reference

const RuleVariable kFlash[] = {{"H", 5120}, {"I", 2304}, {"num_sorted", 768},
                               {"num_tokens", 13}, {"top_k", 6}};

int64_t evaluate(const char *rule) {
  int64_t value = -1;
  std::string error;
  INFO(error);
  REQUIRE(evaluateGridRule(rule, kFlash, 5, value, error));
  return value;
}

std::string failure(const char *rule) {
  int64_t value = -1;
  std::string error;
  CHECK_FALSE(evaluateGridRule(rule, kFlash, 5, value, error));
  return error;
}

} // namespace

TEST_CASE("grid rules the codegen emits", "[grid]") {
  CHECK(evaluate("H / 256") == 20);
  CHECK(evaluate("I / 128") == 18);
  CHECK(evaluate("num_sorted / 64") == 12);
  CHECK(evaluate("1") == 1);
  CHECK(evaluate("ceil(num_tokens / 4)") == 4);
  CHECK(evaluate("304") == 304);
}

TEST_CASE("grid rule arithmetic is exact", "[grid]") {
  CHECK(evaluate("floor(num_tokens / 4)") == 3);
  CHECK(evaluate("ceil(num_tokens * top_k / 32)") == 3);    // 78 / 32
  CHECK(evaluate("(num_tokens * top_k + 31) / 32 * 32 / 32 * 0 + 7") == 7);
  CHECK(evaluate("num_tokens / 2 * 2") == 13);               // 6.5 * 2, no rounding
  CHECK(evaluate("min(H / 256, 16) + max(1, 2)") == 18);
  CHECK(evaluate("  2*(3+4) - -1 ") == 15);
  CHECK(evaluate("ceil(-7 / 2)") == -3);
  CHECK(evaluate("floor(-7 / 2)") == -4);
}

TEST_CASE("grid rule errors name the rule and the problem", "[grid]") {
  CHECK(failure("H / 300") == "grid rule 'H / 300' is 256/15, not a whole number");
  CHECK(failure("E / 2") == "grid rule 'E / 2': unknown name 'E'");
  CHECK(failure("H / (I - 2304)") == "grid rule 'H / (I - 2304)': division by zero");
  CHECK(failure("H / ") == "grid rule 'H / ': unexpected end of rule");
  CHECK(failure("H 256") == "grid rule 'H 256': syntax error at column 3");
  CHECK(failure("ceil(H") == "grid rule 'ceil(H': expected ')' at column 7");
  CHECK(failure("99999999999999999999") ==
        "grid rule '99999999999999999999': integer out of range");
}

TEST_CASE("computeLaunchGrid checks every dimension", "[grid]") {
  KernelInfo kernel;
  kernel.name = "moe2_w2";
  kernel.launch.gridX = "H / 256";
  kernel.launch.gridY = "num_sorted / 64";
  kernel.launch.gridZ = "1";
  std::array<uint32_t, 3> grid{};
  std::string error;
  REQUIRE(computeLaunchGrid(kernel, kFlash, 5, grid, error));
  CHECK(grid == std::array<uint32_t, 3>{20, 12, 1});
  kernel.launch.gridY = "num_sorted - 768";
  CHECK_FALSE(computeLaunchGrid(kernel, kFlash, 5, grid, error));
  CHECK(error == "moe2_w2: grid.y = 0 (rule 'num_sorted - 768'), expected 1 .. 4294967295");
  kernel.launch.gridZ = "";
  kernel.launch.gridY = "1";
  CHECK_FALSE(computeLaunchGrid(kernel, kFlash, 5, grid, error));
  CHECK(error == "moe2_w2: no grid rule for z");
}

namespace {

/// Deterministic pseudo-random numbers (the same rules on every run).
class Random {
public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return state_ >> 33;
  }
  uint64_t below(uint64_t bound) { return next() % bound; }

private:
  uint64_t state_;
};

/// A random rule of the grid-rule grammar, at most `depth` levels deep,
/// with random spacing; names include one no variable set defines.
std::string randomRule(Random &random, int depth) {
  static const char *names[] = {"H", "I", "num_sorted", "num_tokens", "top_k", "m", "E"};
  auto space = [&] { return random.below(3) == 0 ? std::string(" ") : std::string(); };
  const uint64_t pick = depth <= 0 ? random.below(2) : random.below(12);
  switch (pick) {
  case 0: {
    const uint64_t kind = random.below(10);
    if (kind < 7)
      return std::to_string(random.below(300));
    if (kind < 9)
      return std::to_string(uint64_t(1) << random.below(63));
    return "4611686018427387903";
  }
  case 1:
    return names[random.below(random.below(20) == 0 ? 7 : 6)];
  case 2:
    return "(" + space() + randomRule(random, depth - 1) + space() + ")";
  case 3:
    return "-" + space() + randomRule(random, depth - 1);
  case 4:
  case 5: {
    const char *function[] = {"ceil", "floor", "min", "max"};
    const uint64_t f = random.below(4);
    std::string text = std::string(function[f]) + space() + "(" + randomRule(random, depth - 1);
    if (f >= 2)
      text += space() + "," + space() + randomRule(random, depth - 1);
    return text + ")";
  }
  default: {
    const char ops[] = "+-*/";
    return randomRule(random, depth - 1) + space() + ops[random.below(4)] + space() +
           randomRule(random, depth - 1);
  }
  }
}

/// `rule` with one character deleted or inserted: mostly syntax errors.
std::string mutate(Random &random, std::string rule) {
  static const char inserts[] = "()+-*/,x9 _";
  const size_t at = random.below(rule.size() + 1);
  if (random.below(2) == 0 && at < rule.size())
    rule.erase(at, 1);
  else
    rule.insert(at, 1, inserts[random.below(sizeof(inserts) - 1)]);
  return rule;
}

/// Every launch.grid rule text in the bundles compiled from the shipped
/// tables (flash_ep2, flash_ep4, flash_tp4, dsv4_pro_tp8_fhmoe:
/// `moec compile tuning_tables/T.table -o x.moeb && moec extract x.moeb -o x`,
/// manifest.json).
const char *const kShippedRules[] = {
    "1", "2", "32", "64", "256", "512", "H / 128", "H / 256", "I / 64", "I / 128",
    "I / 256", "num_sorted / 16", "num_sorted / 32", "num_sorted / 64",
    "num_sorted / 128", "ceil(num_tokens / 4)"};

std::vector<std::vector<RuleVariable>> variableSets() {
  std::vector<std::vector<RuleVariable>> sets;
  // Shapes of the shipped networks, with num_sorted padded to the tile and
  // not (so "num_sorted / 64" both divides and does not).
  for (int64_t hidden : {4096, 5120, 7168})
    for (int64_t intermediate : {256, 1536, 2048, 2304})
      for (int64_t tokens : {1, 4, 13, 64, 100, 1000, 4096}) {
        const int64_t topK = 6, routes = tokens * topK;
        for (int64_t sorted : {routes, (routes + 127) / 128 * 128})
          sets.push_back({{"H", hidden}, {"I", intermediate}, {"num_sorted", sorted},
                          {"num_tokens", tokens}, {"top_k", topK}, {"m", tokens}});
      }
  // Edges: zero (division by a variable), negatives, the int64 extremes.
  for (int64_t value : {int64_t(0), int64_t(-1), int64_t(-7), INT64_MAX, INT64_MIN,
                        int64_t(1) << 40, -(int64_t(1) << 40)})
    sets.push_back({{"H", value}, {"I", 3}, {"num_sorted", value},
                    {"num_tokens", -(value / 2)}, {"top_k", 2}, {"m", value}});
  return sets;
}

bool isBlank(const std::string &text) {
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c)))
      return false;
  return true;
}

/// Compiles `rule` once and checks, for every variable set, that the
/// program gives what the reference text evaluator gives: the same value,
/// or the same error. A rule that does not compile must fail in the
/// reference too (with the same message when it is a syntax error the
/// reference reaches first). Returns whether the rule compiled.
bool checkAgainstReference(const std::string &rule,
                           const std::vector<std::vector<RuleVariable>> &sets) {
  INFO("rule: " << rule);
  GridProgram program;
  std::string problem;
  const bool compiled = program.compile(rule, problem);
  for (const auto &variables : sets) {
    int64_t expected = 0, actual = 0;
    std::string expectedError, actualError;
    const bool expectedOk =
        reference::evaluate(rule, variables.data(), variables.size(), expected, expectedError);
    if (!compiled) {
      CHECK_FALSE(expectedOk);
      const bool referenceSawSyntax =
          expectedError.find("unknown name") == std::string::npos &&
          expectedError.find("division by zero") == std::string::npos &&
          expectedError.find("out of range") == std::string::npos &&
          expectedError.find("whole number") == std::string::npos;
      if (referenceSawSyntax && !isBlank(rule))
        CHECK(expectedError == "grid rule '" + rule + "': " + problem);
      continue;
    }
    const bool actualOk = program.evaluate(variables.data(), variables.size(), actual, actualError);
    CHECK(actualOk == expectedOk);
    if (actualOk && expectedOk)
      CHECK(actual == expected);
    else
      CHECK(actualError == expectedError);
    // The one-step API agrees with the program.
    int64_t oneStep = 0;
    std::string oneStepError;
    CHECK(evaluateGridRule(rule, variables.data(), variables.size(), oneStep, oneStepError) ==
          actualOk);
    CHECK(oneStepError == actualError);
  }
  return compiled;
}

/// The manifest error for sampleManifest() with kernels[0].launch.grid.<axis>
/// set to `rule`; empty when the manifest is accepted.
std::string manifestError(const char *axis, const std::string &rule) {
  nlohmann::json json = moec::test::sampleManifest();
  json["kernels"][0]["launch"]["grid"][axis] = rule;
  Manifest manifest;
  std::string error;
  if (parseManifest(json.dump(), 2, manifest, error))
    return "";
  return error;
}

} // namespace

TEST_CASE("compiled rules agree with the text evaluator: shipped rules", "[grid]") {
  const auto sets = variableSets();
  for (const char *rule : kShippedRules)
    CHECK(checkAgainstReference(rule, sets));
}

TEST_CASE("compiled rules agree with the text evaluator: handwritten rules", "[grid]") {
  const auto sets = variableSets();
  const char *const rules[] = {
      "H / 300", "E / 2", "H / (I - 2304)", "H / ", "H 256", "ceil(H", "99999999999999999999",
      "floor(num_tokens / 4)", "ceil(num_tokens * top_k / 32)",
      "(num_tokens * top_k + 31) / 32 * 32 / 32 * 0 + 7", "num_tokens / 2 * 2",
      "min(H / 256, 16) + max(1, 2)", "  2*(3+4) - -1 ", "ceil(-7 / 2)", "floor(-7 / 2)",
      "-H", "- -H", "-(H)", "H * H", "H * H / H", "H - H", "H + H - H", "0 - H",
      "min(H, -H)", "max(H, -H)", "min(H, 1) * 0 + 1", "ceil(H / 3) - floor(H / 3)",
      "num_sorted / H", "1 / (1 / H)", "H / 0", "I / 0", "I / (2 - 2)", "1 / 0 * H",
      "E + 1 / 0", "ceil(", "(", ")", "()", "((H)", "(H))", "min(H)", "min(H,)",
      "max(,H)", "ceil H", "ceil", "min", "H +", "* H", "H ** 2", "2H", "H2", "_x",
      "", "   ", "-5", "- 5", "--5", "-(-(-5))", "9223372036854775799",
      "922337203685477580", "4611686018427387903 * 2", "4611686018427387903 * 2 + 1",
      "4611686018427387904 * 2", "ceil(4611686018427387903 / 2) * 2",
      "H / 4611686018427387903 / 4611686018427387903", "H ^ 2", "H\t/\n2"};
  for (const char *rule : rules)
    checkAgainstReference(rule, sets);
}

TEST_CASE("compiled rules agree with the text evaluator: random rules", "[grid]") {
  const auto sets = variableSets();
  Random random(20240611);
  size_t compiled = 0, total = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string rule = randomRule(random, 1 + static_cast<int>(random.below(6)));
    compiled += checkAgainstReference(rule, sets);
    checkAgainstReference(mutate(random, rule), sets);
    total += 2;
  }
  // Both kinds occur: the corpus is not all syntax errors or all valid.
  CHECK(compiled > total / 4);
  CHECK(compiled < total * 3 / 4);
}

TEST_CASE("constant subexpressions are folded at compile time", "[grid]") {
  GridProgram program;
  std::string problem;
  REQUIRE(program.compile("ceil((304 * 2 + 1) / 2) * H", problem));
  REQUIRE(program.code().size() == 3); // 305, H, *
  CHECK(program.code()[0].op == GridOp::Constant);
  CHECK(program.code()[0].numerator == 305);
  REQUIRE(program.compile("1", problem));
  CHECK(program.code().size() == 1);
  CHECK_FALSE(program.compile("I / 0", problem));
  CHECK(problem == "division by zero at column 3");
  CHECK_FALSE(program.compile("I / (3 - 3)", problem));
  CHECK(problem == "division by zero at column 3");
  CHECK_FALSE(program.compile("4611686018427387903 * 4", problem));
  CHECK(problem == "value out of range at column 21");
  CHECK_FALSE(program.compiled());
}

TEST_CASE("hostile rules are refused, never a crash", "[grid][hostile]") {
  const RuleVariable extremes[] = {
      {"H", INT64_MIN}, {"Z", 0}, {"P", INT64_MAX}, {"N", -INT64_MAX}};
  GridProgram program;
  std::string problem;
  auto refusal = [&](const std::string &rule) {
    CHECK_FALSE(program.compile(rule, problem));
    return problem;
  };
  CHECK(refusal(std::string(100000, '(') + "H" + std::string(100000, ')')) ==
        "nesting deeper than 32 levels at column 33");
  CHECK(refusal(std::string(100000, '(')) == "nesting deeper than 32 levels at column 33");
  CHECK(refusal(std::string(100000, '-') + "H") == "nesting deeper than 32 levels at column 33");
  std::string ceils;
  for (int i = 0; i < 100000; ++i)
    ceils += "ceil(";
  CHECK(refusal(ceils) == "nesting deeper than 32 levels at column 161");
  CHECK(refusal("ceil(") == "unexpected end of rule");
  CHECK(refusal("ceil(ceil(") == "unexpected end of rule");
  CHECK(refusal(std::string(200000, ')')) == "syntax error at column 1");
  CHECK(refusal(std::string("H\0", 2)) == "syntax error at column 2");
  CHECK(refusal("") == "empty rule");

  // Thirty-two levels are allowed, 33 are not, whatever opens them.
  auto nested = [](int levels, const std::string &open, const std::string &close) {
    std::string text;
    for (int i = 0; i < levels; ++i)
      text += open;
    text += "H";
    for (int i = 0; i < levels; ++i)
      text += close;
    return text;
  };
  for (const auto &[open, close] : {std::pair<std::string, std::string>{"(", ")"},
                                    {"-", ""},
                                    {"floor(", ")"},
                                    {"max(1, ", ")"}}) {
    INFO(open);
    CHECK(program.compile(nested(32, open, close), problem));
    CHECK_FALSE(program.compile(nested(33, open, close), problem));
  }

  // The deepest evaluation stack the bound allows: a pending sum, product
  // and min operand on each of the 32 levels.
  std::string deepest = "P";
  for (size_t i = 0; i < kMaxGridRuleDepth; ++i)
    deepest = "Z + Z * min(Z, " + deepest + ")";
  deepest = "Z + Z * " + deepest;
  REQUIRE(program.compile(deepest, problem));
  int64_t value = -1;
  std::string error;
  REQUIRE(program.evaluate(extremes, 4, value, error));
  CHECK(value == 0);

  // A long flat rule is fine: iteration, not recursion.
  std::string flat = "Z";
  for (int i = 0; i < 100000; ++i)
    flat += " + Z";
  REQUIRE(program.compile(flat, problem));
  CHECK(program.evaluate(extremes, 4, value, error));

  // Arithmetic on hostile values is checked.
  REQUIRE(program.compile("-H", problem));
  CHECK_FALSE(program.evaluate(extremes, 4, value, error));
  CHECK(error == "grid rule '-H': value out of range");
  REQUIRE(program.compile("H", problem));
  CHECK(program.evaluate(extremes, 4, value, error));
  CHECK(value == INT64_MIN);
  for (const char *rule : {"H * 1", "H - 1", "P + 1", "P * P", "-(H + 1) + 2", "H / -1"}) {
    REQUIRE(program.compile(rule, problem));
    CHECK_FALSE(program.evaluate(extremes, 4, value, error));
    CHECK(error == "grid rule '" + std::string(rule) + "': value out of range");
  }
  REQUIRE(program.compile("P / Z", problem));
  CHECK_FALSE(program.evaluate(extremes, 4, value, error));
  CHECK(error == "grid rule 'P / Z': division by zero");
  // INT64_MIN itself is usable only as is: reduced rationals keep to
  // [-INT64_MAX, INT64_MAX].
  REQUIRE(program.compile("H / 3", problem));
  CHECK_FALSE(program.evaluate(extremes, 4, value, error));
  CHECK(error == "grid rule 'H / 3': value out of range");
  REQUIRE(program.compile("ceil(N / 3) - floor(N / 3) + min(N, P) + max(N, P)", problem));
  REQUIRE(program.evaluate(extremes, 4, value, error));
  CHECK(value == 1);
}

TEST_CASE("a grid rule that does not compile makes the manifest invalid", "[grid][bundle]") {
  CHECK(manifestError("x", "ceil(m / 32)") == "");
  CHECK(manifestError("y", "n 128") == "kernels[0].launch.grid.y: syntax error at column 3");
  CHECK(manifestError("x", "ceil(") == "kernels[0].launch.grid.x: unexpected end of rule");
  CHECK(manifestError("z", "") == "kernels[0].launch.grid.z: empty rule");
  CHECK(manifestError("z", "I / 0") == "kernels[0].launch.grid.z: division by zero at column 3");
  CHECK(manifestError("x", "(m") == "kernels[0].launch.grid.x: expected ')' at column 3");
  CHECK(manifestError("x", "m)") == "kernels[0].launch.grid.x: syntax error at column 2");
  CHECK(manifestError("x", "m $ 2") == "kernels[0].launch.grid.x: syntax error at column 3");
  CHECK(manifestError("x", std::string(8000, '(') + "m" + std::string(8000, ')')) ==
        "kernels[0].launch.grid.x: nesting deeper than 32 levels at column 33");
  CHECK(manifestError("x", std::string(16000, '-') + "m") ==
        "kernels[0].launch.grid.x: nesting deeper than 32 levels at column 33");
  // Longer text never reaches the rule compiler: the manifest's strings are
  // bounded before a JSON tree is built.
  CHECK(manifestError("x", std::string(100000, '(') + "m" + std::string(100000, ')')) ==
        "kernels[0].launch.grid.x: string of 200001 bytes (max 16384)");
  // Syntactically fine: unknown names and values are the engine's to give.
  CHECK(manifestError("x", "-5") == "");
  CHECK(manifestError("x", "E / m + 0") == "");
}

/// The open-time error of the layer manifest whose quant kernel (H 256,
/// top-2, one table of rows m 16 and 40) has grid.x `rule`.
std::string layerManifestError(const std::string &rule) {
  nlohmann::json json = moec::test::quantLayerManifest(0, false);
  json["kernels"][0]["launch"]["grid"]["x"] = rule;
  json["selection"][0]["rows"] = {{{"m", 16}, {"config", 0}}, {{"m", 40}, {"config", 0}}};
  Manifest manifest;
  std::string error;
  return parseManifest(json.dump(), 2, manifest, error) ? "" : error;
}

TEST_CASE("a layer kernel's grid rule must give a count at every row it serves",
          "[grid][bundle]") {
  CHECK(layerManifestError("num_tokens") == "");
  CHECK(layerManifestError("ceil(num_tokens * H / 8192)") == "");
  CHECK(layerManifestError("num_sorted / 2") == "");
  const std::string table = "selection[0] (flash ep1 ws16), ";
  CHECK(layerManifestError("-5") ==
        table + "row 0 (M 1 to 16), at M 1: kernel moe_quant_aaaa0004: grid.x = -5 "
                "(rule '-5'), expected 1 .. 4294967295");
  // Non-positive only at the row's first M, or only at its last.
  CHECK(layerManifestError("num_tokens - 20") ==
        table + "row 0 (M 1 to 16), at M 1: kernel moe_quant_aaaa0004: grid.x = -19 "
                "(rule 'num_tokens - 20'), expected 1 .. 4294967295");
  CHECK(layerManifestError("20 - num_tokens") ==
        table + "row 1 (M 17 to 40), at M 40: kernel moe_quant_aaaa0004: grid.x = -20 "
                "(rule '20 - num_tokens'), expected 1 .. 4294967295");
  CHECK(layerManifestError("16 - num_tokens") ==
        table + "row 0 (M 1 to 16), at M 16: kernel moe_quant_aaaa0004: grid.x = 0 "
                "(rule '16 - num_tokens'), expected 1 .. 4294967295");
  // A rule that does not evaluate (not a whole number, a name the layer
  // does not give) is left to the launch, which names it.
  CHECK(layerManifestError("num_tokens / 2") == "");
  CHECK(layerManifestError("E / 2") == "");
  // A kernel no layer runs (no #moe.problem) takes the engine's names.
  nlohmann::json plain = moec::test::sampleManifest();
  plain["kernels"][0]["launch"]["grid"]["x"] = "-5";
  Manifest manifest;
  std::string error;
  CHECK(parseManifest(plain.dump(), 2, manifest, error));
}

TEST_CASE("parseManifest compiles the rules computeLaunchGrid evaluates", "[grid][bundle]") {
  nlohmann::json json = moec::test::sampleManifest();
  json["kernels"][1]["launch"]["grid"].erase("z"); // a missing rule stays missing
  Manifest manifest;
  std::string error;
  REQUIRE(parseManifest(json.dump(), 2, manifest, error));
  const KernelInfo &kernel = manifest.kernels[0];
  for (size_t d = 0; d < 3; ++d)
    CHECK(kernel.launch.gridPrograms[d].compiled());
  CHECK(kernel.launch.gridPrograms[0].text() == "ceil(m / 32)");
  CHECK(kernel.launch.gridPrograms[1].text() == "n / 128");
  const RuleVariable variables[] = {{"m", 70}, {"n", 1024}};
  std::array<uint32_t, 3> grid{};
  REQUIRE(computeLaunchGrid(kernel, variables, 2, grid, error));
  CHECK(grid == std::array<uint32_t, 3>{3, 8, 1});

  // A copy keeps working (names are offsets into the program's own text).
  KernelInfo copy = kernel;
  REQUIRE(computeLaunchGrid(copy, variables, 2, grid, error));
  CHECK(grid == std::array<uint32_t, 3>{3, 8, 1});
  // Text changed by hand after parsing: the stale program is not used.
  copy.launch.gridY = "n / 256";
  REQUIRE(computeLaunchGrid(copy, variables, 2, grid, error));
  CHECK(grid == std::array<uint32_t, 3>{3, 4, 1});

  CHECK_FALSE(manifest.kernels[1].launch.gridPrograms[2].compiled());
  CHECK_FALSE(computeLaunchGrid(manifest.kernels[1], variables, 2, grid, error));
  CHECK(error == "moe2_w2_t64x128_aaaa0002: no grid rule for z");

  // Errors at evaluation keep their text.
  CHECK_FALSE(computeLaunchGrid(kernel, variables, 1, grid, error));
  CHECK(error == "moe2_w2_t32x128_aaaa0001: grid.y: grid rule 'n / 128': unknown name 'n'");
  const RuleVariable uneven[] = {{"m", 70}, {"n", 1000}};
  CHECK_FALSE(computeLaunchGrid(kernel, uneven, 2, grid, error));
  CHECK(error == "moe2_w2_t32x128_aaaa0001: grid.y: grid rule 'n / 128' is 125/16, "
                 "not a whole number");
}

TEST_CASE("HIP function name drops the kernel-descriptor suffix", "[hip]") {
  CHECK(hipFunctionName("moe2_w2_kernel.kd") == "moe2_w2_kernel");
  CHECK(hipFunctionName("moe2_w2_kernel") == "moe2_w2_kernel");
  CHECK(hipFunctionName(".kd") == ".kd");
}
