//===- moec_runtime.hpp - RAII wrapper over the C API -----------*- C++ -*-===//
//
// For C++ engines that link libmoec_runtime.so, which exports only the C API.
// Header-only: owning handles that release on scope exit, and helpers that
// return moec_status_t (no exceptions). C++ code linking the static
// moec_runtime can also use the moec::rt classes directly.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_RUNTIME_HPP
#define MOEC_RUNTIME_HPP

#include "moec/moec_runtime.h"

#include <memory>
#include <string>

namespace moec {

struct BundleCloser {
  void operator()(moec_bundle_t *bundle) const { moec_bundle_close(bundle); }
};
struct DeviceReleaser {
  void operator()(moec_device_t *device) const { moec_device_release(device); }
};
struct ExecutableReleaser {
  void operator()(moec_executable_t *executable) const {
    moec_executable_release(executable);
  }
};

/// Owning handles. Destroy an executable before its device and bundle
/// (declare it after them in the same scope).
using UniqueBundle = std::unique_ptr<moec_bundle_t, BundleCloser>;
using UniqueDevice = std::unique_ptr<moec_device_t, DeviceReleaser>;
using UniqueExecutable = std::unique_ptr<moec_executable_t, ExecutableReleaser>;

/// The calling thread's last error message.
inline std::string lastErrorMessage() { return moec_last_error_message(); }

inline moec_status_t openBundle(const std::string &path, UniqueBundle &out) {
  moec_bundle_t *bundle = nullptr;
  moec_status_t status = moec_bundle_open(path.c_str(), &bundle);
  if (status == MOEC_STATUS_OK)
    out.reset(bundle);
  return status;
}

/// `hipLibrary` empty: the default search ($MOEC_HIP_LIBRARY, libamdhip64.so...).
inline moec_status_t createDevice(const std::string &hipLibrary, int ordinal,
                                  UniqueDevice &out) {
  moec_device_t *device = nullptr;
  moec_status_t status = moec_device_create(
      hipLibrary.empty() ? nullptr : hipLibrary.c_str(), ordinal, &device);
  if (status == MOEC_STATUS_OK)
    out.reset(device);
  return status;
}

inline moec_status_t createExecutable(moec_device_t *device,
                                      const moec_bundle_t *bundle,
                                      UniqueExecutable &out) {
  moec_executable_t *executable = nullptr;
  moec_status_t status = moec_executable_create(device, bundle, &executable);
  if (status == MOEC_STATUS_OK)
    out.reset(executable);
  return status;
}

} // namespace moec

#endif // MOEC_RUNTIME_HPP
