// The layer-output comparison `moec selftest` uses (emu::outputDistance):
// a NaN or infinite element fails whatever the other elements say, and
// merging ranks never drops a NaN the way std::max does.

#include "moec/Harness/StageHarness.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace moec::emu;

namespace {

/// Seeded N(0, 1) values and a copy off by `relative` of each.
void randomPair(size_t n, double relative, std::vector<double> &got,
                std::vector<float> &want) {
  std::mt19937_64 rng(20261201);
  std::normal_distribution<double> normal;
  got.resize(n);
  want.resize(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = static_cast<float>(normal(rng));
    got[i] = want[i] * (1.0 + relative);
  }
}

} // namespace

TEST_CASE("output distance: relative L2 of finite outputs", "[selftest]") {
  std::vector<double> got;
  std::vector<float> want;
  randomPair(4096, 1e-3, got, want);
  OutputDistance d = outputDistance(got, want);
  CHECK(d.nonFinite == 0);
  CHECK(d.relL2 == Approx(1e-3).epsilon(1e-6));
  CHECK(d.within(2e-3));
  CHECK_FALSE(d.within(5e-4));
}

TEST_CASE("output distance: one NaN or infinity fails any bound",
          "[selftest]") {
  std::vector<double> got;
  std::vector<float> want;
  randomPair(4096, 1e-4, got, want);
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    std::vector<double> planted = got;
    planted[1234] = bad; // one valid row's element, as a kernel bug writes it
    OutputDistance d = outputDistance(planted, want);
    CHECK(d.nonFinite == 1);
    CHECK(d.relL2 <= 2e-4); // the other elements still agree
    CHECK_FALSE(d.within(1.0));
  }
}

TEST_CASE("output distance: merging ranks keeps a NaN and the worst rank",
          "[selftest]") {
  OutputDistance total;
  total.merge({1e-3, 0});
  total.merge({std::numeric_limits<double>::quiet_NaN(), 0});
  CHECK(std::isnan(total.relL2));
  CHECK_FALSE(total.within(1.0));
  OutputDistance ranks;
  ranks.merge({2e-3, 0});
  ranks.merge({1e-3, 2});
  CHECK(ranks.relL2 == 2e-3);
  CHECK(ranks.nonFinite == 2);
  CHECK_FALSE(ranks.within(1.0));
}
