//===- hip_loader.cpp - HIP through dlopen, lazy kernel loading -*- C++ -*-===//
#include "moec/hip_loader.h"
#include "moec/kernel_occupancy.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

namespace moec::rt {

const std::vector<const char *> &hipSymbolNames() {
  static const std::vector<const char *> names = {
#define MOEC_HIP_SYMBOL_NAME(name, ret, params) #name,
      MOEC_HIP_SYMBOLS(MOEC_HIP_SYMBOL_NAME)
#undef MOEC_HIP_SYMBOL_NAME
  };
  return names;
}

const std::vector<const char *> &hipTimingSymbolNames() {
  static const std::vector<const char *> names = {
#define MOEC_HIP_SYMBOL_NAME(name, ret, params) #name,
      MOEC_HIP_TIMING_SYMBOLS(MOEC_HIP_SYMBOL_NAME)
#undef MOEC_HIP_SYMBOL_NAME
  };
  return names;
}

std::vector<std::string> defaultHipLibraryCandidates() {
  if (const char *explicitPath = std::getenv("MOEC_HIP_LIBRARY");
      explicitPath && *explicitPath)
    return {explicitPath};
  std::vector<std::string> candidates = {"libamdhip64.so", "libamdhip64.so.7",
                                         "libamdhip64.so.6", "libamdhip64.so.5"};
  const char *rocmPath = std::getenv("ROCM_PATH");
  std::string root = rocmPath && *rocmPath ? rocmPath : "/opt/rocm";
  candidates.push_back(root + "/lib/libamdhip64.so");
  return candidates;
}

HipLibrary::~HipLibrary() {
  if (handle_)
    ::dlclose(handle_);
}

std::unique_ptr<HipLibrary> HipLibrary::load(const std::vector<std::string> &candidates,
                                             std::string &error) {
  Error failure;
  std::unique_ptr<HipLibrary> library = load(candidates, failure);
  if (!library)
    error = std::move(failure.message);
  return library;
}

std::unique_ptr<HipLibrary> HipLibrary::load(const std::vector<std::string> &candidates,
                                             Error &error) {
  std::unique_ptr<HipLibrary> library(new HipLibrary());
  std::string tried;
  for (const std::string &candidate : candidates) {
    void *handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      tried += (tried.empty() ? "" : ", ") + candidate;
      continue;
    }
    library->handle_ = handle;
    library->loadedFrom_ = candidate;
    break;
  }
  if (!library->handle_) {
    error.fail(Status::NoHipRuntime, "no HIP runtime (tried: " + tried + ")");
    return nullptr;
  }
  void *handle = library->handle_;
  HipSymbols &symbols = library->symbols_;
  std::string missing;
#define MOEC_HIP_RESOLVE(name, ret, params)                                    \
  symbols.name = reinterpret_cast<ret(*) params>(::dlsym(handle, #name));      \
  if (!symbols.name)                                                           \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
  MOEC_HIP_SYMBOLS(MOEC_HIP_RESOLVE)
#undef MOEC_HIP_RESOLVE
  if (!missing.empty()) {
    // A library without the whole table is not a usable HIP runtime.
    error.fail(Status::NoHipRuntime,
               library->loadedFrom_ + ": missing symbol " + missing);
    return nullptr;
  }
  // The timing table is optional: without it the library still serves
  // layers, and timing says which symbol it lacks.
  HipTimingSymbols &timing = library->timing_;
#define MOEC_HIP_RESOLVE(name, ret, params)                                    \
  timing.name = reinterpret_cast<ret(*) params>(::dlsym(handle, #name));       \
  if (!timing.name)                                                            \
    missing += std::string(missing.empty() ? "" : ", ") + #name;
  MOEC_HIP_TIMING_SYMBOLS(MOEC_HIP_RESOLVE)
#undef MOEC_HIP_RESOLVE
  if (!missing.empty())
    library->timingError_ = library->loadedFrom_ + ": missing symbol " + missing;
  return library;
}

bool HipLibrary::exports(const char *name) const {
  return handle_ && ::dlsym(handle_, name) != nullptr;
}

std::string HipLibrary::describe(hip::Error status) const {
  const char *text = symbols_.hipGetErrorString ? symbols_.hipGetErrorString(status)
                                                : nullptr;
  std::string result = text ? text : "unknown HIP error";
  return result + " (" + std::to_string(status) + ")";
}

std::unique_ptr<HipDevice> HipDevice::create(std::unique_ptr<HipLibrary> library,
                                             int ordinal, std::string &error) {
  Error failure;
  std::unique_ptr<HipDevice> device = create(std::move(library), ordinal, failure);
  if (!device)
    error = std::move(failure.message);
  return device;
}

std::unique_ptr<HipDevice> HipDevice::create(std::unique_ptr<HipLibrary> library,
                                             int ordinal, Error &error) {
  if (!library) {
    error.fail(Status::NoHipRuntime, "no HIP runtime");
    return nullptr;
  }
  const HipSymbols &api = library->symbols();
  hip::Error status = api.hipInit(0);
  if (status != hip::kSuccess) {
    error.fail(Status::NoDevice,
               "no device (hipInit returned " + library->describe(status) + ")");
    return nullptr;
  }
  int count = 0;
  status = api.hipGetDeviceCount(&count);
  if (status != hip::kSuccess) {
    error.fail(Status::NoDevice, "no device (hipGetDeviceCount returned " +
                                     library->describe(status) + ")");
    return nullptr;
  }
  if (count <= 0) {
    error.fail(Status::NoDevice, "no device (hipGetDeviceCount reports 0 devices)");
    return nullptr;
  }
  if (ordinal < 0 || ordinal >= count) {
    error.fail(Status::InvalidArgument, "device " + std::to_string(ordinal) +
                                            " out of range (" + std::to_string(count) +
                                            " devices)");
    return nullptr;
  }
  std::unique_ptr<HipDevice> device(new HipDevice());
  device->ordinal_ = ordinal;
  struct {
    int attribute;
    int *out;
    const char *name;
  } queries[] = {
      {hip::kAttributeMultiprocessorCount, &device->computeUnits_,
       "multiprocessor count"},
      {hip::kAttributeMaxSharedMemoryPerBlock, &device->maxSharedMemoryPerBlock_,
       "max shared memory per block"},
      {hip::kAttributeMaxThreadsPerBlock, &device->maxThreadsPerBlock_,
       "max threads per block"},
      {hip::kAttributeWarpSize, &device->warpSize_, "warp size"},
  };
  status = api.hipSetDevice(ordinal);
  if (status != hip::kSuccess) {
    error.fail(Status::HipError, "hipSetDevice(" + std::to_string(ordinal) +
                                     ") failed: " + library->describe(status));
    return nullptr;
  }
  for (const auto &query : queries) {
    status = api.hipDeviceGetAttribute(query.out, query.attribute, ordinal);
    if (status != hip::kSuccess) {
      error.fail(Status::HipError, std::string("hipDeviceGetAttribute(") + query.name +
                                       ") failed: " + library->describe(status));
      return nullptr;
    }
  }
  device->library_ = std::move(library);
  return device;
}

bool HipDevice::makeCurrent(std::string &error) const {
  hip::Error status = hipApi().hipSetDevice(ordinal_);
  if (status == hip::kSuccess)
    return true;
  error = "hipSetDevice(" + std::to_string(ordinal_) + ") failed: " +
          library_->describe(status);
  return false;
}

std::string hipFunctionName(std::string_view symbol) {
  constexpr std::string_view descriptorSuffix = ".kd";
  if (symbol.size() > descriptorSuffix.size() &&
      symbol.substr(symbol.size() - descriptorSuffix.size()) == descriptorSuffix)
    symbol.remove_suffix(descriptorSuffix.size());
  return std::string(symbol);
}

bool packKernelArguments(const KernelInfo &kernel, const KernelArgValue *args,
                         size_t argCount, std::vector<uint8_t> &kernarg,
                         std::string &error) {
  if (argCount != kernel.abi.size()) {
    error = kernel.name + ": " + std::to_string(argCount) + " arguments given, the ABI has " +
            std::to_string(kernel.abi.size());
    return false;
  }
  kernarg.clear();
  for (size_t i = 0; i < argCount; ++i) {
    const KernelArgInfo &expected = kernel.abi[i];
    if (args[i].kind != expected.kind) {
      error = kernel.name + ": argument " + std::to_string(i) + " '" + expected.name +
              "' is " + argKindName(expected.kind) + ", given " +
              argKindName(args[i].kind);
      return false;
    }
    const size_t size = abi::kernargSize(expected.kind);
    const size_t offset = abi::kernargOffset(unsigned(kernarg.size()), expected.kind);
    kernarg.resize(offset + size, 0);
    switch (expected.kind) {
    case ArgKind::Buffer:
      std::memcpy(kernarg.data() + offset, &args[i].pointer, 8);
      break;
    case ArgKind::I32:
      std::memcpy(kernarg.data() + offset, &args[i].i32, 4);
      break;
    case ArgKind::I64:
      std::memcpy(kernarg.data() + offset, &args[i].i64, 8);
      break;
    }
  }
  // The kernarg segment size is a multiple of 8.
  kernarg.resize((kernarg.size() + 7) / 8 * 8, 0);
  return true;
}

namespace {

/// The emulated HIP device (device/, libmoec_emulated_hip.so) runs the
/// kernel IR stored with a code object; it exports this entry point, which
/// a real HIP library does not have. Looked up through the loaded library's
/// own handle (RTLD_NOLOAD finds it by the name it was opened with), so the
/// symbol table and the HipLibrary stay as they are.
using RegisterKernelIrFn = int (*)(const void *codeObject, size_t size,
                                   const void *ir, size_t irSize);

RegisterKernelIrFn findRegisterKernelIr(const HipLibrary &library) {
  void *handle = ::dlopen(library.loadedFrom().c_str(),
                          RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!handle)
    return nullptr;
  auto hook = reinterpret_cast<RegisterKernelIrFn>(
      ::dlsym(handle, "moecEmulatedRegisterKernelIr"));
  ::dlclose(handle); // HipLibrary holds its own reference
  return hook;
}

/// Hands the emulated device the IR of `kernel` before its code object is
/// loaded. Errors are left to hipModuleLoadData, which refuses a code object
/// without IR and says why.
void registerKernelIr(const HipLibrary &library, const Bundle &bundle,
                      const KernelInfo &kernel, const CodeObjectView &code) {
  if (!kernel.ir.present())
    return;
  RegisterKernelIrFn hook = findRegisterKernelIr(library);
  if (!hook)
    return;
  CodeObjectView ir;
  std::string error;
  if (bundle.codeObject(kernel.ir.object, ir, error))
    (void)hook(code.data, code.size, ir.data, ir.size);
}

} // namespace

KernelLoader::KernelLoader(const HipDevice &device, const Bundle &bundle)
    : device_(device), bundle_(bundle),
      modules_(bundle.codeObjectCount(), nullptr),
      functions_(new std::atomic<hip::Function>[bundle.manifest().kernels.size()]) {
  for (size_t i = 0; i < bundle.manifest().kernels.size(); ++i)
    functions_[i].store(nullptr, std::memory_order_relaxed);
}

KernelLoader::~KernelLoader() {
  for (hip::Module module : modules_)
    if (module)
      (void)device_.hipApi().hipModuleUnload(module);
}

bool KernelLoader::checkResources(const KernelInfo &kernel, std::string &error) const {
  const KernelResources &r = kernel.resources;
  const uint64_t threads = uint64_t(kernel.launch.workgroupSize[0]) *
                           kernel.launch.workgroupSize[1] *
                           kernel.launch.workgroupSize[2];
  if (device_.maxSharedMemoryPerBlock() > 0 &&
      r.ldsBytes > uint32_t(device_.maxSharedMemoryPerBlock())) {
    error = kernel.name + ": needs " + std::to_string(r.ldsBytes) +
            " bytes of LDS, the device allows " +
            std::to_string(device_.maxSharedMemoryPerBlock());
    return false;
  }
  if (device_.maxThreadsPerBlock() > 0 &&
      threads > uint64_t(device_.maxThreadsPerBlock())) {
    error = kernel.name + ": workgroup of " + std::to_string(threads) +
            " threads, the device allows " + std::to_string(device_.maxThreadsPerBlock());
    return false;
  }
  if (device_.warpSize() > 0 && r.wavefrontSize != uint32_t(device_.warpSize())) {
    error = kernel.name + ": compiled for wave" + std::to_string(r.wavefrontSize) +
            ", the device runs wave" + std::to_string(device_.warpSize());
    return false;
  }
  // A kernel the occupancy model says cannot be resident at all would fail
  // or hang at launch; refuse it here with the reason.
  if (const target::TargetInfo *target = partOf(bundle_.manifest().target)) {
    target::OccupancyEstimate estimate = estimateKernelOccupancy(*target, kernel);
    if (estimate.limiter == target::OccupancyLimiter::Invalid) {
      error = kernel.name + ": cannot be resident on " + target->name + ": " +
              estimate.problem;
      return false;
    }
  }
  return true;
}

bool KernelLoader::loadKernel(uint32_t kernelIndex, std::string &error) {
  Error failure;
  if (loadKernel(kernelIndex, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool KernelLoader::loadKernel(uint32_t kernelIndex, Error &error) {
  const Manifest &manifest = bundle_.manifest();
  if (kernelIndex >= manifest.kernels.size())
    return error.fail(Status::InvalidArgument,
                      bundle_.path() + ": kernel " + std::to_string(kernelIndex) +
                          " out of range (" + std::to_string(manifest.kernels.size()) +
                          " kernels)");
  std::lock_guard<std::mutex> lock(mutex_);
  if (functions_[kernelIndex].load(std::memory_order_acquire))
    return true;
  const KernelInfo &kernel = manifest.kernels[kernelIndex];
  if (!checkResources(kernel, error.message)) {
    error.status = Status::ResourceExceeded;
    return false;
  }
  const HipSymbols &api = device_.hipApi();
  if (!device_.makeCurrent(error.message)) {
    error.status = Status::HipError;
    return false;
  }
  hip::Module &module = modules_[kernel.codeObject];
  if (!module) {
    CodeObjectView view;
    if (!bundle_.codeObject(kernel.codeObject, view, error))
      return false;
    registerKernelIr(device_.library(), bundle_, kernel, view);
    hip::Error status = api.hipModuleLoadData(&module, view.data);
    if (status != hip::kSuccess) {
      module = nullptr;
      std::string message = kernel.name + ": hipModuleLoadData failed: " +
                            device_.library().describe(status);
      if (status == hip::kErrorNoBinaryForGpu)
        message += " (the bundle targets " + manifest.target.arch +
                   "; this device is a different chip)";
      return error.fail(Status::HipError, std::move(message));
    }
  }
  hip::Function function = nullptr;
  const std::string functionName = hipFunctionName(kernel.symbol);
  hip::Error status = api.hipModuleGetFunction(&function, module, functionName.c_str());
  if (status != hip::kSuccess || !function)
    return error.fail(Status::HipError, kernel.name + ": hipModuleGetFunction(" +
                                            functionName + ") failed: " +
                                            device_.library().describe(status));
  functions_[kernelIndex].store(function, std::memory_order_release);
  return true;
}

bool KernelLoader::launch(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
                          const KernelArgValue *args, size_t argCount,
                          hip::Stream stream, std::string &error) {
  Error failure;
  if (launch(kernelIndex, grid, args, argCount, stream, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool KernelLoader::launch(uint32_t kernelIndex, const std::array<uint32_t, 3> &grid,
                          const KernelArgValue *args, size_t argCount,
                          hip::Stream stream, Error &error) {
  if (!loadKernel(kernelIndex, error))
    return false;
  const KernelInfo &kernel = bundle_.manifest().kernels[kernelIndex];
  std::vector<uint8_t> kernarg;
  if (!packKernelArguments(kernel, args, argCount, kernarg, error.message)) {
    error.status = Status::InvalidArgument;
    return false;
  }
  return launchPacked(kernelIndex, grid, kernarg.data(), kernarg.size(), stream,
                      error);
}

bool KernelLoader::launchPacked(uint32_t kernelIndex,
                                const std::array<uint32_t, 3> &grid,
                                void *kernarg, size_t kernargSize,
                                hip::Stream stream, std::string &error) {
  Error failure;
  if (launchPacked(kernelIndex, grid, kernarg, kernargSize, stream, failure))
    return true;
  error = std::move(failure.message);
  return false;
}

bool KernelLoader::launchPacked(uint32_t kernelIndex,
                                const std::array<uint32_t, 3> &grid,
                                void *kernarg, size_t kernargSize,
                                hip::Stream stream, Error &error) {
  const std::vector<KernelInfo> &kernels = bundle_.manifest().kernels;
  hip::Function function = kernelIndex < kernels.size()
                               ? functions_[kernelIndex].load(std::memory_order_acquire)
                               : nullptr;
  // Launching a kernel that was never loaded is the caller's mistake, not
  // the device's.
  if (!function)
    return error.fail(Status::InvalidArgument, bundle_.path() + ": kernel " +
                                                   std::to_string(kernelIndex) +
                                                   " is not loaded");
  const KernelInfo &kernel = kernels[kernelIndex];
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0)
    return error.fail(Status::InvalidArgument,
                      kernel.name + ": grid dimensions must be >= 1");
  void *extra[] = {hip::kLaunchParamBufferPointer, kernarg,
                   hip::kLaunchParamBufferSize, &kernargSize, hip::kLaunchParamEnd};
  hip::Error status = device_.hipApi().hipModuleLaunchKernel(
      function, grid[0], grid[1], grid[2], kernel.launch.workgroupSize[0],
      kernel.launch.workgroupSize[1], kernel.launch.workgroupSize[2],
      /*sharedMemBytes=*/0, stream, /*kernelParams=*/nullptr,
      kernargSize ? extra : nullptr);
  if (status != hip::kSuccess)
    return error.fail(Status::HipError, kernel.name + ": hipModuleLaunchKernel failed: " +
                                            device_.library().describe(status));
  return true;
}

} // namespace moec::rt
