#include "moec/grid_rule.h"
#include "moec/hip_loader.h"

#include <catch2/catch.hpp>

using namespace moec::rt;

namespace {

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

TEST_CASE("HIP function name drops the kernel-descriptor suffix", "[hip]") {
  CHECK(hipFunctionName("moe2_w2_kernel.kd") == "moe2_w2_kernel");
  CHECK(hipFunctionName("moe2_w2_kernel") == "moe2_w2_kernel");
  CHECK(hipFunctionName(".kd") == ".kd");
}
