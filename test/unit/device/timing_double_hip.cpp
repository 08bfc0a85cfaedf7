//===- timing_double_hip.cpp - a HIP test double with a synthetic clock ---===//
//
// libmoec_timing_double_hip.so, built for tests only: every HIP entry point
// the runtime resolves, the optional timing table included, on host memory.
// Nothing runs: kernel launches, fills and copies on a stream only advance
// the device's synthetic clock, which events read. It names itself
// "moec-timing-test-double" and is no GPU.
//
// The clock, deterministic:
//  - a kernel costs 1 us + 0.002 us per wave of its grid (workgroups x
//    workgroup threads / 64), x 1.25 when it is cold: its first run since
//    the last cache flush, a fill of >= 256 MiB;
//  - a fill or a 2-D copy costs 1 us per 5 MB (5 TB/s);
//  - every `jitter period`-th event record of a device (default 5) first
//    adds 25 us to the clock: outliers that a median must ignore.
// Devices: $MOEC_TIMING_DOUBLE_DEVICES (default 1). A capture follows HIP's
// global mode: while a stream of the device captures, synchronous calls,
// event records and graph launches on it fail with
// hipErrorStreamCaptureUnsupported; the null stream cannot capture.
//
//===----------------------------------------------------------------------===//

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#define DOUBLE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2,
              kInvalidDevice = 101, kInvalidImage = 200,
              kInvalidHandle = 400, kIllegalState = 401,
              kCaptureUnsupported = 900;
constexpr uint64_t kFlushBytes = uint64_t(256) << 20;
constexpr double kColdFactor = 1.25;

/// One operation on a stream: a kernel (function set) or a fill or copy.
struct Op {
  const void *function = nullptr;
  double baseUs = 0.0;
  bool flushes = false;
};

struct Device {
  double clockUs = 0.0;
  std::set<const void *> warm;
  uint64_t eventRecords = 0;
  int capturing = 0;
};

struct Stream {
  int device = 0;
  bool capturing = false;
  std::vector<Op> captured;
};

struct Graph {
  int device = 0;
  std::vector<Op> ops;
};

struct Event {
  int device = 0;
  bool recorded = false;
  double timeUs = 0.0;
};

struct Function {
  std::string name;
};

struct State {
  std::mutex mutex;
  std::vector<Device> devices;
  std::map<void *, size_t> allocations;
  std::map<std::pair<const void *, std::string>, std::unique_ptr<Function>>
      functions;
  int jitterPeriod = 5;
  double jitterUs = 25.0;
  uint64_t graphLaunches = 0, captures = 0, directLaunches = 0;
  double lastGraphColdUs = 0.0;
  int lastGraphKernels = 0;
};

State &state() {
  static State s;
  return s;
}

int deviceCount() {
  const char *text = std::getenv("MOEC_TIMING_DOUBLE_DEVICES");
  int count = text && *text ? std::atoi(text) : 1;
  return count >= 1 && count <= 64 ? count : 1;
}

thread_local int current = 0;

Device &device(State &s, int ordinal) {
  if (s.devices.size() < size_t(deviceCount()))
    s.devices.resize(size_t(deviceCount()));
  return s.devices[size_t(ordinal)];
}

int streamDevice(void *stream) {
  return stream ? static_cast<Stream *>(stream)->device : current;
}

/// Runs `op` on device `d`'s clock.
double costOf(const Device &d, const Op &op) {
  if (!op.function)
    return op.baseUs;
  return d.warm.count(op.function) ? op.baseUs : op.baseUs * kColdFactor;
}

void execute(Device &d, const Op &op) {
  d.clockUs += costOf(d, op);
  if (op.function)
    d.warm.insert(op.function);
  if (op.flushes)
    d.warm.clear();
}

/// Queues `op` on `stream`: into its capture, or onto the clock.
void enqueue(State &s, void *stream, const Op &op) {
  if (stream && static_cast<Stream *>(stream)->capturing) {
    static_cast<Stream *>(stream)->captured.push_back(op);
    return;
  }
  execute(device(s, streamDevice(stream)), op);
}

bool capturingOn(State &s, int ordinal) {
  return device(s, ordinal).capturing > 0;
}

double transferUs(uint64_t bytes) { return double(bytes) / 5.0e6; }

} // namespace

// --- The test's controls ----------------------------------------------------

DOUBLE_EXPORT void moecTimingDoubleSetJitter(int period, double us) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.jitterPeriod = period;
  s.jitterUs = us;
}
DOUBLE_EXPORT uint64_t moecTimingDoubleGraphLaunches(void) {
  return state().graphLaunches;
}
DOUBLE_EXPORT uint64_t moecTimingDoubleCaptures(void) { return state().captures; }
DOUBLE_EXPORT uint64_t moecTimingDoubleDirectLaunches(void) {
  return state().directLaunches;
}
/// The last graph launched: its kernels, and its time with every kernel
/// cold.
DOUBLE_EXPORT double moecTimingDoubleLastGraphColdUs(void) {
  return state().lastGraphColdUs;
}
DOUBLE_EXPORT int moecTimingDoubleLastGraphKernels(void) {
  return state().lastGraphKernels;
}

// --- Devices ------------------------------------------------------------------

DOUBLE_EXPORT int hipInit(unsigned flags) { return flags ? kInvalidValue : kSuccess; }

DOUBLE_EXPORT int hipGetDeviceCount(int *count) {
  if (!count)
    return kInvalidValue;
  *count = deviceCount();
  return kSuccess;
}

DOUBLE_EXPORT int hipSetDevice(int ordinal) {
  if (ordinal < 0 || ordinal >= deviceCount())
    return kInvalidDevice;
  current = ordinal;
  return kSuccess;
}

DOUBLE_EXPORT int hipDeviceGetAttribute(int *value, int attribute, int ordinal) {
  if (!value || ordinal < 0 || ordinal >= deviceCount())
    return kInvalidValue;
  switch (attribute) {
  case 56: *value = 1024; return kSuccess;   // max threads per block
  case 63: *value = 256; return kSuccess;    // compute units (MI355X)
  case 74: *value = 163840; return kSuccess; // LDS per workgroup (gfx950)
  case 87: *value = 64; return kSuccess;     // wave size
  }
  return kInvalidValue;
}

DOUBLE_EXPORT int hipDeviceGetName(char *name, int length, int ordinal) {
  if (!name || length <= 0 || ordinal < 0 || ordinal >= deviceCount())
    return kInvalidValue;
  std::strncpy(name, "moec-timing-test-double", size_t(length) - 1);
  name[length - 1] = 0;
  return kSuccess;
}

DOUBLE_EXPORT const char *hipGetErrorString(int error) {
  switch (error) {
  case kSuccess: return "hipSuccess";
  case kInvalidValue: return "hipErrorInvalidValue";
  case kOutOfMemory: return "hipErrorOutOfMemory";
  case kInvalidDevice: return "hipErrorInvalidDevice";
  case kInvalidImage: return "hipErrorInvalidImage";
  case kInvalidHandle: return "hipErrorInvalidHandle";
  case kIllegalState: return "hipErrorIllegalState";
  case kCaptureUnsupported: return "hipErrorStreamCaptureUnsupported";
  }
  return "hipErrorUnknown";
}

DOUBLE_EXPORT int hipDeviceSynchronize(void) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return capturingOn(s, current) ? kCaptureUnsupported : kSuccess;
}

// --- Memory: host pages, untouched until written -------------------------------

DOUBLE_EXPORT int hipMalloc(void **pointer, size_t size) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!pointer)
    return kInvalidValue;
  if (capturingOn(s, current))
    return kCaptureUnsupported;
  void *p = ::mmap(nullptr, size ? size : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return kOutOfMemory;
  s.allocations[p] = size ? size : 1;
  *pointer = p;
  return kSuccess;
}

DOUBLE_EXPORT int hipFree(void *pointer) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!pointer)
    return kSuccess;
  auto it = s.allocations.find(pointer);
  if (it == s.allocations.end())
    return kInvalidValue;
  ::munmap(it->first, it->second);
  s.allocations.erase(it);
  return kSuccess;
}

DOUBLE_EXPORT int hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (kind < 0 || kind > 4 || (size && (!dst || !src)))
    return kInvalidValue;
  if (capturingOn(s, current))
    return kCaptureUnsupported;
  if (size)
    std::memmove(dst, src, size);
  return kSuccess;
}

DOUBLE_EXPORT int hipMemsetAsync(void *dst, int value, size_t size, void *stream) {
  (void)value;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (size && !dst)
    return kInvalidValue;
  Op op;
  op.baseUs = transferUs(size);
  op.flushes = size >= kFlushBytes;
  enqueue(s, stream, op);
  return kSuccess;
}

DOUBLE_EXPORT int hipMemcpy2DAsync(void *dst, size_t dstPitch, const void *src,
                                   size_t srcPitch, size_t width, size_t height,
                                   int kind, void *stream) {
  (void)dstPitch;
  (void)srcPitch;
  (void)kind;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (width && height && (!dst || !src))
    return kInvalidValue;
  Op op;
  op.baseUs = transferUs(uint64_t(width) * height);
  enqueue(s, stream, op);
  return kSuccess;
}

DOUBLE_EXPORT int hipIpcGetMemHandle(void *handle, void *pointer) {
  if (!handle)
    return kInvalidValue;
  std::memset(handle, 0, 64);
  std::memcpy(handle, &pointer, sizeof(pointer));
  return kSuccess;
}

struct IpcHandle {
  char reserved[64];
};

DOUBLE_EXPORT int hipIpcOpenMemHandle(void **pointer, IpcHandle handle,
                                      unsigned flags) {
  (void)flags;
  if (!pointer)
    return kInvalidValue;
  std::memcpy(pointer, handle.reserved, sizeof(*pointer));
  return kSuccess;
}

DOUBLE_EXPORT int hipIpcCloseMemHandle(void *pointer) {
  (void)pointer;
  return kSuccess;
}

// --- Modules and launches -------------------------------------------------------

DOUBLE_EXPORT int hipModuleLoadData(void **module, const void *image) {
  if (!module || !image)
    return kInvalidValue;
  if (std::memcmp(image, "\x7f" "ELF", 4) != 0)
    return kInvalidImage;
  *module = const_cast<void *>(image);
  return kSuccess;
}

DOUBLE_EXPORT int hipModuleGetFunction(void **function, void *module,
                                       const char *name) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!function || !module || !name)
    return kInvalidValue;
  std::unique_ptr<Function> &f = s.functions[{module, name}];
  if (!f)
    f = std::make_unique<Function>(Function{name});
  *function = f.get();
  return kSuccess;
}

DOUBLE_EXPORT int hipModuleUnload(void *module) {
  return module ? kSuccess : kInvalidValue;
}

DOUBLE_EXPORT int hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy,
                                        unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, void *stream,
                                        void **params, void **extra) {
  (void)shared;
  (void)params;
  (void)extra;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!function || !gx || !gy || !gz || !bx || !by || !bz)
    return kInvalidValue;
  const double waves =
      double(uint64_t(gx) * gy * gz) * double(uint64_t(bx) * by * bz) / 64.0;
  Op op;
  op.function = function;
  op.baseUs = 1.0 + 0.002 * waves;
  if (!(stream && static_cast<Stream *>(stream)->capturing))
    ++s.directLaunches;
  enqueue(s, stream, op);
  return kSuccess;
}

// --- Streams, captures and graphs -----------------------------------------------

DOUBLE_EXPORT int hipStreamCreate(void **stream) {
  if (!stream)
    return kInvalidValue;
  auto *created = new Stream;
  created->device = current;
  *stream = created;
  return kSuccess;
}

DOUBLE_EXPORT int hipStreamDestroy(void *stream) {
  if (!stream)
    return kInvalidHandle;
  delete static_cast<Stream *>(stream);
  return kSuccess;
}

DOUBLE_EXPORT int hipStreamSynchronize(void *stream) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return capturingOn(s, streamDevice(stream)) ? kCaptureUnsupported : kSuccess;
}

DOUBLE_EXPORT int hipStreamBeginCapture(void *stream, int mode) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!stream)
    return kCaptureUnsupported; // the null stream cannot capture
  if (mode < 0 || mode > 2)
    return kInvalidValue;
  auto *st = static_cast<Stream *>(stream);
  if (st->capturing)
    return kIllegalState;
  st->capturing = true;
  st->captured.clear();
  ++device(s, st->device).capturing;
  return kSuccess;
}

DOUBLE_EXPORT int hipStreamEndCapture(void *stream, void **graph) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!stream || !graph)
    return kInvalidValue;
  auto *st = static_cast<Stream *>(stream);
  if (!st->capturing)
    return kIllegalState;
  st->capturing = false;
  --device(s, st->device).capturing;
  auto *g = new Graph;
  g->device = st->device;
  g->ops = std::move(st->captured);
  st->captured.clear();
  ++s.captures;
  *graph = g;
  return kSuccess;
}

DOUBLE_EXPORT int hipGraphInstantiate(void **exec, void *graph, void **errorNode,
                                      char *log, size_t logSize) {
  (void)errorNode;
  if (!exec || !graph)
    return kInvalidValue;
  if (log && logSize)
    log[0] = 0;
  *exec = new Graph(*static_cast<Graph *>(graph));
  return kSuccess;
}

DOUBLE_EXPORT int hipGraphLaunch(void *exec, void *stream) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!exec)
    return kInvalidHandle;
  if (stream && static_cast<Stream *>(stream)->capturing)
    return kCaptureUnsupported;
  const auto *g = static_cast<Graph *>(exec);
  if (g->device != streamDevice(stream))
    return kInvalidValue;
  Device &d = device(s, g->device);
  s.lastGraphColdUs = 0.0;
  s.lastGraphKernels = 0;
  for (const Op &op : g->ops) {
    s.lastGraphColdUs += op.function ? op.baseUs * kColdFactor : op.baseUs;
    s.lastGraphKernels += op.function != nullptr;
    execute(d, op);
  }
  ++s.graphLaunches;
  return kSuccess;
}

DOUBLE_EXPORT int hipGraphExecDestroy(void *exec) {
  if (!exec)
    return kInvalidHandle;
  delete static_cast<Graph *>(exec);
  return kSuccess;
}

DOUBLE_EXPORT int hipGraphDestroy(void *graph) {
  if (!graph)
    return kInvalidHandle;
  delete static_cast<Graph *>(graph);
  return kSuccess;
}

// --- Events -----------------------------------------------------------------------

DOUBLE_EXPORT int hipEventCreate(void **event) {
  if (!event)
    return kInvalidValue;
  auto *created = new Event;
  created->device = current;
  *event = created;
  return kSuccess;
}

DOUBLE_EXPORT int hipEventDestroy(void *event) {
  if (!event)
    return kInvalidHandle;
  delete static_cast<Event *>(event);
  return kSuccess;
}

DOUBLE_EXPORT int hipEventRecord(void *event, void *stream) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!event)
    return kInvalidHandle;
  if (stream && static_cast<Stream *>(stream)->capturing)
    return kCaptureUnsupported;
  auto *e = static_cast<Event *>(event);
  const int ordinal = streamDevice(stream);
  if (e->device != ordinal)
    return kInvalidValue; // an event records on its own device's streams
  Device &d = device(s, ordinal);
  if (s.jitterPeriod > 0 && ++d.eventRecords % uint64_t(s.jitterPeriod) == 0)
    d.clockUs += s.jitterUs;
  e->recorded = true;
  e->timeUs = d.clockUs;
  return kSuccess;
}

DOUBLE_EXPORT int hipEventSynchronize(void *event) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!event)
    return kInvalidHandle;
  auto *e = static_cast<Event *>(event);
  if (capturingOn(s, e->device))
    return kCaptureUnsupported;
  return e->recorded ? kSuccess : kIllegalState;
}

DOUBLE_EXPORT int hipEventElapsedTime(float *milliseconds, void *start, void *stop) {
  if (!milliseconds || !start || !stop)
    return kInvalidValue;
  const auto *a = static_cast<Event *>(start), *b = static_cast<Event *>(stop);
  if (!a->recorded || !b->recorded || a->device != b->device)
    return kInvalidHandle;
  *milliseconds = float((b->timeUs - a->timeUs) / 1000.0);
  return kSuccess;
}
