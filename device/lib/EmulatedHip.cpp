//===- EmulatedHip.cpp - HIP entry points over the CPU emulator -----------===//
//
// libmoec_emulated_hip.so: the HIP calls the moec runtime makes (and the
// memory, stream, event and IPC calls a test needs), implemented over the
// kernel-IR emulator, so the runtime path C API -> HIP loader -> kernels
// runs in CI without a GPU. docs/emulator.md, "The emulated HIP device",
// states the semantics; the choices, in short:
//
// - Devices: $MOEC_EMULATED_DEVICES (default 1) gfx950 devices with the
//   chip facts of moec/target; all of them share one address space.
// - Memory: hipMalloc returns host memory with a written-shadow byte per
//   byte; it starts poisoned (0xFF, unwritten). A launch binds each pointer
//   argument to a view of its allocation: from the pointer to the next
//   argument pointer into the same allocation (or its end). Views of
//   ordinary allocations are copied into one emulator GlobalMemory (data and
//   shadow), run, and copied back; views of shared (IPC) allocations are
//   bound in place as external buffers, so a peer process sees the stores
//   while the launch runs.
// - Code: hipModuleLoadData accepts only a code object whose kernel IR was
//   registered (moecEmulatedRegisterKernelIr), and launches execute exactly
//   that IR.
// - Launches: immediate, or deferred per stream and run together at the
//   next synchronising call (peers that wait on each other).
//
// Every entry point is extern "C" and returns a HIP status; the library is
// built without exceptions, so none can escape.
//
//===----------------------------------------------------------------------===//

#include "moec/emulated_hip.h"

#include "moec/Emulator/Emulator.h"
#include "moec/hash.h"
#include "moec/target/target_info.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#define MOEC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

//===----------------------------------------------------------------------===//
// HIP's values
//===----------------------------------------------------------------------===//

/// hipError_t values, as HIP's hip_runtime_api.h numbers them (the same in
/// ROCm 5.x to 7.x; e.g. tinygrad/runtime/autogen/hip.py mirrors that
/// header): hipSuccess 0, hipErrorInvalidValue 1, hipErrorOutOfMemory 2,
/// hipErrorNoDevice 100, hipErrorInvalidDevice 101, hipErrorInvalidImage
/// 200, hipErrorNoBinaryForGpu 209, hipErrorInvalidHandle 400,
/// hipErrorNotFound 500, hipErrorLaunchFailure 719.
enum HipStatus : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kInvalidDeviceFunction = 98,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kNoBinaryForGpu = 209,
  kInvalidHandle = 400,
  kNotFound = 500,
  kLaunchFailure = 719,
  kIllegalState = 401,
  kStreamCaptureUnsupported = 900,
  kStreamCaptureInvalidated = 901,
  kStreamCaptureImplicit = 906,
  kStreamCaptureWrongThread = 908,
};

const char *statusName(int status) {
  switch (status) {
  case kSuccess: return "hipSuccess";
  case kInvalidValue: return "hipErrorInvalidValue";
  case kOutOfMemory: return "hipErrorOutOfMemory";
  case kInvalidDeviceFunction: return "hipErrorInvalidDeviceFunction";
  case kNoDevice: return "hipErrorNoDevice";
  case kInvalidDevice: return "hipErrorInvalidDevice";
  case kInvalidImage: return "hipErrorInvalidImage";
  case kNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
  case kInvalidHandle: return "hipErrorInvalidHandle";
  case kNotFound: return "hipErrorNotFound";
  case kLaunchFailure: return "hipErrorLaunchFailure";
  case kIllegalState: return "hipErrorIllegalState";
  case kStreamCaptureUnsupported: return "hipErrorStreamCaptureUnsupported";
  case kStreamCaptureInvalidated: return "hipErrorStreamCaptureInvalidated";
  case kStreamCaptureImplicit: return "hipErrorStreamCaptureImplicit";
  case kStreamCaptureWrongThread: return "hipErrorStreamCaptureWrongThread";
  }
  return "hipErrorUnknown";
}

/// hipDeviceAttribute_t values the runtime queries (hip_loader.h).
constexpr int kAttributeMaxThreadsPerBlock = 56;
constexpr int kAttributeMultiprocessorCount = 63;
constexpr int kAttributeMaxSharedMemoryPerBlock = 74;
constexpr int kAttributeWarpSize = 87;

/// hipMemcpyKind.
enum MemcpyKind {
  kHostToHost = 0,
  kHostToDevice = 1,
  kDeviceToHost = 2,
  kDeviceToDevice = 3,
  kDefault = 4
};

/// hipModuleLaunchKernel `extra` markers (HIP_LAUNCH_PARAM_*).
void *const kLaunchParamBufferPointer = reinterpret_cast<void *>(1);
void *const kLaunchParamBufferSize = reinterpret_cast<void *>(2);
void *const kLaunchParamEnd = reinterpret_cast<void *>(3);

/// HIP_IPC_HANDLE_SIZE.
constexpr size_t kIpcHandleSize = 64;

/// The chip or part every emulated device is: $MOEC_EMULATED_TARGET names it
/// as `moec compile --target` does ("mi350p": 128 CUs); unset or empty, the
/// default chip. A name moec has no facts for is reported once on stderr
/// and the default chip is used, so the device still comes up.
const moec::target::TargetInfo &chip() {
  static const moec::target::TargetInfo &emulated =
      []() -> const moec::target::TargetInfo & {
    const char *name = std::getenv("MOEC_EMULATED_TARGET");
    const std::string_view text = name ? name : "";
    if (const moec::target::TargetInfo *part =
            moec::target::lookupTargetInfoOrDefault(text))
      return *part;
    std::fprintf(stderr,
                 "moec emulated HIP: MOEC_EMULATED_TARGET=%s is not a chip "
                 "moec knows (%s); emulating the default chip\n",
                 name, moec::target::knownTargetNames().c_str());
    return *moec::target::lookupTargetInfoOrDefault("");
  }();
  return emulated;
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

/// One hipMalloc: the bytes the kernels see and one written flag per byte,
/// in one mapping (the data's pages, then the shadow's), so that IPC can
/// share both with another process.
struct Allocation {
  uint8_t *data = nullptr;
  uint8_t *written = nullptr;
  size_t size = 0;
  int device = 0;
  uint64_t serial = 0;
  /// The whole mapping from `data`: data and shadow, each page-rounded.
  size_t mappedBytes = 0;
  /// The memfd behind the mapping once an IPC handle was taken, else -1.
  int sharedFd = -1;
  /// Another process's allocation, mapped by hipIpcOpenMemHandle.
  bool imported = false;

  /// Memory another process may map: exported (an IPC handle was taken)
  /// or imported.
  bool shared() const { return sharedFd >= 0 || imported; }
};

size_t pageRounded(size_t bytes) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

/// Maps `size` bytes of data and their shadow (anonymous: zero, i.e.
/// unwritten). False when the memory is not there.
bool mapAllocation(size_t size, Allocation &allocation) {
  const size_t dataBytes = pageRounded(size);
  const size_t total = dataBytes + pageRounded(size);
  void *base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    return false;
  allocation.data = static_cast<uint8_t *>(base);
  allocation.written = allocation.data + dataBytes;
  allocation.size = size;
  allocation.mappedBytes = total;
  return true;
}

void unmapAllocation(Allocation &allocation) {
  ::munmap(allocation.data, allocation.mappedBytes);
  if (allocation.sharedFd >= 0)
    ::close(allocation.sharedFd);
  allocation.sharedFd = -1;
}

/// How one kernel argument travels in the kernarg buffer.
struct ArgSlot {
  bool isPointer = false;
  unsigned size = 0;
  unsigned offset = 0;
};

struct Module;

/// A kernel of a loaded module.
struct Function {
  Module *module = nullptr;
  mlir::gpu::GPUFuncOp func;
  std::string name;
  std::vector<ArgSlot> slots;
  /// Bytes the kernarg layout needs.
  size_t kernargSize = 0;
};

/// A loaded code object: the IR registered for it, parsed.
struct Module {
  mlir::OwningOpRef<mlir::ModuleOp> ir;
  int device = 0;
  std::map<std::string, std::unique_ptr<Function>> functions;
};

struct Graph;

/// hipStreamCaptureStatus: None 0, Active 1, Invalidated 2.
enum class CaptureStatus { None, Active, Invalidated };

/// A stream: the device it belongs to, and its capture when one is under
/// way (hipStreamBeginCapture .. hipStreamEndCapture). The null stream of
/// device d is the key (d, nullptr); it cannot capture.
struct Stream {
  int device = 0;
  CaptureStatus capture = CaptureStatus::None;
  int captureMode = 0; ///< hipStreamCaptureMode: Global 0, ThreadLocal 1, Relaxed 2
  std::thread::id captureThread;
  Graph *graph = nullptr; ///< what the capture recorded so far
};

struct Event {
  bool recorded = false;
  std::chrono::steady_clock::time_point time;
};

/// One argument of a launch, resolved at launch time: a pointer into an
/// allocation, or an integer.
struct BoundArg {
  bool isPointer = false;
  uintptr_t allocation = 0; ///< the allocation's base address
  size_t offset = 0;
  int64_t scalar = 0;
};

/// A launch waiting to run (or running now).
struct PendingLaunch {
  Function *function = nullptr;
  std::array<int64_t, 3> grid{{1, 1, 1}};
  std::array<int64_t, 3> block{{1, 1, 1}};
  std::vector<BoundArg> args;
  int device = 0;
};

/// Streams are keyed by (device, handle); launches of one stream run in
/// order.
using StreamKey = std::pair<int, void *>;

/// Per-thread state, as HIP keeps it: the current device and the last
/// error's message.
thread_local int currentDevice = 0;
thread_local std::string lastErrorMessage;
thread_local int lastErrorStatus = kSuccess;
thread_local std::string describedError;

int fail(int status, std::string message) {
  lastErrorStatus = status;
  lastErrorMessage = std::move(message);
  return status;
}

int succeed() { return kSuccess; }

/// The ELF image's extent from its headers (the code object's size, which
/// hipModuleLoadData is not given): the end of the section and program
/// header tables and of every section with file contents. 0 for anything
/// that is not a 64-bit little-endian ELF.
size_t elfExtent(const uint8_t *image, size_t limit) {
  constexpr size_t kHeaderSize = 64;
  if (!image || limit < kHeaderSize || std::memcmp(image, "\x7f" "ELF", 4) != 0 ||
      image[4] != 2 /*ELFCLASS64*/ || image[5] != 1 /*ELFDATA2LSB*/)
    return 0;
  auto read = [&](size_t at, size_t bytes) -> uint64_t {
    uint64_t value = 0;
    std::memcpy(&value, image + at, bytes);
    return value;
  };
  const uint64_t phoff = read(32, 8), shoff = read(40, 8);
  const uint64_t phentsize = read(54, 2), phnum = read(56, 2);
  const uint64_t shentsize = read(58, 2), shnum = read(60, 2);
  uint64_t extent = kHeaderSize;
  extent = std::max(extent, phoff + phnum * phentsize);
  extent = std::max(extent, shoff + shnum * shentsize);
  if (extent > limit)
    return 0;
  for (uint64_t i = 0; i < shnum; ++i) {
    const size_t header = size_t(shoff + i * shentsize);
    if (shentsize < 64 || header + 64 > limit)
      return 0;
    constexpr uint32_t kNoBits = 8;
    if (uint32_t(read(header + 4, 4)) == kNoBits)
      continue;
    extent = std::max(extent, read(header + 24, 8) + read(header + 32, 8));
  }
  for (uint64_t i = 0; i < phnum; ++i) {
    const size_t header = size_t(phoff + i * phentsize);
    if (phentsize < 56 || header + 56 > limit)
      return 0;
    extent = std::max(extent, read(header + 8, 8) + read(header + 32, 8));
  }
  return extent <= limit ? size_t(extent) : 0;
}

/// Everything the library holds. One lock: the emulator runs under it, so
/// calls from several threads (one per EP rank) serialise.
class EmulatedDevices {
public:
  static EmulatedDevices &get() {
    // Never destroyed: HIP calls may come from other libraries' destructors.
    static EmulatedDevices *devices = new EmulatedDevices();
    return *devices;
  }

  std::mutex mutex;
  int deviceCount = 1;
  bool deferLaunches = false;

  /// Allocations by base address.
  std::map<uintptr_t, Allocation> allocations;
  uint64_t nextSerial = 0;

  /// Registered kernel IR by XXH64 of the code object's ELF image.
  std::unordered_map<uint64_t, std::vector<uint8_t>> irByCodeObject;

  std::set<Module *> modules;
  std::set<Function *> functions;
  std::set<Stream *> streams;
  std::set<Event *> events;

  /// Deferred launches, per stream, in launch order; streams in the order
  /// they first got a launch.
  std::map<StreamKey, std::deque<PendingLaunch>> pending;
  std::vector<StreamKey> pendingOrder;

  mlir::MLIRContext &context() {
    if (!context_) {
      mlir::DialectRegistry registry;
      registry.insert<mlir::amdgpu::AMDGPUDialect, mlir::arith::ArithDialect,
                      mlir::cf::ControlFlowDialect, mlir::func::FuncDialect,
                      mlir::gpu::GPUDialect, mlir::LLVM::LLVMDialect,
                      mlir::math::MathDialect, mlir::memref::MemRefDialect,
                      mlir::ROCDL::ROCDLDialect, mlir::scf::SCFDialect,
                      mlir::vector::VectorDialect>();
      // No thread pool: the emulator is single-threaded and a HIP library
      // should not start threads the process did not ask for.
      context_ = std::make_unique<mlir::MLIRContext>(
          registry, mlir::MLIRContext::Threading::DISABLED);
      context_->loadAllAvailableDialects();
    }
    return *context_;
  }

  bool validDevice(int device) const {
    return device >= 0 && device < deviceCount;
  }

  /// The allocation holding `pointer`, or nullptr.
  Allocation *findAllocation(const void *pointer) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
    auto it = allocations.upper_bound(address);
    if (it == allocations.begin())
      return nullptr;
    --it;
    Allocation &allocation = it->second;
    if (address - it->first < allocation.size)
      return &allocation;
    return nullptr;
  }

  /// Runs every pending launch: round k takes the k-th pending launch of
  /// every stream, and all of a round's launches run at once in one
  /// emulator run (so launches on different devices that wait on each
  /// other make progress). Stops at the first failing round and drops the
  /// launches after it.
  int flush();

  /// Runs `launches` together in one emulator run over views of the
  /// allocations they use, and copies the views back.
  int runTogether(std::vector<PendingLaunch> &launches);

private:
  EmulatedDevices() {
    if (const char *text = std::getenv("MOEC_EMULATED_DEVICES");
        text && *text) {
      const long count = std::strtol(text, nullptr, 10);
      deviceCount = count >= 1 && count <= 64 ? int(count) : 0;
    }
    deferLaunches = deviceCount > 1;
    if (const char *text = std::getenv("MOEC_EMULATED_DEFER_LAUNCHES");
        text && *text)
      deferLaunches = std::strcmp(text, "0") != 0;
  }

  std::unique_ptr<mlir::MLIRContext> context_;
};

int EmulatedDevices::flush() {
  while (!pendingOrder.empty()) {
    std::vector<PendingLaunch> round;
    std::vector<StreamKey> remaining;
    for (const StreamKey &key : pendingOrder) {
      std::deque<PendingLaunch> &queue = pending[key];
      round.push_back(std::move(queue.front()));
      queue.pop_front();
      if (queue.empty())
        pending.erase(key);
      else
        remaining.push_back(key);
    }
    pendingOrder = std::move(remaining);
    const int status = runTogether(round);
    if (status != kSuccess) {
      size_t dropped = 0;
      for (const auto &entry : pending)
        dropped += entry.second.size();
      pending.clear();
      pendingOrder.clear();
      if (dropped)
        lastErrorMessage += " (" + std::to_string(dropped) +
                            " later pending launches dropped)";
      return status;
    }
  }
  return kSuccess;
}

int EmulatedDevices::runTogether(std::vector<PendingLaunch> &launches) {
  // The views: per allocation, every offset an argument points at. A view
  // runs to the next such offset or to the allocation's end, so views never
  // overlap and copying them back cannot clobber each other.
  std::map<uintptr_t, std::set<size_t>> offsets;
  for (const PendingLaunch &launch : launches)
    for (const BoundArg &arg : launch.args)
      if (arg.isPointer) {
        if (!allocations.count(arg.allocation))
          return fail(kLaunchFailure,
                      launch.function->name +
                          ": an argument's allocation was freed before the "
                          "launch ran");
        offsets[arg.allocation].insert(arg.offset);
      }
  struct View {
    Allocation *allocation;
    size_t offset, size;
    unsigned buffer;
  };
  moec::emu::GlobalMemory memory;
  std::vector<View> views;
  std::map<std::pair<uintptr_t, size_t>, unsigned> bufferOf;
  for (const auto &[base, starts] : offsets) {
    Allocation &allocation = allocations.at(base);
    for (auto it = starts.begin(); it != starts.end(); ++it) {
      auto next = std::next(it);
      const size_t end = next == starts.end() ? allocation.size : *next;
      const size_t size = end - *it;
      char name[96];
      std::snprintf(name, sizeof(name), "device %d allocation #%llu +%zu",
                    allocation.device,
                    static_cast<unsigned long long>(allocation.serial), *it);
      // Shared memory is bound in place (another process may write it
      // while the launch runs, and must see this launch's stores); other
      // allocations through a private copy.
      unsigned id;
      if (allocation.shared()) {
        id = memory.addExternalBuffer(name, size, allocation.data + *it,
                                      allocation.written + *it);
      } else {
        id = memory.addBuffer(name, size);
        std::memcpy(memory.data(id), allocation.data + *it, size);
        std::memcpy(memory.written(id), allocation.written + *it, size);
      }
      views.push_back({&allocation, *it, size, id});
      bufferOf[{base, *it}] = id;
    }
  }

  std::vector<moec::emu::KernelLaunch> kernelLaunches;
  for (const PendingLaunch &launch : launches) {
    moec::emu::KernelLaunch kernelLaunch;
    kernelLaunch.func = launch.function->func;
    kernelLaunch.launch.grid = launch.grid;
    kernelLaunch.launch.block = launch.block;
    // Every workgroup resident unless $MOEC_EMULATED_RESIDENT_WORKGROUPS
    // says otherwise: the emulated chip never runs out of residency (no
    // register counts reach it to model that), so it never invents a
    // deadlock; a small cap emulates the hazard.
    const int64_t workgroups = launch.grid[0] * launch.grid[1] * launch.grid[2];
    unsigned cap = unsigned(std::min<int64_t>(workgroups, 1 << 20));
    if (const char *text = std::getenv("MOEC_EMULATED_RESIDENT_WORKGROUPS");
        text && *text && std::atol(text) > 0)
      cap = unsigned(std::min<long>(std::atol(text), long(cap)));
    kernelLaunch.launch.maxResidentWorkgroups = std::max(cap, 1u);
    kernelLaunch.label = "device " + std::to_string(launch.device);
    for (const BoundArg &arg : launch.args)
      kernelLaunch.args.push_back(
          arg.isPointer ? moec::emu::KernelArgValue::makeBuffer(
                              bufferOf.at({arg.allocation, arg.offset}))
                        : moec::emu::KernelArgValue::makeScalar(arg.scalar));
    kernelLaunches.push_back(std::move(kernelLaunch));
  }

  std::string error;
  mlir::FailureOr<moec::emu::RunResult> result =
      moec::emu::runKernels(kernelLaunches, memory, error);
  // What the kernels wrote reaches device memory even when the run failed,
  // as a faulting kernel's earlier stores do on hardware.
  for (const View &view : views) {
    if (memory.isExternal(view.buffer))
      continue;
    std::memcpy(view.allocation->data + view.offset, memory.data(view.buffer),
                view.size);
    std::memcpy(view.allocation->written + view.offset,
                memory.written(view.buffer), view.size);
  }
  if (mlir::failed(result))
    return fail(kLaunchFailure, error);
  if (result->totalFindings() > 0) {
    std::string message = std::to_string(result->totalFindings()) +
                          " emulator finding(s)";
    size_t shown = 0;
    for (const moec::emu::Finding &finding : result->findings) {
      if (shown++ == 4) {
        message += "; ...";
        break;
      }
      message += "; " + finding.str();
    }
    return fail(kLaunchFailure, message);
  }
  return succeed();
}

/// The kernarg layout of `func` (docs/bundle-format.md, "Kernel argument
/// layout"): memrefs are 8-byte pointers, integers 4 or 8 bytes, each at
/// its natural alignment.
bool layoutArguments(Function &function, std::string &error) {
  size_t offset = 0;
  unsigned index = 0;
  for (mlir::Type type : function.func.getFunctionType().getInputs()) {
    ArgSlot slot;
    if (mlir::isa<mlir::MemRefType>(type)) {
      slot.isPointer = true;
      slot.size = 8;
    } else if (auto integer = mlir::dyn_cast<mlir::IntegerType>(type);
               integer && (integer.getWidth() == 32 || integer.getWidth() == 64)) {
      slot.size = integer.getWidth() / 8;
    } else if (mlir::isa<mlir::IndexType>(type)) {
      slot.size = 8;
    } else {
      error = function.name + ": argument " + std::to_string(index) +
              " has a type the kernarg layout does not define";
      return false;
    }
    offset = (offset + slot.size - 1) / slot.size * slot.size;
    slot.offset = unsigned(offset);
    offset += slot.size;
    function.slots.push_back(slot);
    ++index;
  }
  function.kernargSize = offset;
  return true;
}


//===----------------------------------------------------------------------===//
// Stream capture and graphs
//===----------------------------------------------------------------------===//
//
// The rules are HIP's (ROCm clr, hipamd/src/hip_internal.hpp:
// CHECK_STREAM_CAPTURE_SUPPORTED, CHECK_SUPPORTED_DURING_CAPTURE,
// CHECK_STREAM_CAPTURING, STREAM_CAPTURE; hip_runtime_api.h's hipError_t):
// - launches and async copies / fills on a capturing stream are recorded,
//   not run; on a capture already invalidated they fail with
//   hipErrorStreamCaptureInvalidated;
// - hipMalloc while a Global capture (or this thread's ThreadLocal one) is
//   under way fails with hipErrorStreamCaptureUnsupported and invalidates
//   those captures (Relaxed allows it);
// - synchronous copies and fills fail with hipErrorStreamCaptureImplicit,
//   device or capturing-stream synchronisation with
//   hipErrorStreamCaptureUnsupported, work on the legacy null stream with
//   hipErrorStreamCaptureImplicit; each invalidates every capture;
// - hipStreamEndCapture of an invalidated capture returns no graph and
//   hipErrorStreamCaptureInvalidated.
// A replay runs the recorded work in order on the launch stream, reading
// the buffers' contents at that time (kernel arguments are the values
// captured, as in a kernel node).

/// One piece of recorded work.
struct GraphOp {
  enum class Kind { Launch, Memset, Copy2D } kind = Kind::Launch;
  PendingLaunch launch;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t dstPitch = 0, srcPitch = 0, width = 0, height = 0;
  int value = 0, copyKind = 0;
};

/// A captured graph, and an instantiated one (a copy of its work).
struct Graph {
  std::vector<GraphOp> ops;
};
struct GraphExec {
  std::vector<GraphOp> ops;
};

/// The graphs and executable graphs alive, guarded by the devices' mutex.
struct GraphRegistry {
  std::set<Graph *> graphs;
  std::set<GraphExec *> execs;
  static GraphRegistry &get() {
    static GraphRegistry *registry = new GraphRegistry();
    return *registry;
  }
};

constexpr int kCaptureModeGlobal = 0, kCaptureModeThreadLocal = 1,
              kCaptureModeRelaxed = 2;

/// `stream` when it is a stream under capture (active or invalidated).
Stream *capturingStream(EmulatedDevices &devices, void *stream) {
  auto *handle = static_cast<Stream *>(stream);
  if (!stream || !devices.streams.count(handle) ||
      handle->capture == CaptureStatus::None)
    return nullptr;
  return handle;
}

bool anyCapture(EmulatedDevices &devices) {
  for (Stream *stream : devices.streams)
    if (stream->capture != CaptureStatus::None)
      return true;
  return false;
}

/// Invalidates every capture under way and fails with `status`.
int invalidateCaptures(EmulatedDevices &devices, int status,
                       const std::string &message) {
  for (Stream *stream : devices.streams)
    if (stream->capture == CaptureStatus::Active)
      stream->capture = CaptureStatus::Invalidated;
  return fail(status, message + " during a stream capture (the capture is "
                                "invalidated)");
}

/// hipMalloc's rule: refused while a Global capture, or a ThreadLocal one
/// of this thread, is under way; those captures are invalidated.
int refuseAllocationDuringCapture(EmulatedDevices &devices, const char *call) {
  bool refused = false;
  for (Stream *stream : devices.streams) {
    if (stream->capture == CaptureStatus::None ||
        stream->captureMode == kCaptureModeRelaxed ||
        (stream->captureMode == kCaptureModeThreadLocal &&
         stream->captureThread != std::this_thread::get_id()))
      continue;
    refused = true;
    if (stream->capture == CaptureStatus::Active)
      stream->capture = CaptureStatus::Invalidated;
  }
  return refused ? fail(kStreamCaptureUnsupported,
                        std::string(call) + " during a stream capture (the "
                                            "capture is invalidated)")
                 : kSuccess;
}

/// Work on the legacy null stream synchronises with every stream, so it
/// is refused (and invalidates them) while any stream captures.
int refuseLegacyStreamDuringCapture(EmulatedDevices &devices, void *stream,
                                    const std::string &call) {
  if (stream || !anyCapture(devices))
    return kSuccess;
  return invalidateCaptures(devices, kStreamCaptureImplicit,
                            call + " on the null stream");
}

/// Records `op` in `stream`'s capture: hipSuccess, or
/// hipErrorStreamCaptureInvalidated for a capture already invalidated.
int record(Stream &stream, GraphOp op, const std::string &call) {
  if (stream.capture == CaptureStatus::Invalidated)
    return fail(kStreamCaptureInvalidated,
                call + ": the stream's capture was invalidated by an earlier "
                       "call");
  stream.graph->ops.push_back(std::move(op));
  return kSuccess;
}

/// A copy of `size` bytes made now, after every pending launch (the lock
/// is held).
int copyNow(EmulatedDevices &devices, void *dst, const void *src, size_t size,
            int kind, const char *call);
/// A fill made now, after every pending launch (the lock is held).
int memsetNow(EmulatedDevices &devices, void *dst, int value, size_t size,
              const char *call);

/// A 2-D copy made now, row by row.
int copy2DNow(EmulatedDevices &devices, const GraphOp &op, const char *call) {
  if (op.height == 0 || op.width == 0)
    return kSuccess;
  if (op.width > op.dstPitch || op.width > op.srcPitch)
    return fail(kInvalidValue, std::string(call) + ": width " +
                                   std::to_string(op.width) + " above a pitch");
  for (size_t row = 0; row < op.height; ++row)
    if (int status = copyNow(
            devices, static_cast<uint8_t *>(op.dst) + row * op.dstPitch,
            static_cast<const uint8_t *>(op.src) + row * op.srcPitch, op.width,
            op.copyKind, call);
        status != kSuccess)
      return status;
  return kSuccess;
}

/// Runs `launch` now or queues it on `stream`, as the launch mode says.
int submitLaunch(EmulatedDevices &devices, PendingLaunch launch, void *stream,
                 const std::string &where) {
  if (!devices.deferLaunches) {
    // In stream order: launches deferred before the mode changed go first.
    if (int status = devices.flush(); status != kSuccess)
      return status;
    std::vector<PendingLaunch> alone;
    alone.push_back(std::move(launch));
    const int status = devices.runTogether(alone);
    if (status != kSuccess)
      lastErrorMessage = where + lastErrorMessage;
    return status;
  }
  const StreamKey key{launch.device, stream};
  std::deque<PendingLaunch> &queue = devices.pending[key];
  if (queue.empty())
    devices.pendingOrder.push_back(key);
  queue.push_back(std::move(launch));
  return kSuccess;
}

/// Replays `exec`'s work on `stream`, in order; stops at the first failure.
int replay(EmulatedDevices &devices, const GraphExec &exec, void *stream) {
  for (const GraphOp &op : exec.ops) {
    int status = kSuccess;
    switch (op.kind) {
    case GraphOp::Kind::Launch:
      status = submitLaunch(devices, op.launch, stream,
                            "hipGraphLaunch(" + op.launch.function->name + "): ");
      break;
    case GraphOp::Kind::Memset:
      status = memsetNow(devices, op.dst, op.value, op.width, "hipGraphLaunch");
      break;
    case GraphOp::Kind::Copy2D:
      status = copy2DNow(devices, op, "hipGraphLaunch");
      break;
    }
    if (status != kSuccess)
      return status;
  }
  return kSuccess;
}
} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

using Guard = std::lock_guard<std::mutex>;

MOEC_EXPORT const char *moecEmulatedLastError(void) {
  return lastErrorMessage.c_str();
}

MOEC_EXPORT int moecEmulatedSetDeferredLaunches(int deferred) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  const int status = devices.flush();
  devices.deferLaunches = deferred != 0;
  return status;
}

MOEC_EXPORT int moecEmulatedRegisterKernelIr(const void *codeObject,
                                             size_t size, const void *ir,
                                             size_t irSize) {
  if (!codeObject || !ir || irSize == 0)
    return fail(kInvalidValue, "moecEmulatedRegisterKernelIr: no code object "
                               "or no IR given");
  const size_t extent = elfExtent(static_cast<const uint8_t *>(codeObject), size);
  if (extent == 0)
    return fail(kInvalidImage, "moecEmulatedRegisterKernelIr: the code object "
                               "is not a 64-bit ELF image within its " +
                                   std::to_string(size) + " bytes");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  const uint8_t *bytes = static_cast<const uint8_t *>(ir);
  devices.irByCodeObject[moec::rt::xxh64(codeObject, extent)].assign(
      bytes, bytes + irSize);
  return succeed();
}

MOEC_EXPORT int hipInit(unsigned flags) {
  if (flags != 0)
    return fail(kInvalidValue, "hipInit: flags must be 0");
  if (EmulatedDevices::get().deviceCount == 0)
    return fail(kNoDevice, "MOEC_EMULATED_DEVICES is not a count in [1, 64]");
  return succeed();
}

MOEC_EXPORT int hipGetDeviceCount(int *count) {
  if (!count)
    return fail(kInvalidValue, "hipGetDeviceCount: null count");
  *count = EmulatedDevices::get().deviceCount;
  return *count > 0 ? succeed()
                    : fail(kNoDevice,
                           "MOEC_EMULATED_DEVICES is not a count in [1, 64]");
}

MOEC_EXPORT int hipSetDevice(int device) {
  if (!EmulatedDevices::get().validDevice(device))
    return fail(kInvalidDevice, "hipSetDevice: no device " +
                                    std::to_string(device));
  currentDevice = device;
  return succeed();
}

MOEC_EXPORT int hipGetDevice(int *device) {
  if (!device)
    return fail(kInvalidValue, "hipGetDevice: null device");
  *device = currentDevice;
  return succeed();
}

MOEC_EXPORT int hipDeviceGetAttribute(int *value, int attribute, int device) {
  if (!value)
    return fail(kInvalidValue, "hipDeviceGetAttribute: null value");
  if (!EmulatedDevices::get().validDevice(device))
    return fail(kInvalidDevice, "hipDeviceGetAttribute: no device " +
                                    std::to_string(device));
  switch (attribute) {
  case kAttributeMaxThreadsPerBlock:
    *value = int(chip().maxWorkgroupSize);
    return succeed();
  case kAttributeMultiprocessorCount:
    *value = int(chip().computeUnits);
    return succeed();
  case kAttributeMaxSharedMemoryPerBlock:
    *value = int(chip().ldsBytesPerCu);
    return succeed();
  case kAttributeWarpSize:
    *value = int(chip().wavefrontSize);
    return succeed();
  }
  return fail(kInvalidValue, "hipDeviceGetAttribute: attribute " +
                                 std::to_string(attribute) +
                                 " is not emulated");
}

MOEC_EXPORT const char *hipGetErrorString(int error) {
  // The last failure's message travels with its status: the runtime prints
  // hipGetErrorString(status), so the reason (a finding, a refused code
  // object) reaches moec_last_error_message.
  if (error != kSuccess && error == lastErrorStatus && !lastErrorMessage.empty()) {
    describedError = std::string(statusName(error)) + ": " + lastErrorMessage;
    return describedError.c_str();
  }
  return statusName(error);
}

MOEC_EXPORT const char *hipGetErrorName(int error) { return statusName(error); }

MOEC_EXPORT int hipDeviceSynchronize(void) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (anyCapture(devices))
    return invalidateCaptures(devices, kStreamCaptureUnsupported,
                              "hipDeviceSynchronize");
  return devices.flush();
}

MOEC_EXPORT int hipMalloc(void **pointer, size_t size) {
  if (!pointer)
    return fail(kInvalidValue, "hipMalloc: null result pointer");
  *pointer = nullptr;
  {
    EmulatedDevices &devices = EmulatedDevices::get();
    Guard guard(devices.mutex);
    if (int status = refuseAllocationDuringCapture(devices, "hipMalloc"))
      return status;
  }
  if (size == 0)
    return succeed();
  // Page-aligned (HIP's allocator gives at least 256 bytes).
  Allocation allocation;
  if (!mapAllocation(size, allocation))
    return fail(kOutOfMemory, "hipMalloc: " + std::to_string(size) +
                                  " bytes and their shadow do not fit in "
                                  "host memory");
  // Poisoned: unwritten, and 0xFF so a value nothing stored reads as NaN.
  std::memset(allocation.data, 0xFF, size);
  void *data = allocation.data;
  allocation.device = currentDevice;
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  allocation.serial = devices.nextSerial++;
  devices.allocations[reinterpret_cast<uintptr_t>(data)] = allocation;
  *pointer = data;
  return succeed();
}

MOEC_EXPORT int hipFree(void *pointer) {
  if (!pointer)
    return succeed();
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  // hipFree synchronises: pending launches may still use the memory.
  const int status = devices.flush();
  auto it = devices.allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == devices.allocations.end())
    return fail(kInvalidValue, "hipFree: not the start of an allocation");
  if (it->second.imported)
    return fail(kInvalidValue, "hipFree: another process's memory opened by "
                               "hipIpcOpenMemHandle (close it with "
                               "hipIpcCloseMemHandle)");
  unmapAllocation(it->second);
  devices.allocations.erase(it);
  return status;
}

namespace {

/// A device range [pointer, pointer + size) inside one allocation.
bool deviceRange(EmulatedDevices &devices, const void *pointer, size_t size,
                 Allocation *&allocation, size_t &offset) {
  allocation = devices.findAllocation(pointer);
  if (!allocation)
    return false;
  offset = reinterpret_cast<uintptr_t>(pointer) -
           reinterpret_cast<uintptr_t>(allocation->data);
  return size <= allocation->size - offset;
}

} // namespace

MOEC_EXPORT int hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (anyCapture(devices))
    return invalidateCaptures(devices, kStreamCaptureImplicit, "hipMemcpy");
  return copyNow(devices, dst, src, size, kind, "hipMemcpy");
}

namespace {

int copyNow(EmulatedDevices &devices, void *dst, const void *src, size_t size,
            int kind, const char *call) {
  const std::string name = call;
  if (size == 0)
    return succeed();
  if (!dst || !src)
    return fail(kInvalidValue, name + ": null pointer");
  // A blocking copy waits for the device's work.
  if (int status = devices.flush(); status != kSuccess)
    return status;
  Allocation *dstAllocation = nullptr, *srcAllocation = nullptr;
  size_t dstOffset = 0, srcOffset = 0;
  const bool dstDevice = devices.findAllocation(dst) != nullptr;
  const bool srcDevice = devices.findAllocation(src) != nullptr;
  if (dstDevice && !deviceRange(devices, dst, size, dstAllocation, dstOffset))
    return fail(kInvalidValue, name + ": " + std::to_string(size) +
                                   " bytes run past the destination allocation");
  if (srcDevice && !deviceRange(devices, src, size, srcAllocation, srcOffset))
    return fail(kInvalidValue, name + ": " + std::to_string(size) +
                                   " bytes run past the source allocation");
  const bool wantDstDevice = kind == kHostToDevice || kind == kDeviceToDevice;
  const bool wantSrcDevice = kind == kDeviceToHost || kind == kDeviceToDevice;
  if (kind < kHostToHost || kind > kDefault ||
      (kind != kDefault &&
       (dstDevice != wantDstDevice || srcDevice != wantSrcDevice)))
    return fail(kInvalidValue,
                name + ": kind " + std::to_string(kind) +
                    " does not match the pointers (destination " +
                    (dstDevice ? "device" : "host") + ", source " +
                    (srcDevice ? "device" : "host") + ")");
  std::memmove(dst, src, size);
  if (dstAllocation) {
    uint8_t *shadow = dstAllocation->written + dstOffset;
    if (srcAllocation)
      std::memmove(shadow, srcAllocation->written + srcOffset, size);
    else
      std::memset(shadow, 1, size);
  }
  return succeed();
}

int memsetNow(EmulatedDevices &devices, void *dst, int value, size_t size,
              const char *call) {
  if (size == 0)
    return succeed();
  if (int status = devices.flush(); status != kSuccess)
    return status;
  Allocation *allocation = nullptr;
  size_t offset = 0;
  if (!deviceRange(devices, dst, size, allocation, offset))
    return fail(kInvalidValue, std::string(call) + ": the range is not inside "
                                                   "one device allocation");
  std::memset(allocation->data + offset, value, size);
  std::memset(allocation->written + offset, 1, size);
  return succeed();
}

/// A stream-ordered copy or fill: recorded on a capturing stream, else
/// made now.
int asyncOp(GraphOp op, void *stream, const char *call) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (stream && !devices.streams.count(static_cast<Stream *>(stream)))
    return fail(kInvalidHandle, std::string(call) + ": unknown stream");
  if (Stream *capturing = capturingStream(devices, stream))
    return record(*capturing, std::move(op), call);
  if (int status = refuseLegacyStreamDuringCapture(devices, stream, call))
    return status;
  return op.kind == GraphOp::Kind::Memset
             ? memsetNow(devices, op.dst, op.value, op.width, call)
             : copy2DNow(devices, op, call);
}

} // namespace

MOEC_EXPORT int hipMemset(void *dst, int value, size_t size) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (anyCapture(devices))
    return invalidateCaptures(devices, kStreamCaptureImplicit, "hipMemset");
  return memsetNow(devices, dst, value, size, "hipMemset");
}

// Stream-ordered copies and fills run when they are made, after every
// pending launch (a synchronising point in deferred mode): the layer only
// issues them on unfused paths, where no launch waits for a peer. On a
// capturing stream they are recorded.
MOEC_EXPORT int hipMemsetAsync(void *dst, int value, size_t size,
                               void *stream) {
  GraphOp op;
  op.kind = GraphOp::Kind::Memset;
  op.dst = dst;
  op.value = value;
  op.width = size;
  return asyncOp(std::move(op), stream, "hipMemsetAsync");
}

MOEC_EXPORT int hipMemcpyAsync(void *dst, const void *src, size_t size,
                               int kind, void *stream) {
  GraphOp op;
  op.kind = GraphOp::Kind::Copy2D;
  op.dst = dst;
  op.src = src;
  op.dstPitch = op.srcPitch = op.width = size;
  op.height = 1;
  op.copyKind = kind;
  return asyncOp(std::move(op), stream, "hipMemcpyAsync");
}

MOEC_EXPORT int hipMemcpy2DAsync(void *dst, size_t dstPitch, const void *src,
                                 size_t srcPitch, size_t width, size_t height,
                                 int kind, void *stream) {
  GraphOp op;
  op.kind = GraphOp::Kind::Copy2D;
  op.dst = dst;
  op.src = src;
  op.dstPitch = dstPitch;
  op.srcPitch = srcPitch;
  op.width = width;
  op.height = height;
  op.copyKind = kind;
  return asyncOp(std::move(op), stream, "hipMemcpy2DAsync");
}

MOEC_EXPORT int hipStreamCreate(void **stream) {
  if (!stream)
    return fail(kInvalidValue, "hipStreamCreate: null result pointer");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  Stream *created = new Stream{currentDevice};
  devices.streams.insert(created);
  *stream = created;
  return succeed();
}

MOEC_EXPORT int hipStreamSynchronize(void *stream) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (stream && !devices.streams.count(static_cast<Stream *>(stream)))
    return fail(kInvalidHandle, "hipStreamSynchronize: unknown stream");
  if (capturingStream(devices, stream) || (!stream && anyCapture(devices)))
    return invalidateCaptures(devices, kStreamCaptureUnsupported,
                              "hipStreamSynchronize");
  // All devices' pending launches: this stream's may wait on peers'.
  return devices.flush();
}

MOEC_EXPORT int hipStreamDestroy(void *stream) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Stream *>(stream);
  if (!devices.streams.count(handle))
    return fail(kInvalidHandle, "hipStreamDestroy: unknown stream");
  const int status = devices.flush();
  devices.streams.erase(handle);
  delete handle->graph; // a capture never ended
  delete handle;
  return status;
}

MOEC_EXPORT int hipEventCreate(void **event) {
  if (!event)
    return fail(kInvalidValue, "hipEventCreate: null result pointer");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  Event *created = new Event();
  devices.events.insert(created);
  *event = created;
  return succeed();
}

MOEC_EXPORT int hipEventRecord(void *event, void * /*stream*/) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Event *>(event);
  if (!devices.events.count(handle))
    return fail(kInvalidHandle, "hipEventRecord: unknown event");
  // The host time of the call: recording must not run deferred launches
  // (peers launched later would be missing), so with deferred launches
  // event times do not bracket kernel execution.
  handle->recorded = true;
  handle->time = std::chrono::steady_clock::now();
  return succeed();
}

MOEC_EXPORT int hipEventSynchronize(void *event) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (!devices.events.count(static_cast<Event *>(event)))
    return fail(kInvalidHandle, "hipEventSynchronize: unknown event");
  return devices.flush();
}

MOEC_EXPORT int hipEventElapsedTime(float *milliseconds, void *start,
                                    void *stop) {
  if (!milliseconds)
    return fail(kInvalidValue, "hipEventElapsedTime: null result pointer");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *first = static_cast<Event *>(start);
  auto *second = static_cast<Event *>(stop);
  if (!devices.events.count(first) || !devices.events.count(second))
    return fail(kInvalidHandle, "hipEventElapsedTime: unknown event");
  if (!first->recorded || !second->recorded)
    return fail(kInvalidHandle, "hipEventElapsedTime: event not recorded");
  *milliseconds =
      std::chrono::duration<float, std::milli>(second->time - first->time)
          .count();
  return succeed();
}

MOEC_EXPORT int hipEventDestroy(void *event) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Event *>(event);
  if (!devices.events.erase(handle))
    return fail(kInvalidHandle, "hipEventDestroy: unknown event");
  delete handle;
  return succeed();
}

namespace {

/// hipIpcMemHandle_t: 64 opaque bytes. Ours name the process, the
/// allocation and the memfd its pages live in from then on: the same
/// process gets the allocation's own address back, another one maps the
/// memfd through /proc/<pid>/fd/<fd> (the same memory, shadow included)
/// and joins the exporting process's peer segment (`segmentFd`,
/// moec::emu::PeerGroup), through which launches that wait on each other
/// across the processes tell a slow peer from a deadlock.
struct IpcMemHandle {
  char reserved[kIpcHandleSize];
};
struct IpcPayload {
  char magic[8];
  int64_t process;
  uint64_t base;
  uint64_t serial;
  uint64_t size;
  uint64_t mappedBytes;
  int32_t fd;
  int32_t segmentFd;
};
static_assert(sizeof(IpcPayload) <= kIpcHandleSize);
constexpr char kIpcMagic[8] = {'m', 'o', 'e', 'c', 'i', 'p', 'c', '3'};

std::string errnoText() { return std::strerror(errno); }

/// Moves an allocation's pages (data and shadow) into a memfd mapped at
/// the same address, so another process can map them too. Once per
/// allocation; the contents are kept.
int shareAllocation(Allocation &allocation) {
  if (allocation.sharedFd >= 0)
    return kSuccess;
  const int fd = ::memfd_create("moec-emulated-device", MFD_CLOEXEC);
  if (fd < 0)
    return fail(kOutOfMemory, "hipIpcGetMemHandle: memfd_create: " + errnoText());
  void *staging = MAP_FAILED;
  if (::ftruncate(fd, off_t(allocation.mappedBytes)) == 0)
    staging = ::mmap(nullptr, allocation.mappedBytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    const std::string reason = errnoText();
    ::close(fd);
    return fail(kOutOfMemory, "hipIpcGetMemHandle: " +
                                  std::to_string(allocation.mappedBytes) +
                                  " bytes of shared memory: " + reason);
  }
  std::memcpy(staging, allocation.data, allocation.mappedBytes);
  ::munmap(staging, allocation.mappedBytes);
  // Replaces the private pages in place: every pointer stays valid.
  if (::mmap(allocation.data, allocation.mappedBytes, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    const std::string reason = errnoText();
    ::close(fd);
    return fail(kOutOfMemory, "hipIpcGetMemHandle: remapping shared: " + reason);
  }
  allocation.sharedFd = fd;
  return kSuccess;
}

/// Maps another process's shared allocation and registers it here, on the
/// calling thread's device.
int importAllocation(EmulatedDevices &devices, const IpcPayload &payload,
                     void **pointer) {
  const std::string path = "/proc/" + std::to_string(payload.process) +
                           "/fd/" + std::to_string(payload.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat info {};
  if (fd < 0 || ::fstat(fd, &info) != 0 ||
      uint64_t(info.st_size) != payload.mappedBytes) {
    const std::string reason = fd < 0 ? errnoText() : "not that allocation";
    if (fd >= 0)
      ::close(fd);
    return fail(kInvalidValue,
                "hipIpcOpenMemHandle: process " + std::to_string(payload.process) +
                    "'s allocation is not there (" + path + ": " + reason +
                    "): the process ended or freed it");
  }
  void *base = ::mmap(nullptr, payload.mappedBytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED, fd, 0);
  ::close(fd); // the mapping keeps the memory
  if (base == MAP_FAILED)
    return fail(kOutOfMemory, "hipIpcOpenMemHandle: mapping " + path + ": " +
                                  errnoText());
  std::string error;
  if (mlir::failed(moec::emu::PeerGroup::joinSegment(payload.process,
                                                     payload.segmentFd, error))) {
    ::munmap(base, payload.mappedBytes);
    return fail(kInvalidValue, "hipIpcOpenMemHandle: " + error);
  }
  Allocation allocation;
  allocation.data = static_cast<uint8_t *>(base);
  allocation.written = allocation.data + pageRounded(payload.size);
  allocation.size = payload.size;
  allocation.mappedBytes = payload.mappedBytes;
  allocation.device = currentDevice;
  allocation.imported = true;
  allocation.serial = devices.nextSerial++;
  devices.allocations[reinterpret_cast<uintptr_t>(base)] = allocation;
  *pointer = base;
  return kSuccess;
}

} // namespace

MOEC_EXPORT int hipIpcGetMemHandle(IpcMemHandle *handle, void *pointer) {
  if (!handle)
    return fail(kInvalidValue, "hipIpcGetMemHandle: null handle");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto it = devices.allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == devices.allocations.end() || it->second.imported)
    return fail(kInvalidValue, "hipIpcGetMemHandle: not the start of an "
                               "allocation of this process");
  if (int status = shareAllocation(it->second))
    return status;
  std::string error;
  const int segment = moec::emu::PeerGroup::ownSegment(error);
  if (segment < 0)
    return fail(kOutOfMemory, "hipIpcGetMemHandle: " + error);
  IpcPayload payload{};
  std::memcpy(payload.magic, kIpcMagic, sizeof(kIpcMagic));
  payload.process = int64_t(::getpid());
  payload.base = it->first;
  payload.serial = it->second.serial;
  payload.size = it->second.size;
  payload.mappedBytes = it->second.mappedBytes;
  payload.fd = it->second.sharedFd;
  payload.segmentFd = segment;
  std::memset(handle->reserved, 0, sizeof(handle->reserved));
  std::memcpy(handle->reserved, &payload, sizeof(payload));
  return succeed();
}

MOEC_EXPORT int hipIpcOpenMemHandle(void **pointer, IpcMemHandle handle,
                                    unsigned /*flags*/) {
  if (!pointer)
    return fail(kInvalidValue, "hipIpcOpenMemHandle: null result pointer");
  IpcPayload payload;
  std::memcpy(&payload, handle.reserved, sizeof(payload));
  if (std::memcmp(payload.magic, kIpcMagic, sizeof(kIpcMagic)) != 0)
    return fail(kInvalidValue, "hipIpcOpenMemHandle: not an emulated device's "
                               "handle");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (payload.process != int64_t(::getpid()))
    return importAllocation(devices, payload, pointer);
  auto it = devices.allocations.find(uintptr_t(payload.base));
  if (it == devices.allocations.end() || it->second.serial != payload.serial)
    return fail(kInvalidValue, "hipIpcOpenMemHandle: the allocation was freed");
  *pointer = it->second.data;
  return succeed();
}

MOEC_EXPORT int hipIpcCloseMemHandle(void *pointer) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto it = devices.allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == devices.allocations.end())
    return fail(kInvalidValue, "hipIpcCloseMemHandle: not an opened handle");
  if (it->second.imported) {
    // Pending launches may still read it, as hipFree's would.
    const int status = devices.flush();
    unmapAllocation(it->second);
    devices.allocations.erase(it);
    return status;
  }
  return succeed();
}

MOEC_EXPORT int hipModuleLoadData(void **module, const void *image) {
  if (!module || !image)
    return fail(kInvalidValue, "hipModuleLoadData: null module or image");
  *module = nullptr;
  const auto *bytes = static_cast<const uint8_t *>(image);
  // The image's size is not given: its ELF headers say how far it reaches
  // (at most 4 GiB, so a corrupt header cannot send the reads far).
  const size_t extent = elfExtent(bytes, size_t(1) << 32);
  if (extent == 0)
    return fail(kInvalidImage, "hipModuleLoadData: not a 64-bit ELF code "
                               "object");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  const uint64_t key = moec::rt::xxh64(image, extent);
  auto it = devices.irByCodeObject.find(key);
  if (it == devices.irByCodeObject.end()) {
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx",
                  static_cast<unsigned long long>(key));
    return fail(kInvalidImage,
                std::string("hipModuleLoadData: no kernel IR is registered for "
                            "code object ") +
                    hash + " (" + std::to_string(extent) +
                    " bytes); the emulated device runs only code objects "
                    "whose IR was registered (moecEmulatedRegisterKernelIr; "
                    "the runtime does it for bundles that store kernel IR)");
  }
  std::string diagnostic;
  mlir::MLIRContext &context = devices.context();
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diagnostic.empty())
      diagnostic = diag.str();
    return mlir::success();
  });
  llvm::StringRef text(reinterpret_cast<const char *>(it->second.data()),
                       it->second.size());
  auto loaded = std::make_unique<Module>();
  loaded->ir =
      mlir::parseSourceString<mlir::ModuleOp>(text, mlir::ParserConfig(&context));
  if (!loaded->ir)
    return fail(kInvalidImage, "hipModuleLoadData: the registered kernel IR "
                               "does not parse: " +
                                   diagnostic);
  loaded->device = currentDevice;
  *module = loaded.get();
  devices.modules.insert(loaded.release());
  return succeed();
}

MOEC_EXPORT int hipModuleGetFunction(void **function, void *module,
                                     const char *name) {
  if (!function || !name)
    return fail(kInvalidValue, "hipModuleGetFunction: null function or name");
  *function = nullptr;
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Module *>(module);
  if (!devices.modules.count(handle))
    return fail(kInvalidHandle, "hipModuleGetFunction: unknown module");
  if (auto it = handle->functions.find(name); it != handle->functions.end()) {
    *function = it->second.get();
    return succeed();
  }
  mlir::gpu::GPUFuncOp found;
  handle->ir->walk([&](mlir::gpu::GPUFuncOp func) {
    if (func.getName() == name && func.isKernel())
      found = func;
  });
  if (!found)
    return fail(kNotFound, std::string("hipModuleGetFunction: the kernel IR "
                                       "has no kernel @") +
                               name);
  std::string error;
  if (mlir::failed(moec::emu::checkSupported(found, error)))
    return fail(kInvalidDeviceFunction, error);
  auto created = std::make_unique<Function>();
  created->module = handle;
  created->func = found;
  created->name = name;
  if (!layoutArguments(*created, error))
    return fail(kInvalidDeviceFunction, error);
  *function = created.get();
  devices.functions.insert(created.get());
  handle->functions[name] = std::move(created);
  return succeed();
}

MOEC_EXPORT int hipModuleUnload(void *module) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Module *>(module);
  if (!devices.modules.count(handle))
    return fail(kInvalidHandle, "hipModuleUnload: unknown module");
  // Pending launches may run its kernels.
  const int status = devices.flush();
  for (auto &entry : handle->functions)
    devices.functions.erase(entry.second.get());
  devices.modules.erase(handle);
  delete handle;
  return status;
}

MOEC_EXPORT int hipModuleLaunchKernel(void *function, unsigned gridX,
                                      unsigned gridY, unsigned gridZ,
                                      unsigned blockX, unsigned blockY,
                                      unsigned blockZ, unsigned sharedMemBytes,
                                      void *stream, void **kernelParams,
                                      void **extra) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *kernel = static_cast<Function *>(function);
  if (!devices.functions.count(kernel))
    return fail(kInvalidHandle, "hipModuleLaunchKernel: unknown function");
  const std::string where = "hipModuleLaunchKernel(" + kernel->name + "): ";
  if (gridX == 0 || gridY == 0 || gridZ == 0 || blockX == 0 || blockY == 0 ||
      blockZ == 0)
    return fail(kInvalidValue, where + "grid and block dimensions must be >= 1");
  if (uint64_t(blockX) * blockY * blockZ > chip().maxWorkgroupSize)
    return fail(kInvalidValue, where + "a workgroup of more than " +
                                   std::to_string(chip().maxWorkgroupSize) +
                                   " threads");
  if (sharedMemBytes != 0)
    return fail(kInvalidValue, where + "dynamic LDS is not emulated (the "
                                       "kernels declare theirs statically)");
  int streamDevice = currentDevice;
  if (stream) {
    auto *handle = static_cast<Stream *>(stream);
    if (!devices.streams.count(handle))
      return fail(kInvalidHandle, where + "unknown stream");
    streamDevice = handle->device;
  }

  // The argument bytes: HIP_LAUNCH_PARAM_BUFFER_POINTER/SIZE in `extra`, as
  // the runtime passes them, or one pointer per argument in kernelParams.
  const uint8_t *kernarg = nullptr;
  size_t kernargSize = 0;
  if (extra) {
    for (size_t i = 0; extra[i] != kLaunchParamEnd; i += 2) {
      if (extra[i] == kLaunchParamBufferPointer)
        kernarg = static_cast<const uint8_t *>(extra[i + 1]);
      else if (extra[i] == kLaunchParamBufferSize)
        std::memcpy(&kernargSize, extra[i + 1], sizeof(size_t));
      else
        return fail(kInvalidValue, where + "unknown `extra` marker");
    }
    if (!kernarg || kernargSize < kernel->kernargSize)
      return fail(kInvalidValue,
                  where + "the kernarg buffer holds " +
                      std::to_string(kernargSize) + " bytes, the kernel's " +
                      std::to_string(kernel->slots.size()) +
                      " arguments take " + std::to_string(kernel->kernargSize));
  } else if (!kernelParams && !kernel->slots.empty()) {
    return fail(kInvalidValue, where + "no arguments given");
  }

  PendingLaunch launch;
  launch.function = kernel;
  launch.grid = {gridX, gridY, gridZ};
  launch.block = {blockX, blockY, blockZ};
  launch.device = streamDevice;
  for (size_t i = 0; i < kernel->slots.size(); ++i) {
    const ArgSlot &slot = kernel->slots[i];
    const void *source =
        extra ? static_cast<const void *>(kernarg + slot.offset) : kernelParams[i];
    BoundArg arg;
    if (slot.isPointer) {
      void *pointer = nullptr;
      std::memcpy(&pointer, source, 8);
      const Allocation *allocation = devices.findAllocation(pointer);
      if (!allocation) {
        char text[64];
        std::snprintf(text, sizeof(text), "%p", pointer);
        return fail(kInvalidValue,
                    where + "argument " + std::to_string(i) + " (" + text +
                        ") points into no device allocation");
      }
      arg.isPointer = true;
      arg.allocation = reinterpret_cast<uintptr_t>(allocation->data);
      arg.offset = reinterpret_cast<uintptr_t>(pointer) - arg.allocation;
    } else if (slot.size == 4) {
      int32_t value = 0;
      std::memcpy(&value, source, 4);
      arg.scalar = value;
    } else {
      std::memcpy(&arg.scalar, source, 8);
    }
    launch.args.push_back(arg);
  }

  if (Stream *capturing = capturingStream(devices, stream)) {
    GraphOp op;
    op.launch = std::move(launch);
    return record(*capturing, std::move(op), where + "launch");
  }
  if (int status = refuseLegacyStreamDuringCapture(devices, stream,
                                                   where + "launch"))
    return status;
  return submitLaunch(devices, std::move(launch), stream, where);
}

//===----------------------------------------------------------------------===//
// Capture and graph entry points
//===----------------------------------------------------------------------===//

MOEC_EXPORT int hipStreamBeginCapture(void *stream, int mode) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (!stream)
    return fail(kStreamCaptureUnsupported,
                "hipStreamBeginCapture: the null stream cannot be captured");
  auto *handle = static_cast<Stream *>(stream);
  if (!devices.streams.count(handle))
    return fail(kInvalidHandle, "hipStreamBeginCapture: unknown stream");
  if (mode < kCaptureModeGlobal || mode > kCaptureModeRelaxed)
    return fail(kInvalidValue, "hipStreamBeginCapture: capture mode " +
                                   std::to_string(mode) + " is not one of "
                                   "Global 0, ThreadLocal 1, Relaxed 2");
  if (handle->capture != CaptureStatus::None)
    return fail(kIllegalState,
                "hipStreamBeginCapture: the stream is capturing already");
  handle->capture = CaptureStatus::Active;
  handle->captureMode = mode;
  handle->captureThread = std::this_thread::get_id();
  handle->graph = new Graph();
  return succeed();
}

MOEC_EXPORT int hipStreamEndCapture(void *stream, void **graph) {
  if (!graph)
    return fail(kInvalidValue, "hipStreamEndCapture: null graph pointer");
  *graph = nullptr;
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Stream *>(stream);
  if (!stream || !devices.streams.count(handle))
    return fail(kInvalidHandle, "hipStreamEndCapture: unknown stream");
  if (handle->capture == CaptureStatus::None)
    return fail(kIllegalState, "hipStreamEndCapture: the stream is not "
                               "capturing");
  if (handle->captureMode != kCaptureModeRelaxed &&
      handle->captureThread != std::this_thread::get_id())
    return fail(kStreamCaptureWrongThread,
                "hipStreamEndCapture: the capture began on another thread");
  std::unique_ptr<Graph> captured(handle->graph);
  const bool invalidated = handle->capture == CaptureStatus::Invalidated;
  handle->graph = nullptr;
  handle->capture = CaptureStatus::None;
  if (invalidated)
    return fail(kStreamCaptureInvalidated,
                "hipStreamEndCapture: the capture was invalidated by a call "
                "not permitted during capture");
  GraphRegistry::get().graphs.insert(captured.get());
  *graph = captured.release();
  return succeed();
}

MOEC_EXPORT int hipStreamIsCapturing(void *stream, int *status) {
  if (!status)
    return fail(kInvalidValue, "hipStreamIsCapturing: null status pointer");
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  if (stream && !devices.streams.count(static_cast<Stream *>(stream)))
    return fail(kInvalidHandle, "hipStreamIsCapturing: unknown stream");
  const Stream *handle = capturingStream(devices, stream);
  *status = handle ? int(handle->capture) : int(CaptureStatus::None);
  return succeed();
}

MOEC_EXPORT int hipGraphInstantiate(void **exec, void *graph,
                                    void **errorNode, char *log,
                                    size_t logSize) {
  if (errorNode)
    *errorNode = nullptr;
  if (log && logSize)
    log[0] = 0;
  if (!exec)
    return fail(kInvalidValue, "hipGraphInstantiate: null result pointer");
  *exec = nullptr;
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  GraphRegistry &registry = GraphRegistry::get();
  auto *handle = static_cast<Graph *>(graph);
  if (!registry.graphs.count(handle))
    return fail(kInvalidValue, "hipGraphInstantiate: unknown graph");
  auto *created = new GraphExec{handle->ops};
  registry.execs.insert(created);
  *exec = created;
  return succeed();
}

MOEC_EXPORT int hipGraphLaunch(void *exec, void *stream) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<GraphExec *>(exec);
  if (!GraphRegistry::get().execs.count(handle))
    return fail(kInvalidValue, "hipGraphLaunch: unknown executable graph");
  if (stream && !devices.streams.count(static_cast<Stream *>(stream)))
    return fail(kInvalidHandle, "hipGraphLaunch: unknown stream");
  // A graph launched into a capture would become a child graph node: not
  // emulated.
  if (capturingStream(devices, stream))
    return invalidateCaptures(devices, kStreamCaptureUnsupported,
                              "hipGraphLaunch into a capturing stream");
  if (int status =
          refuseLegacyStreamDuringCapture(devices, stream, "hipGraphLaunch"))
    return status;
  return replay(devices, *handle, stream);
}

MOEC_EXPORT int hipGraphExecDestroy(void *exec) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<GraphExec *>(exec);
  if (!GraphRegistry::get().execs.erase(handle))
    return fail(kInvalidValue, "hipGraphExecDestroy: unknown executable graph");
  delete handle;
  return succeed();
}

MOEC_EXPORT int hipGraphDestroy(void *graph) {
  EmulatedDevices &devices = EmulatedDevices::get();
  Guard guard(devices.mutex);
  auto *handle = static_cast<Graph *>(graph);
  if (!GraphRegistry::get().graphs.erase(handle))
    return fail(kInvalidValue, "hipGraphDestroy: unknown graph");
  delete handle;
  return succeed();
}

MOEC_EXPORT int hipDeviceGetName(char *name, int length, int device) {
  if (!name || length <= 0)
    return fail(kInvalidValue, "hipDeviceGetName: no room for the name");
  if (!EmulatedDevices::get().validDevice(device))
    return fail(kInvalidDevice, "hipDeviceGetName: no device " +
                                    std::to_string(device));
  const std::string text = std::string("moec emulated ") + chip().product +
                           " (" + chip().arch + ")";
  std::snprintf(name, size_t(length), "%s", text.c_str());
  return succeed();
}
