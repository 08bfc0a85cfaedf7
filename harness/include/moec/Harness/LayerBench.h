//===- LayerBench.h - `moec bench`: a bundle's layer times --------*- C++ -*-===//
///
/// \file
/// Measures the layer forward of every selection key (network, EP,
/// workspace, M) of a bundle on a device the way the seeds measure
/// (docs/performance.md, "Reading `moec bench`"): HIP graph replay, a
/// 512 MiB cache flush outside the timed region, 5 warm-ups, two passes of
/// 30 samples (the second in a shuffled key order), the mean of the two
/// passes' medians; one selection table at a time. It runs on the device timer
/// of `moec tune --device` (DeviceTimer.h) with those settings, each stage
/// of an unfused table too (its launches alone, LaunchRecorder.h), and puts
/// the published figure of the same key (tuning_tables/published/
/// figures.csv, or the `us1`, `us2`, `us` of the AITER CSV row a key was
/// compiled from) beside each measurement.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LAYERBENCH_H
#define MOEC_HARNESS_LAYERBENCH_H

#include "moec/Harness/DeviceTimer.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace moec::harness {

/// One selection key.
struct BenchKey {
  std::string network;
  uint32_t ep = 1, workspace = 0, m = 0;
  bool operator<(const BenchKey &other) const {
    return std::tie(network, ep, workspace, m) <
           std::tie(other.network, other.ep, other.workspace, other.m);
  }
  bool operator==(const BenchKey &other) const {
    return !(*this < other) && !(other < *this);
  }
};

struct BenchOptions {
  /// The device of each rank (fused EP: one rank per device); the first
  /// one alone times unfused tables.
  std::vector<int> devices = {0};
  /// HIP libraries tried in order (empty: $MOEC_HIP_LIBRARY or libamdhip64).
  std::vector<std::string> libraries;
  /// Filters: empty / 0 take every value.
  std::string network;
  uint32_t ep = 0, workspace = 0, m = 0;
  /// Keys measured before (--resume): not measured again.
  std::set<BenchKey> done;
  /// figures.csv to read published times from (empty: none).
  std::string publishedFigures;
  /// Where to look for the AITER CSVs a bundle was compiled from (its
  /// manifest names each by file name and content hash): these files, then
  /// the `aiter` folder beside the figures file's folder
  /// (tuning_tables/aiter), then the bundle's folder. A file whose hash
  /// differs is not used.
  std::vector<std::string> aiterCsvs;
  /// Time each stage of unfused tables too (StageTime).
  bool stages = true;
  /// The protocol; the defaults are the seeds'.
  unsigned warmups = 5, samplesPerPass = 30, passes = 2;
  uint64_t flushBytes = uint64_t(512) << 20;
  uint64_t seed = 1;
  std::function<void(const std::string &)> progress;
  /// Asked before every key (SIGINT): true stops there; the tables timed
  /// completely are kept, the one under way is not.
  std::function<bool()> stop;
};

/// One measured key.
struct BenchRow {
  BenchKey key;
  double layerUs = -1.0;
  /// The published figure of the same key, or a negative value: a
  /// figures.csv `layer` figure, or for a bundle compiled from an AITER CSV
  /// the `us` of the row compiled at this key.
  double publishedUs = -1.0;
  std::string figure; ///< its id in figures.csv, or "FILE.csv:LINE"
  /// Each stage's time (unfused tables), in launch order.
  std::vector<StageTime> stages;
  /// The AITER row's `us1` (its stage-1 kernel: W13) and `us2` (stage 2:
  /// W2), or negative values.
  double publishedW13Us = -1.0, publishedW2Us = -1.0;
  /// The time of every launch of `stage` at this key; negative: none.
  double stageUs(const std::string &stage) const;
};

struct BenchResult {
  std::string device; ///< how the device names itself (one token)
  std::string method; ///< how it timed (DeviceTimer's method token)
  std::string date;
  /// The HIP library is moec's timing test double: its clock is synthetic.
  bool synthetic = false;
  std::vector<BenchRow> rows;
  std::vector<std::string> skipped;
  /// Why figures are missing (an AITER CSV not found).
  std::vector<std::string> notes;
  bool interrupted = false;
};

/// Measures every key of the bundle that passes the filters and is not in
/// `options.done`. False with a one-line `error` when nothing can be timed
/// (no HIP, moec's emulated device, a library without timing entry points,
/// an unreadable bundle or figures file).
bool runBench(const std::string &bundlePath, const BenchOptions &options,
              BenchResult &result, std::string &error);

/// The result as a table (one line per key) for a terminal.
std::string formatBenchText(const BenchResult &result);
/// The stages a row may have, in launch order (abi::Stage's names).
const std::vector<std::string> &benchStages();

/// The result as CSV (network,ep,workspace,m,layer_us,published_us,ratio,
/// figure,device,method,synthetic, then one `STAGE_us` column per stage and
/// published_us1,ratio_w13,published_us2,ratio_w2) and as JSON; both
/// written atomically (a temporary file renamed).
bool writeBenchCsv(const BenchResult &result, const std::string &path,
                   std::string &error);
bool writeBenchJson(const BenchResult &result, const std::string &path,
                    std::string &error);
/// The rows of a previous CSV or JSON output (by extension), for --resume:
/// their keys go to `options.done`, the rows to the new result.
bool readBenchRows(const std::string &path, std::vector<BenchRow> &rows,
                   std::string &error);

/// `moec bench --compare A B`: the TP4 seed's paired measurement. 31
/// pairs per key, the bundles' order alternating, each bundle's time of a
/// pair the slowest rank's mean over 16 graph replays; B is faster at a key
/// when the median paired gain (a - b) / a is at least 1 % and B wins at
/// least 25 of the 31 pairs. The same run of A against A is the control:
/// it must show no gain anywhere, or capture or timing is biased.
inline constexpr unsigned kComparePairs = 31;
inline constexpr double kCompareMinGain = 0.01;
inline constexpr unsigned kCompareMinFaster = 25;

struct CompareKey {
  BenchKey key;
  std::vector<double> a, b; ///< per pair, microseconds
  double medianGain = 0.0;
  unsigned faster = 0, pairs = 0;
  bool gate = false; ///< B faster by the seed's gate
};

struct CompareResult {
  std::string device, method;
  bool synthetic = false;
  std::vector<CompareKey> keys;    ///< A against B
  std::vector<CompareKey> control; ///< A against A, same keys
  bool controlPassed = false;
};

/// Compares bundles A and B on the keys both have (the filters apply);
/// false when they do not have the same keys or nothing can be timed.
bool runBenchCompare(const std::string &bundleA, const std::string &bundleB,
                     const BenchOptions &options, CompareResult &result,
                     std::string &error);
std::string formatCompareText(const CompareResult &result);

} // namespace moec::harness

#endif // MOEC_HARNESS_LAYERBENCH_H
