//===- status.h - why a runtime call failed ---------------------*- C++ -*-===//
//
// A failing runtime function says what kind of failure it was where it
// happens (the bundle reader knows a checksum mismatch is a corrupt bundle,
// the HIP loader knows a missing symbol means no usable HIP runtime), so the
// C API passes the status on instead of recovering it from the message text.
// Functions with failures of more than one kind take an Error; those whose
// every failure is of one kind keep a plain `std::string &error`, and their
// callers know the kind from which function failed.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_STATUS_H
#define MOEC_STATUS_H

#include <cstdint>
#include <string>

namespace moec::rt {

/// The kinds of failure, one per moec_status_t and with its value
/// (c_api.cpp checks the correspondence at compile time), so converting
/// either way is a cast.
enum class Status : uint8_t {
  Ok = 0,
  InvalidArgument = 1,  ///< a null pointer, bad index or value, misuse
  NotFound = 2,         ///< no such table / kernel
  IoError = 3,          ///< a file cannot be opened, read or mapped
  CorruptBundle = 4,    ///< truncation, checksum or schema errors
  SelectionMiss = 5,    ///< m above a table whose above_max is "error"
  NoHipRuntime = 6,     ///< libamdhip64 not found or missing a symbol
  NoDevice = 7,         ///< hipInit / hipGetDeviceCount failed or found none
  HipError = 8,         ///< a HIP call failed
  ResourceExceeded = 9, ///< a kernel needs more than the device has
  Internal = 10,        ///< unexpected failure (out of memory, ...)
  RowNotCompiled = 11,  ///< the AITER row a key selects has no kernels
};

/// The last status, for range checks of values that come from C.
inline constexpr Status kLastStatus = Status::RowNotCompiled;

/// A failure: its kind and the one-line message the user sees.
struct Error {
  Status status = Status::Ok;
  std::string message;

  /// Records a failure; returns false so a bool function can end with
  /// `return error.fail(...)`.
  bool fail(Status kind, std::string text) {
    status = kind;
    message = std::move(text);
    return false;
  }
};

} // namespace moec::rt

#endif // MOEC_STATUS_H
