//===- Selftest.h - moec selftest: a bundle against the oracle --*- C++ -*-===//
///
/// \file
/// Every selection table of a bundle, through the runtime's layer API on a
/// device (a GPU, or the emulated device), against the oracle: seeded random
/// weights with random per-block scales, tokens, routing with invalid ids,
/// tokens with no valid route, hot-rank routing, unequal and empty ranks, at
/// M around each boundary where the configuration changes (docs/cli.md,
/// "moec selftest"). One line per case; `moec selftest` only parses its
/// options and prints what runSelftest() reports.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_SELFTEST_SELFTEST_H
#define MOEC_SELFTEST_SELFTEST_H

#include "moec/Harness/LayerSetup.h"
#include "moec/reference/Families.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moec::selftest {

/// Faults a test plants in what the device computes, to prove the verdict
/// catches them (test/unit/selftest/PlantedFaultTest.cpp); no CLI option
/// sets them. The oracle always sees the table's true weights.
struct PlantedFaults {
  /// Alters a table's weights (device layout, every expert) before they
  /// are uploaded to the ranks.
  std::function<void(const harness::TableFacts &, harness::HostLayerWeights &)>
      uploadedWeights;
  /// Runs once every rank's forward of a case is queued, before the
  /// outputs are read back: may write into any rank's device buffers (a
  /// copy on the null stream runs the pending launches first). False with
  /// `error` fails the case.
  std::function<bool(std::vector<harness::Rank> &,
                     const std::vector<ref::TokenBatch> &, uint32_t m,
                     const harness::TableFacts &, std::string &error)>
      afterForwards;
};

/// What `moec selftest` was asked (docs/cli.md).
struct SelftestOptions {
  std::string bundle;
  /// A device ordinal (the ranks on it and the devices after it), or
  /// "emulated".
  std::string device = "0";
  /// --small compiles the bundle's own table (rebuilt from its manifest) at
  /// a small shape with the same knobs; --real runs the bundle's own code
  /// objects at its own shapes. Neither: --real on a GPU, --small on the
  /// emulated device (runsAsCompiled).
  bool small = false, real = false;
  /// Then this many forwards with changing M, whose repeated shapes must
  /// give identical outputs.
  int repeat = 0;
  uint64_t seed = 1;
  /// Skip cases above this M (0: none skipped).
  uint32_t maxM = 0;
  /// --devices: the device of each rank, in rank order (empty: --device N
  /// and the devices after it).
  std::string devices;
  /// --network: only the tables of this network (empty: every table).
  std::string network;
  /// --activation: the oracle's W13 activation, "silu" or "gpt-oss-swiglu"
  /// (empty: the one the table's W13 kernels were compiled with).
  std::string activation;
  /// --a-format, --mid-format: the oracle's token rows and intermediate,
  /// "fp8" or "fp4" (empty: the formats of the table's W13 kernels).
  std::string aFormat, midFormat;
  /// --save: a new directory for every case's inputs and outputs, and
  /// each table's weights in checkpoint layout (always at the small shape,
  /// with --save-weights at the bundle's own).
  std::string saveDir;
  bool saveWeights = false;
  PlantedFaults faults;
};

/// Whether the self-test runs the bundle's own code objects (--real, or a
/// GPU without --small) rather than its tables rebuilt at a small shape (the
/// emulated device's default: its kernels run on the CPU).
inline bool runsAsCompiled(const SelftestOptions &options) {
  return options.real || (!options.small && options.device != "emulated");
}

/// How a self-test ended; the CLI's exit status is its value (docs/cli.md).
enum class SelftestStatus : int {
  Passed = 0,   ///< every table asked for ran, and every case passed
  Failed = 1,   ///< a case failed, or the saved cases could not be written
  BadInput = 2, ///< bad options, bundle or table
  NoDevice = 3, ///< the HIP library or a device could not be opened
  /// Every case that ran passed, but a table asked for was skipped (fused
  /// ranks without a device each): not a pass, since it was not run.
  Incomplete = 4,
};

/// Where a self-test's text goes: `line` a line of its report (the case
/// lines, "PASS ..." / "FAIL ..." / "SKIP ...", and the notes around
/// them), `error` a one-line error that ends it. Neither has a newline.
struct SelftestOutput {
  std::function<void(const std::string &)> line;
  std::function<void(const std::string &)> error;
};

/// Runs the self-test `options` describe.
SelftestStatus runSelftest(const SelftestOptions &options,
                           const SelftestOutput &output);

/// A device ordinal: decimal digits, below 2^16.
bool parseDeviceOrdinal(const std::string &text, int &ordinal);
/// --devices "2,3,0,1": distinct device ordinals separated by commas.
bool parseDeviceList(const std::string &text, std::vector<int> &ordinals);

} // namespace moec::selftest

#endif // MOEC_SELFTEST_SELFTEST_H
