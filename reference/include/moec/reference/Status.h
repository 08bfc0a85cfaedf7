//===- Status.h - error reporting without exceptions ------------*- C++ -*-===//
//
// The oracle is linked into tools that may be built without exceptions, so
// every fallible operation returns a Status carrying a one-line message.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_STATUS_H
#define MOEC_REFERENCE_STATUS_H

#include <string>
#include <utility>

namespace moec::ref {

/// Success, or a one-line message naming the file or field at fault.
class Status {
public:
  Status() = default;
  /// A failure with the given message (must not be empty).
  static Status error(std::string message) {
    Status status;
    status.message_ = std::move(message);
    if (status.message_.empty())
      status.message_ = "unknown error";
    return status;
  }
  bool ok() const { return message_.empty(); }
  explicit operator bool() const { return ok(); }
  const std::string &message() const { return message_; }

private:
  std::string message_;
};

} // namespace moec::ref

#endif // MOEC_REFERENCE_STATUS_H
