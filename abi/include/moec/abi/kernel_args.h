//===- kernel_args.h - kernel argument kinds both sides agree on -*- C++ -*-===//
///
/// \file
/// What a generated kernel's argument list is made of: the codegen declares
/// each gpu.func argument as one KernelArgInfo, the compiler writes the list
/// into the bundle manifest, and the runtime's loader packs kernargs from
/// it. Header-only, plain C++17, no dependency: the dialect and codegen use
/// it without seeing the runtime, the runtime without seeing the compiler.
///
//===----------------------------------------------------------------------===//
#ifndef MOEC_ABI_KERNEL_ARGS_H
#define MOEC_ABI_KERNEL_ARGS_H

#include <string>

namespace moec::abi {

/// Kind of one kernel argument (the kernarg layout is derived from it).
enum class ArgKind { Buffer, I32, I64 };
/// How a kernel uses a buffer argument.
enum class ArgAccess { None, Read, Write, ReadWrite };

/// One kernel argument, in kernarg order: what the codegen declares and the
/// manifest records. Buffers are bare 64-bit global pointers, scalars are
/// passed by value (access Read).
struct KernelArgInfo {
  using Kind = ArgKind;
  using Access = ArgAccess;
  std::string name;
  ArgKind kind = ArgKind::Buffer;
  /// Element type as stored in memory: "f8E4M3FN", "f4E2M1FN x2",
  /// "f8E8M0FNU", "i32", "bf16".
  std::string dtype;
  ArgAccess access = ArgAccess::None;
  /// Shape in terms of the problem, for documentation and checks, e.g.
  /// "[num_routes, I]".
  std::string shape;
};

/// Bytes of one argument in the kernarg segment: buffers are 8-byte
/// pointers, i32 4 bytes, i64 8 bytes.
inline constexpr unsigned kernargSize(ArgKind kind) noexcept {
  return kind == ArgKind::I32 ? 4 : 8;
}

/// Where the next argument of `kind` goes when the arguments so far end at
/// byte `end`: at its natural alignment (its size). The runtime packs
/// kernargs by this rule and the ISA verifier checks each code object's
/// metadata against it.
inline constexpr unsigned kernargOffset(unsigned end, ArgKind kind) noexcept {
  const unsigned size = kernargSize(kind);
  return (end + size - 1) / size * size;
}

/// The manifest's spelling of a kind: "buffer", "i32", "i64".
inline const char *argKindName(ArgKind kind) noexcept {
  switch (kind) {
  case ArgKind::Buffer:
    return "buffer";
  case ArgKind::I32:
    return "i32";
  case ArgKind::I64:
    return "i64";
  }
  return "?";
}

/// The manifest's spelling of an access: "none", "read", "write",
/// "readwrite".
inline const char *argAccessName(ArgAccess access) noexcept {
  switch (access) {
  case ArgAccess::None:
    return "none";
  case ArgAccess::Read:
    return "read";
  case ArgAccess::Write:
    return "write";
  case ArgAccess::ReadWrite:
    return "readwrite";
  }
  return "?";
}

} // namespace moec::abi

#endif // MOEC_ABI_KERNEL_ARGS_H
