//===- intermediate_fault_hip.cpp - a fault between W13 and W2 ------------===//
//
// libmoec_intermediate_fault_hip.so, built for tests only: the emulated HIP
// device (a dependency of this library, so every entry point the runtime
// looks up in it resolves there) with one fault planted between the stages
// of a layer. Before each launch of an unfused W2 kernel (symbol "moe2_"),
// once the W13 kernel before it has written the FP8 intermediate, it adds
// one to the first $MOEC_INTERMEDIATE_FAULT_BYTES E8M0 scales of that
// intermediate (W2's second argument, its A scales): the intermediate's
// first blocks are then read at twice their value. The codegen has no way
// to skip the intermediate's FP8 quantisation, so this is the nearest
// fault in the device's own data between the two stages
// (PlantedFaultTest.cpp).
//
//===----------------------------------------------------------------------===//

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#define FAULT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kInvalidValue = 1;
constexpr int kHostToDevice = 1, kDeviceToHost = 2; // hipMemcpyKind
/// The unfused W2 kernel's A-scale argument (codegen/lib/W2Kernel.cpp,
/// W2Arg::kAScale): the second pointer of its packed arguments.
constexpr unsigned kW2AScaleArgument = 1;
/// hipModuleLaunchKernel `extra` markers (HIP_LAUNCH_PARAM_*): the moec
/// runtime passes its packed argument buffer this way.
void *const kBufferPointer = reinterpret_cast<void *>(1);
void *const kEnd = reinterpret_cast<void *>(3);

/// The device pointer argument `index` of a launch, from kernelParams or
/// the packed buffer in `extra`; null when neither has it.
void *pointerArgument(void **kernelParams, void **extra, unsigned index) {
  if (kernelParams)
    return *static_cast<void **>(kernelParams[index]);
  for (void **item = extra; item && *item != kEnd; item += 2)
    if (*item == kBufferPointer) {
      void *pointer = nullptr;
      std::memcpy(&pointer,
                  static_cast<const char *>(item[1]) + index * sizeof(void *),
                  sizeof(pointer));
      return pointer;
    }
  return nullptr;
}

using GetFunction = int (*)(void **, void *, const char *);
using Launch = int (*)(void *, unsigned, unsigned, unsigned, unsigned,
                       unsigned, unsigned, unsigned, void *, void **, void **);
using Memcpy = int (*)(void *, const void *, size_t, int);

/// The emulated library's own entry points.
template <typename F> F real(const char *name) {
  void *library =
      dlopen("libmoec_emulated_hip.so", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  return library ? reinterpret_cast<F>(dlsym(library, name)) : nullptr;
}

std::mutex mutex;
std::map<void *, std::string> names; // function -> kernel symbol

} // namespace

FAULT_EXPORT int hipModuleGetFunction(void **function, void *module,
                                      const char *name) {
  static const GetFunction getFunction =
      real<GetFunction>("hipModuleGetFunction");
  if (!getFunction)
    return kInvalidValue;
  const int status = getFunction(function, module, name);
  if (status == 0 && function && name) {
    std::lock_guard<std::mutex> lock(mutex);
    names[*function] = name;
  }
  return status;
}

FAULT_EXPORT int hipModuleLaunchKernel(void *function, unsigned gridX,
                                       unsigned gridY, unsigned gridZ,
                                       unsigned blockX, unsigned blockY,
                                       unsigned blockZ, unsigned sharedMemBytes,
                                       void *stream, void **kernelParams,
                                       void **extra) {
  static const Launch launch = real<Launch>("hipModuleLaunchKernel");
  static const Memcpy copy = real<Memcpy>("hipMemcpy");
  if (!launch || !copy)
    return kInvalidValue;
  bool w2 = false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = names.find(function);
    w2 = it != names.end() && it->second.rfind("moe2_", 0) == 0;
  }
  const char *bytesText = std::getenv("MOEC_INTERMEDIATE_FAULT_BYTES");
  const size_t bytes = bytesText ? std::strtoul(bytesText, nullptr, 10) : 0;
  void *scales =
      w2 && bytes ? pointerArgument(kernelParams, extra, kW2AScaleArgument)
                  : nullptr;
  if (scales) {
    // A synchronous copy: the W13 launch before has run.
    std::vector<unsigned char> host(bytes);
    int status = copy(host.data(), scales, bytes, kDeviceToHost);
    for (unsigned char &scale : host)
      ++scale;
    if (status == 0)
      status = copy(scales, host.data(), bytes, kHostToDevice);
    if (status != 0)
      return status;
  }
  return launch(function, gridX, gridY, gridZ, blockX, blockY, blockZ,
                sharedMemBytes, stream, kernelParams, extra);
}
