//===- CodeObjectMetadata.h - resources from NT_AMDGPU_METADATA -*- C++ -*-===//
///
/// \file
/// Reads per-kernel resource usage from the AMDGPU metadata note of an HSACO
/// (msgpack under the "AMDGPU" note, type NT_AMDGPU_METADATA), the same
/// record the HIP loader reads; never from text dumps.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_CODEOBJECTMETADATA_H
#define MOEC_COMPILER_CODEOBJECTMETADATA_H

#include "moec/manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec {

/// One kernel as the code object declares it; the resource record is the
/// runtime's, so what the compiler reads is what the manifest carries.
struct CodeObjectKernel {
  std::string name;
  std::string symbol;
  rt::KernelResources resources;
};

/// Every kernel described by the metadata note of `hsaco`, in note order.
llvm::Expected<std::vector<CodeObjectKernel>>
readKernelResources(llvm::ArrayRef<uint8_t> hsaco);

} // namespace moec

#endif // MOEC_COMPILER_CODEOBJECTMETADATA_H
