//===- KernelAbi.h - argument layout of generated kernels -------*- C++ -*-===//
///
/// \file
/// The kernel ABI as data: the compiler writes this list into the bundle
/// manifest, and the codegen refuses to build a gpu.func whose signature
/// disagrees with it, so the runtime and the engine see exactly what the
/// kernel expects.
/// Plain C++, no MLIR dependency.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_KERNELABI_H
#define MOEC_CODEGEN_KERNELABI_H

#include <string>
#include <vector>

namespace moec {

/// One kernel argument. Buffers are passed as bare 64-bit global pointers,
/// scalars by value.
struct KernelArg {
  enum class Kind { Buffer, I32 };
  enum class Access { Read, Write, ReadWrite, Value };
  std::string name;
  Kind kind;
  /// Element type as stored in memory: "f8E4M3FN", "f4E2M1FN x2",
  /// "f8E8M0FNU", "i32", "bf16".
  std::string dtype;
  Access access;
  /// Shape in terms of the problem, for documentation and checks, e.g.
  /// "[num_routes, I]".
  std::string shape;
};

/// Arguments, launch geometry rule and workgroup size of one kernel.
struct KernelAbi {
  std::vector<KernelArg> args;
  /// Grid rule per dimension, as text a user can evaluate ("H / 128").
  std::string gridX, gridY, gridZ;
  unsigned workgroupSize = 0;
};

/// LLVM function attribute carrying the cache-policy bits (the buffer
/// intrinsics' aux operand: SC0 = 1, NT = 2, SC1 = 16) that the backend
/// puts on every weight load of a kernel with tile.b_cache = sc0, sc1 or
/// sc0_sc1. Weight loads are the kernel's only non-temporal loads, which is
/// how the backend finds them.
constexpr const char *kBCachePolicyAttr = "moec-b-cache-policy";

const char *toString(KernelArg::Kind kind);
const char *toString(KernelArg::Access access);

} // namespace moec

#endif // MOEC_CODEGEN_KERNELABI_H
