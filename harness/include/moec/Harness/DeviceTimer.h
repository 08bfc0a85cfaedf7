//===- DeviceTimer.h - `moec tune --device N`'s candidate timer -*- C++ -*-===//
///
/// \file
/// Times the configurations of a bundle on a GPU through the runtime
/// (docs/tuning.md, "Timing on a device"): per configuration its layer
/// ranks with seeded random weights and tokens; per key M a warm-up, one
/// forward captured in a HIP graph, then samples of one graph replay each
/// between two events, the caches flushed before every sample (a memset
/// over a buffer larger than the chip's caches); several passes over the
/// configurations, every other one in reversed order; the median of every
/// (configuration, key). Fused tables run one device per rank and are
/// launched directly (their kernels count an epoch a replayed graph would
/// repeat). On moec's emulated device, or a HIP library without the timing
/// entry points, it times nothing and says why.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_DEVICETIMER_H
#define MOEC_HARNESS_DEVICETIMER_H

#include "moec/Compiler/Tuner.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moec::harness {

/// One stage's time at one key: its launches alone (the layer's operations
/// of that stage, LaunchRecorder.h) captured in a graph and timed as the
/// layer is.
struct StageTime {
  std::string stage; ///< "quant", "sort", "w13", "w2", "combine"
  unsigned kernels = 0;
  double us = -1.0;
};

/// Per configuration, per key: the stages in launch order (empty: not
/// timed, e.g. a fused table).
using StageTimings = std::vector<std::vector<std::vector<StageTime>>>;

struct DeviceTimerOptions {
  /// HIP libraries tried in order (empty: rt::defaultHipLibraryCandidates(),
  /// i.e. $MOEC_HIP_LIBRARY or libamdhip64).
  std::vector<std::string> libraries;
  unsigned passes = 4;
  /// Samples of every (configuration, key) in each pass.
  unsigned samplesPerPass = 10;
  /// Forwards before the capture of each (configuration, key) in a pass.
  unsigned warmups = 3;
  /// The cache flush before every sample: MI355X has 256 MiB of Infinity
  /// Cache and 4 MiB of L2 per XCD; 0: no flush (for tests).
  uint64_t flushBytes = uint64_t(512) << 20;
  uint64_t seed = 1;
  /// A line per configuration set up in each pass (empty: quiet).
  std::function<void(const std::string &)> progress;
  /// The device of each rank, in rank order (empty: the timer's device and
  /// the devices after it).
  std::vector<int> devices;
  /// Every other pass visits its configurations' keys in a seeded random
  /// order too (besides the reversed configuration order).
  bool shuffleReversedPasses = false;
  /// The result of a key: the mean of each pass's median (the seeds'
  /// statistic) instead of the median of every sample.
  bool meanOfPassMedians = false;
  /// Asked before every key: true stops the run there (the keys left are
  /// not timed and not reported as skipped).
  std::function<bool()> stop;
  /// Graph replays (fused: forwards) between a sample's two events; the
  /// sample is their mean (`moec bench --compare`: 16, as the TP4 seed).
  unsigned replaysPerSample = 1;
  /// When set, every key of an unfused table is followed by its stages,
  /// each timed with the same warm-ups, flush, samples and statistic
  /// (`moec bench`); fused tables' stages wait on the other ranks' and
  /// cannot run alone. run() fills it in `configs` order.
  StageTimings *stageTimes = nullptr;
};

/// The timer of device `device` (its rank 0; fused tables' ranks on
/// `device` and the devices after it).
CandidateTimer makeDeviceTimer(int device, DeviceTimerOptions options = {});

/// One token for a device name: runs of characters other than letters,
/// digits, '.', '_' and '-' become one '-', then "-gpuN"
/// ("AMD Instinct MI355X", 2 -> "AMD-Instinct-MI355X-gpu2").
std::string deviceToken(const std::string &name, int ordinal);

/// The method token of a run (docs/tuning.md, "Timing on a device"), e.g.
/// "hip-graph-median-flush512M-4pass-reversed-40samples" (`moec bench`:
/// "hip-graph-mean-of-pass-medians-flush512M-2pass-reversed-shuffled-
/// 60samples"). Fused tables are timed by the same graph replay.
std::string timingMethodToken(const DeviceTimerOptions &options);

} // namespace moec::harness

#endif // MOEC_HARNESS_DEVICETIMER_H
