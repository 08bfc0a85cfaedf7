//===- LaunchRecorder.h - one layer forward's launches, by stage -*- C++ -*-===//
///
/// \file
/// `moec bench` times each stage of a layer the way it times the layer: a
/// HIP graph of that stage's launches alone, replayed. The layer API
/// launches a configuration's kernels in one forward() and has no per-launch
/// view, so the recorder reroutes the launch entries of the HIP symbol table
/// of a device the timer loaded for itself, for the duration of one forward:
/// every kernel launch (grid, workgroup, the packed kernarg bytes), memset
/// and 2-D copy is kept, then passed on to HIP unchanged. Replaying a
/// stage's recorded operations under stream capture gives the same graph
/// nodes that the stage's part of the layer's own captured forward has.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LAUNCHRECORDER_H
#define MOEC_HARNESS_LAUNCHRECORDER_H

#include "moec/hip_loader.h"
#include "moec/manifest.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moec::harness {

/// One operation a forward put on its stream.
struct RecordedOp {
  enum class Kind { Kernel, Memset, Copy2D } kind = Kind::Kernel;
  /// Kernel: the function, grid, workgroup, LDS bytes and kernarg copy.
  rt::hip::Function function = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1}, sharedBytes = 0;
  std::vector<uint8_t> kernarg;
  /// Memset: dst, value, bytes. Copy2D: dst, dstPitch, src, srcPitch,
  /// width, height, kind.
  void *dst = nullptr;
  const void *src = nullptr;
  int value = 0, copyKind = 0;
  size_t bytes = 0, dstPitch = 0, srcPitch = 0, width = 0, height = 0;
};

/// The operations of one stage, in launch order. A memset or copy belongs
/// to the stage of the next kernel (the route rows' zeroing before W2, the
/// FHMoE route copies before quant).
struct StageOps {
  rt::Stage stage = rt::Stage::Quant;
  std::vector<RecordedOp> ops;
  unsigned kernels = 0;
};

/// Runs `forward` with `device`'s launch entries rerouted through the
/// recorder and restored afterwards (whatever `forward` returns). `device`
/// must be one the caller loaded for itself: no other thread may launch
/// through it meanwhile. False with `error` when `forward` fails or a
/// launch passes its arguments other than as one packed kernarg buffer.
bool recordForward(const rt::HipDevice &device,
                   const std::function<bool(std::string &)> &forward,
                   std::vector<RecordedOp> &ops, std::string &error);

/// Groups recorded operations into stages: the i-th kernel launched is the
/// i-th kernel of `config` (the layer launches a configuration's kernels
/// in order). False when the counts differ (a kernel with an empty grid
/// was left out: nothing to time apart).
bool splitByStage(const std::vector<RecordedOp> &ops,
                  const rt::Manifest &manifest, const rt::ConfigInfo &config,
                  std::vector<StageOps> &stages, std::string &error);

/// Issues `ops` on `stream` through `device`'s HIP entry points (under a
/// capture, they become the graph's nodes).
bool issueOps(const rt::HipDevice &device, const std::vector<RecordedOp> &ops,
              rt::hip::Stream stream, std::string &error);

} // namespace moec::harness

#endif // MOEC_HARNESS_LAUNCHRECORDER_H
