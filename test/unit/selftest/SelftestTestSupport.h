//===- SelftestTestSupport.h - what the self-test's tests share -*- C++ -*-===//

#ifndef MOEC_TEST_UNIT_SELFTEST_SELFTESTTESTSUPPORT_H
#define MOEC_TEST_UNIT_SELFTEST_SELFTESTTESTSUPPORT_H

#include "moec/Harness/LayerSetup.h"

#include <cstdint>

namespace moec::selftest::test {

/// The facts of a small SiLU table without a shared expert or biases.
inline harness::TableFacts smallFacts(bool fused, uint32_t hidden,
                                      uint32_t intermediate, uint32_t experts) {
  harness::TableFacts facts;
  facts.problem.hidden = hidden;
  facts.problem.intermediate = intermediate;
  facts.problem.experts = experts;
  facts.problem.topK = 2;
  facts.fused = fused;
  return facts;
}

} // namespace moec::selftest::test

#endif // MOEC_TEST_UNIT_SELFTEST_SELFTESTTESTSUPPORT_H
