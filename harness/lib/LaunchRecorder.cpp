//===- LaunchRecorder.cpp - one layer forward's launches, by stage --------===//

#include "moec/Harness/LaunchRecorder.h"

#include <cstring>

namespace moec::harness {

namespace {

/// The recording under way on this thread: the entry points replaced and
/// where their operations go.
struct Recording {
  rt::HipSymbols original;
  std::vector<RecordedOp> *ops = nullptr;
  std::string failure;
};
thread_local Recording *active = nullptr;

rt::hip::Error recordLaunch(rt::hip::Function function, unsigned gx,
                            unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shared, rt::hip::Stream stream,
                            void **params, void **extra) {
  RecordedOp op;
  op.function = function;
  op.grid[0] = gx, op.grid[1] = gy, op.grid[2] = gz;
  op.block[0] = bx, op.block[1] = by, op.block[2] = bz;
  op.sharedBytes = shared;
  // The loader passes one packed buffer through `extra` (none when the
  // kernel takes no arguments).
  const void *buffer = nullptr;
  const size_t *size = nullptr;
  for (void **e = extra; e && *e != rt::hip::kLaunchParamEnd; e += 2) {
    if (e[0] == rt::hip::kLaunchParamBufferPointer)
      buffer = e[1];
    else if (e[0] == rt::hip::kLaunchParamBufferSize)
      size = static_cast<const size_t *>(e[1]);
  }
  if (params || (extra && (!buffer || !size)))
    active->failure = "a launch passed its arguments other than as one "
                      "packed kernarg buffer";
  else if (size)
    op.kernarg.assign(static_cast<const uint8_t *>(buffer),
                      static_cast<const uint8_t *>(buffer) + *size);
  active->ops->push_back(std::move(op));
  return active->original.hipModuleLaunchKernel(function, gx, gy, gz, bx, by,
                                                bz, shared, stream, params,
                                                extra);
}

rt::hip::Error recordMemset(void *dst, int value, size_t size,
                            rt::hip::Stream stream) {
  RecordedOp op;
  op.kind = RecordedOp::Kind::Memset;
  op.dst = dst, op.value = value, op.bytes = size;
  active->ops->push_back(op);
  return active->original.hipMemsetAsync(dst, value, size, stream);
}

rt::hip::Error recordCopy2D(void *dst, size_t dstPitch, const void *src,
                            size_t srcPitch, size_t width, size_t height,
                            int kind, rt::hip::Stream stream) {
  RecordedOp op;
  op.kind = RecordedOp::Kind::Copy2D;
  op.dst = dst, op.dstPitch = dstPitch, op.src = src, op.srcPitch = srcPitch;
  op.width = width, op.height = height, op.copyKind = kind;
  active->ops->push_back(op);
  return active->original.hipMemcpy2DAsync(dst, dstPitch, src, srcPitch, width,
                                           height, kind, stream);
}

} // namespace

bool recordForward(const rt::HipDevice &device,
                   const std::function<bool(std::string &)> &forward,
                   std::vector<RecordedOp> &ops, std::string &error) {
  // The table belongs to a HipLibrary the caller loaded for itself (not a
  // const object): rerouting it for one forward touches nobody else.
  auto &table = const_cast<rt::HipSymbols &>(device.hipApi());
  Recording recording;
  recording.original = table;
  recording.ops = &ops;
  ops.clear();
  Recording *outer = active;
  active = &recording;
  table.hipModuleLaunchKernel = recordLaunch;
  table.hipMemsetAsync = recordMemset;
  table.hipMemcpy2DAsync = recordCopy2D;
  const bool ran = forward(error);
  table = recording.original;
  active = outer;
  if (ran && !recording.failure.empty()) {
    error = recording.failure;
    return false;
  }
  return ran;
}

bool splitByStage(const std::vector<RecordedOp> &ops,
                  const rt::Manifest &manifest, const rt::ConfigInfo &config,
                  std::vector<StageOps> &stages, std::string &error) {
  stages.clear();
  std::vector<RecordedOp> pending; // memsets and copies before a kernel
  size_t kernel = 0;
  for (const RecordedOp &op : ops) {
    if (op.kind != RecordedOp::Kind::Kernel) {
      pending.push_back(op);
      continue;
    }
    if (kernel >= config.kernels.size())
      break;
    const rt::Stage stage = manifest.kernels[config.kernels[kernel++]].stage;
    if (stages.empty() || stages.back().stage != stage)
      stages.push_back({stage, {}, 0});
    StageOps &into = stages.back();
    into.ops.insert(into.ops.end(), pending.begin(), pending.end());
    pending.clear();
    into.ops.push_back(op);
    ++into.kernels;
  }
  size_t launched = 0;
  for (const RecordedOp &op : ops)
    launched += op.kind == RecordedOp::Kind::Kernel;
  if (launched != config.kernels.size()) {
    error = "the forward launched " + std::to_string(launched) +
            " kernels, configuration " + config.id + " has " +
            std::to_string(config.kernels.size());
    stages.clear();
    return false;
  }
  if (!pending.empty() && !stages.empty())
    stages.back().ops.insert(stages.back().ops.end(), pending.begin(),
                             pending.end());
  return true;
}

bool issueOps(const rt::HipDevice &device, const std::vector<RecordedOp> &ops,
              rt::hip::Stream stream, std::string &error) {
  const rt::HipSymbols &api = device.hipApi();
  for (const RecordedOp &op : ops) {
    rt::hip::Error status = rt::hip::kSuccess;
    const char *what = "hipModuleLaunchKernel";
    switch (op.kind) {
    case RecordedOp::Kind::Kernel: {
      void *kernarg = const_cast<uint8_t *>(op.kernarg.data());
      size_t size = op.kernarg.size();
      void *extra[] = {rt::hip::kLaunchParamBufferPointer, kernarg,
                       rt::hip::kLaunchParamBufferSize, &size,
                       rt::hip::kLaunchParamEnd};
      status = api.hipModuleLaunchKernel(
          op.function, op.grid[0], op.grid[1], op.grid[2], op.block[0],
          op.block[1], op.block[2], op.sharedBytes, stream, nullptr,
          size ? extra : nullptr);
      break;
    }
    case RecordedOp::Kind::Memset:
      what = "hipMemsetAsync";
      status = api.hipMemsetAsync(op.dst, op.value, op.bytes, stream);
      break;
    case RecordedOp::Kind::Copy2D:
      what = "hipMemcpy2DAsync";
      status = api.hipMemcpy2DAsync(op.dst, op.dstPitch, op.src, op.srcPitch,
                                    op.width, op.height, op.copyKind, stream);
      break;
    }
    if (status != rt::hip::kSuccess) {
      error = std::string(what) + " failed: " + device.library().describe(status);
      return false;
    }
  }
  return true;
}

} // namespace moec::harness
