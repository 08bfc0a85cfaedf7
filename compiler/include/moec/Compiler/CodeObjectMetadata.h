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

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec {

/// Resource usage of one kernel as the code object declares it.
struct KernelResources {
  std::string name;
  std::string symbol;
  uint32_t vgprCount = 0;
  uint32_t agprCount = 0;
  uint32_t sgprCount = 0;
  uint32_t ldsBytes = 0;
  uint32_t privateSegmentBytes = 0;
  uint32_t vgprSpillCount = 0;
  uint32_t sgprSpillCount = 0;
  uint32_t wavefrontSize = 0;
  uint32_t maxFlatWorkgroupSize = 0;
};

/// Every kernel described by the metadata note of `hsaco`, in note order.
llvm::Expected<std::vector<KernelResources>>
readKernelResources(llvm::ArrayRef<uint8_t> hsaco);

} // namespace moec

#endif // MOEC_COMPILER_CODEOBJECTMETADATA_H
