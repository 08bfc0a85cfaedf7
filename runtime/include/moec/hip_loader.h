//===- hip_loader.h - HIP through dlopen, lazy kernel loading ---*- C++ -*-===//
//
// The runtime never links HIP: libamdhip64 is opened with dlopen and the few
// entry points it needs are resolved through one X-macro symbol table
// (MOEC_HIP_SYMBOLS). Missing library, missing symbol, no device: all are
// errors with a one-line message, never crashes. hipDeviceProp_t is never
// used (its layout changes between ROCm releases); device facts come from
// hipDeviceGetAttribute with attribute numbers that are stable from HIP 5.0
// to 7.x.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_HIP_LOADER_H
#define MOEC_HIP_LOADER_H

#include "moec/bundle.h"
#include "moec/status.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace moec::rt {

/// HIP's C types, declared here so no HIP header is needed.
namespace hip {
using Error = int;            ///< hipError_t
using Module = void *;        ///< hipModule_t
using Function = void *;      ///< hipFunction_t
using Stream = void *;        ///< hipStream_t
using Event = void *;         ///< hipEvent_t
using Graph = void *;         ///< hipGraph_t
using GraphExec = void *;     ///< hipGraphExec_t
using GraphNode = void *;     ///< hipGraphNode_t
inline constexpr Error kSuccess = 0;
inline constexpr Error kErrorNoDevice = 100;      ///< hipErrorNoDevice
inline constexpr Error kErrorInvalidDevice = 101; ///< hipErrorInvalidDevice
inline constexpr Error kErrorNoBinaryForGpu = 209; ///< hipErrorNoBinaryForGpu
/// hipDeviceAttribute_t values (same in HIP 5.x, 6.x and 7.x headers).
inline constexpr int kAttributeMaxThreadsPerBlock = 56;
inline constexpr int kAttributeMultiprocessorCount = 63;
inline constexpr int kAttributeMaxSharedMemoryPerBlock = 74;
inline constexpr int kAttributeWarpSize = 87;
/// hipMemcpyKind.
inline constexpr int kMemcpyHostToDevice = 1;
inline constexpr int kMemcpyDeviceToHost = 2;
inline constexpr int kMemcpyDeviceToDevice = 3;
/// hipStreamCaptureMode (hip_runtime_api.h: Global 0, ThreadLocal 1,
/// Relaxed 2; an enum, passed as an int).
inline constexpr int kStreamCaptureModeGlobal = 0;
/// hipIpcMemHandle_t: 64 opaque bytes, passed by value.
struct IpcMemHandle {
  char reserved[64];
};
/// hipModuleLaunchKernel `extra` markers.
inline void *const kLaunchParamBufferPointer = reinterpret_cast<void *>(1);
inline void *const kLaunchParamBufferSize = reinterpret_cast<void *>(2);
inline void *const kLaunchParamEnd = reinterpret_cast<void *>(3);
} // namespace hip

/// The symbol table: X(name, return type, parameter list). Every entry is
/// required; a library missing one is refused, naming the symbol.
#define MOEC_HIP_SYMBOLS(X)                                                    \
  X(hipInit, hip::Error, (unsigned flags))                                     \
  X(hipGetDeviceCount, hip::Error, (int *count))                               \
  X(hipSetDevice, hip::Error, (int device))                                    \
  X(hipDeviceGetAttribute, hip::Error, (int *value, int attribute, int device)) \
  X(hipModuleLoadData, hip::Error, (hip::Module * module, const void *image))  \
  X(hipModuleGetFunction, hip::Error,                                          \
    (hip::Function * function, hip::Module module, const char *name))          \
  X(hipModuleLaunchKernel, hip::Error,                                         \
    (hip::Function function, unsigned gridX, unsigned gridY, unsigned gridZ,   \
     unsigned blockX, unsigned blockY, unsigned blockZ,                        \
     unsigned sharedMemBytes, hip::Stream stream, void **kernelParams,         \
     void **extra))                                                            \
  X(hipModuleUnload, hip::Error, (hip::Module module))                         \
  X(hipGetErrorString, const char *, (hip::Error error))                       \
  X(hipDeviceSynchronize, hip::Error, ())                                      \
  X(hipMalloc, hip::Error, (void **pointer, size_t size))                      \
  X(hipFree, hip::Error, (void *pointer))                                      \
  X(hipMemcpy, hip::Error, (void *dst, const void *src, size_t size, int kind)) \
  X(hipMemsetAsync, hip::Error,                                                \
    (void *dst, int value, size_t size, hip::Stream stream))                   \
  X(hipMemcpy2DAsync, hip::Error,                                              \
    (void *dst, size_t dstPitch, const void *src, size_t srcPitch,             \
     size_t width, size_t height, int kind, hip::Stream stream))               \
  X(hipStreamSynchronize, hip::Error, (hip::Stream stream))                    \
  X(hipIpcGetMemHandle, hip::Error,                                            \
    (hip::IpcMemHandle * handle, void *pointer))                               \
  X(hipIpcOpenMemHandle, hip::Error,                                           \
    (void **pointer, hip::IpcMemHandle handle, unsigned flags))                \
  X(hipIpcCloseMemHandle, hip::Error, (void *pointer))

/// The optional table: what timing on a device needs (events, streams,
/// graph capture and replay, the device's name). Resolved after the
/// required table; a library missing any of them stays fully usable for
/// layers, and only timing is unavailable (HipLibrary::timing()).
#define MOEC_HIP_TIMING_SYMBOLS(X)                                             \
  X(hipEventCreate, hip::Error, (hip::Event * event))                          \
  X(hipEventDestroy, hip::Error, (hip::Event event))                           \
  X(hipEventRecord, hip::Error, (hip::Event event, hip::Stream stream))        \
  X(hipEventSynchronize, hip::Error, (hip::Event event))                       \
  X(hipEventElapsedTime, hip::Error,                                           \
    (float *milliseconds, hip::Event start, hip::Event stop))                  \
  X(hipStreamCreate, hip::Error, (hip::Stream * stream))                       \
  X(hipStreamDestroy, hip::Error, (hip::Stream stream))                        \
  X(hipStreamBeginCapture, hip::Error, (hip::Stream stream, int mode))         \
  X(hipStreamEndCapture, hip::Error, (hip::Stream stream, hip::Graph * graph)) \
  X(hipGraphInstantiate, hip::Error,                                           \
    (hip::GraphExec * exec, hip::Graph graph, hip::GraphNode * errorNode,      \
     char *log, size_t logSize))                                               \
  X(hipGraphLaunch, hip::Error, (hip::GraphExec exec, hip::Stream stream))     \
  X(hipGraphExecDestroy, hip::Error, (hip::GraphExec exec))                    \
  X(hipGraphDestroy, hip::Error, (hip::Graph graph))                           \
  X(hipDeviceGetName, hip::Error, (char *name, int length, int device))

/// Function pointers of the loaded HIP library.
struct HipSymbols {
#define MOEC_HIP_DECLARE_POINTER(name, ret, params) ret(*name) params = nullptr;
  MOEC_HIP_SYMBOLS(MOEC_HIP_DECLARE_POINTER)
#undef MOEC_HIP_DECLARE_POINTER
};

/// Function pointers of the optional timing table.
struct HipTimingSymbols {
#define MOEC_HIP_DECLARE_POINTER(name, ret, params) ret(*name) params = nullptr;
  MOEC_HIP_TIMING_SYMBOLS(MOEC_HIP_DECLARE_POINTER)
#undef MOEC_HIP_DECLARE_POINTER
};

/// Names of every symbol in the table, in order.
const std::vector<const char *> &hipSymbolNames();
/// Names of every symbol in the optional timing table, in order.
const std::vector<const char *> &hipTimingSymbolNames();

/// Library names tried by default: $MOEC_HIP_LIBRARY alone when set;
/// otherwise libamdhip64.so, .so.7, .so.6, .so.5, then
/// $ROCM_PATH/lib/libamdhip64.so (ROCM_PATH defaults to /opt/rocm).
std::vector<std::string> defaultHipLibraryCandidates();

/// A dlopen'ed HIP runtime with its symbol table resolved.
class HipLibrary {
public:
  /// Tries `candidates` in order; the first that opens must export every
  /// symbol. Errors, both Status::NoHipRuntime: "no HIP runtime (tried: a,
  /// b, ...)" or "<lib>: missing symbol hipModuleLaunchKernel".
  static std::unique_ptr<HipLibrary> load(const std::vector<std::string> &candidates,
                                          Error &error);
  /// load() for callers that only need the message.
  static std::unique_ptr<HipLibrary> load(const std::vector<std::string> &candidates,
                                          std::string &error);
  ~HipLibrary();
  HipLibrary(const HipLibrary &) = delete;
  HipLibrary &operator=(const HipLibrary &) = delete;

  const HipSymbols &symbols() const { return symbols_; }
  /// The timing table, or null when the library lacks some of it (then
  /// timingError() says "<lib>: missing symbol hipGraphLaunch, ...").
  const HipTimingSymbols *timing() const {
    return timingError_.empty() ? &timing_ : nullptr;
  }
  const std::string &timingError() const { return timingError_; }
  /// Whether the library exports `name` (e.g. an entry point only moec's
  /// emulated device has).
  bool exports(const char *name) const;
  const std::string &loadedFrom() const { return loadedFrom_; }
  /// "hipErrorX (N)" style text for a HIP status, through hipGetErrorString.
  std::string describe(hip::Error status) const;

private:
  HipLibrary() = default;
  void *handle_ = nullptr;
  std::string loadedFrom_;
  HipSymbols symbols_;
  HipTimingSymbols timing_;
  std::string timingError_;
};

/// An initialised HIP device (hipInit, device count, hipSetDevice) and its
/// limits.
class HipDevice {
public:
  /// Errors: "no HIP runtime" (a null library; Status::NoHipRuntime),
  /// "no device (hipInit returned 101: ...)", "no device (hipGetDeviceCount
  /// returned 100: ...)" (Status::NoDevice), "device 3 out of range (2
  /// devices)" (Status::InvalidArgument), "hipSetDevice(0) failed: ..."
  /// and the attribute queries' (Status::HipError).
  static std::unique_ptr<HipDevice> create(std::unique_ptr<HipLibrary> library,
                                           int ordinal, Error &error);
  /// create() for callers that only need the message.
  static std::unique_ptr<HipDevice> create(std::unique_ptr<HipLibrary> library,
                                           int ordinal, std::string &error);

  const HipLibrary &library() const { return *library_; }
  const HipSymbols &hipApi() const { return library_->symbols(); }
  int ordinal() const { return ordinal_; }
  int computeUnits() const { return computeUnits_; }
  int maxSharedMemoryPerBlock() const { return maxSharedMemoryPerBlock_; }
  int maxThreadsPerBlock() const { return maxThreadsPerBlock_; }
  int warpSize() const { return warpSize_; }
  /// Makes this device current on the calling thread. Its only failure is
  /// hipSetDevice's (a Status::HipError).
  bool makeCurrent(std::string &error) const;

private:
  HipDevice() = default;
  std::unique_ptr<HipLibrary> library_;
  int ordinal_ = 0;
  int computeUnits_ = 0;
  int maxSharedMemoryPerBlock_ = 0;
  int maxThreadsPerBlock_ = 0;
  int warpSize_ = 0;
};

/// One kernel argument value for launch(); its kind must match the ABI.
struct KernelArgValue {
  ArgKind kind = ArgKind::Buffer;
  union {
    const void *pointer;
    int32_t i32;
    int64_t i64;
  };
  KernelArgValue() : pointer(nullptr) {}
  static KernelArgValue buffer(const void *p) {
    KernelArgValue v;
    v.kind = ArgKind::Buffer;
    v.pointer = p;
    return v;
  }
  static KernelArgValue int32(int32_t x) {
    KernelArgValue v;
    v.kind = ArgKind::I32;
    v.i32 = x;
    return v;
  }
  static KernelArgValue int64(int64_t x) {
    KernelArgValue v;
    v.kind = ArgKind::I64;
    v.i64 = x;
    return v;
  }
};

/// The name hipModuleGetFunction expects for a manifest symbol: the kernel
/// name, i.e. the symbol without the kernel-descriptor suffix ".kd" (the
/// code-object metadata's .symbol is "name.kd"; HIP looks kernels up by name).
std::string hipFunctionName(std::string_view symbol);

/// Packs argument values into the kernarg buffer per the kernel ABI: buffers
/// are 8-byte pointers, i32 4 bytes, i64 8 bytes, each at its natural
/// alignment, in ABI order. Checks count and kinds against `kernel.abi`
/// (every failure is a Status::InvalidArgument).
bool packKernelArguments(const KernelInfo &kernel, const KernelArgValue *args,
                         size_t argCount, std::vector<uint8_t> &kernarg,
                         std::string &error);

/// The kernels of one bundle on one device. Modules are loaded lazily, one
/// per code object, straight from the bundle's mmap; each kernel's resources
/// are checked against the device limits before its first load. The bundle
/// and the device must outlive the loader.
class KernelLoader {
public:
  KernelLoader(const HipDevice &device, const Bundle &bundle);
  ~KernelLoader(); ///< hipModuleUnload of every loaded module
  KernelLoader(const KernelLoader &) = delete;
  KernelLoader &operator=(const KernelLoader &) = delete;

  /// Loads (once) the module of kernel `kernelIndex` and resolves its symbol.
  /// Status::InvalidArgument for an index out of range,
  /// Status::ResourceExceeded when checkResources refuses the kernel,
  /// Status::CorruptBundle when its code object fails its checksum (lazy
  /// verification), Status::HipError when a HIP call fails.
  bool loadKernel(uint32_t kernelIndex, Error &error);
  /// loadKernel() for callers that only need the message.
  bool loadKernel(uint32_t kernelIndex, std::string &error);
  /// Launches kernel `kernelIndex` on `stream` (nullptr: the null stream)
  /// with the manifest's workgroup size; loads it first if needed.
  /// loadKernel's statuses, Status::InvalidArgument for arguments that do
  /// not match the ABI, and launchPacked's.
  bool launch(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
              const KernelArgValue *args, size_t argCount, hip::Stream stream,
              Error &error);
  /// launch() for callers that only need the message.
  bool launch(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
              const KernelArgValue *args, size_t argCount, hip::Stream stream,
              std::string &error);

  /// launch() with the kernarg buffer already packed (packKernelArguments'
  /// layout). The kernel must have been loaded; allocation-free and
  /// lock-free, so a layer's forward can call it on its hot path.
  /// Status::InvalidArgument for a kernel not loaded or a grid dimension of
  /// 0, Status::HipError when hipModuleLaunchKernel fails.
  bool launchPacked(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
                    void *kernarg, size_t kernargSize, hip::Stream stream,
                    Error &error);
  /// launchPacked() for callers that only need the message.
  bool launchPacked(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
                    void *kernarg, size_t kernargSize, hip::Stream stream,
                    std::string &error);

  /// Checks a kernel's LDS, workgroup size and wavefront size against the
  /// device limits (done by loadKernel before the first load). Every
  /// failure is a Status::ResourceExceeded.
  bool checkResources(const KernelInfo &kernel, std::string &error) const;

  const Bundle &bundle() const { return bundle_; }
  const HipDevice &device() const { return device_; }

private:
  const HipDevice &device_;
  const Bundle &bundle_;
  std::mutex mutex_;
  std::vector<hip::Module> modules_;     ///< per code object
  /// Per kernel; an entry is written once, under the mutex, and read by
  /// launchPacked without it (the layer loads every kernel before its
  /// first forward).
  std::unique_ptr<std::atomic<hip::Function>[]> functions_;
};

} // namespace moec::rt

#endif // MOEC_HIP_LOADER_H
