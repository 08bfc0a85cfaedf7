//===- TestKernels.h - compile small moe kernels for tests ------*- C++ -*-===//

#ifndef MOEC_TEST_UNIT_COMPILER_TESTKERNELS_H
#define MOEC_TEST_UNIT_COMPILER_TESTKERNELS_H

#include <cstdint>
#include <string>
#include <vector>

namespace moec::test {

/// Compiles the moe-dialect source `mlir` (one stage op named `name`) to an
/// HSACO; fails the current test on any error.
std::vector<uint8_t> compileToHsaco(const std::string &mlir,
                                    const std::string &name);

/// A W2 op in textual form with the given tile knobs at a small shape.
std::string w2Source(const std::string &name, int tileM, int tileN, int waves,
                     const std::string &extraTile = "");

/// Runs `command` in a shell and returns its standard output; fails the
/// current test when it cannot start or exits non-zero.
std::string runCommand(const std::string &command);

} // namespace moec::test

#endif
