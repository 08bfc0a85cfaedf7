//===- KernelAbi.h - argument layout of generated kernels -------*- C++ -*-===//
///
/// \file
/// The kernel ABI as data: the compiler writes this list into the bundle
/// manifest, and the codegen refuses to build a gpu.func whose signature
/// disagrees with it, so the runtime and the engine see exactly what the
/// kernel expects.
/// Plain C++, no MLIR dependency; the argument type is the leaf ABI
/// library's, which the runtime shares.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_KERNELABI_H
#define MOEC_CODEGEN_KERNELABI_H

#include "moec/abi/kernel_args.h"

#include <string>
#include <vector>

namespace moec {

/// One kernel argument: the runtime's manifest type, so the codegen
/// declares exactly what the manifest records and the runtime checks.
using KernelArg = abi::KernelArgInfo;

/// Arguments, launch geometry rule and workgroup size of one kernel.
struct KernelAbi {
  std::vector<KernelArg> args;
  /// Grid rule per dimension, as text a user can evaluate ("H / 128").
  std::string gridX, gridY, gridZ;
  unsigned workgroupSize = 0;
  /// How the kernel reads its expert weights (`b`, `b_scale`), an id that
  /// weight preparation matches ("w2_expert_n_k_e2m1x2_low_nibble_first");
  /// empty for stages without weights.
  std::string weightLayout;
};

/// LLVM function attribute carrying the cache-policy bits (the buffer
/// intrinsics' aux operand, target::TargetInfo::cachePolicy) that the backend
/// puts on every weight load of a kernel with tile.b_cache = sc0, sc1 or
/// sc0_sc1. Weight loads are the kernel's only non-temporal loads, which is
/// how the backend finds them.
constexpr const char *kBCachePolicyAttr = "moec-b-cache-policy";


} // namespace moec

#endif // MOEC_CODEGEN_KERNELABI_H
