//===- KernelMetadata.h - a code object's NT_AMDGPU_METADATA -----*- C++ -*-===//
///
/// \file
/// Reads the msgpack note every AMDGPU code object carries (LLVM's
/// AMDGPUUsage, "Code Object V3 and Above Metadata") and the facts of one
/// kernel the kernel-ABI check compares with what the runtime writes.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_KERNELMETADATA_H
#define MOEC_ISA_KERNELMETADATA_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/BinaryFormat/MsgPackDocument.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::isacheck {

/// Parses the code object's NT_AMDGPU_METADATA note into `document`; fails
/// when the ELF is not an AMDGPU object or has no such note.
llvm::Error readAmdgpuMetadata(llvm::ArrayRef<uint8_t> elf,
                               llvm::msgpack::Document &document);

/// The kernels of the code object's metadata (`amdhsa.kernels`, each a
/// map), parsed into `document`, which owns them; fails naming what is
/// missing or malformed.
llvm::Expected<std::vector<llvm::msgpack::MapDocNode *>>
readAmdhsaKernels(llvm::ArrayRef<uint8_t> elf,
                  llvm::msgpack::Document &document);

/// One entry of a kernel's `.args`.
struct KernargEntry {
  std::string name;
  std::string valueKind; ///< "global_buffer", "by_value", "hidden_..."
  uint32_t offset = 0, size = 0;
  bool hidden() const { return valueKind.rfind("hidden_", 0) == 0; }
};

/// The ABI facts of one kernel of the metadata.
struct KernelAbiMetadata {
  std::string name, symbol;
  std::vector<KernargEntry> args;
  uint32_t kernargSegmentSize = 0, kernargSegmentAlign = 0;
  uint32_t maxFlatWorkgroupSize = 0, wavefrontSize = 0;
};

/// The ABI facts of the kernel whose `.symbol` is `symbol` (with or without
/// ".kd").
llvm::Expected<KernelAbiMetadata> readKernelAbi(llvm::ArrayRef<uint8_t> elf,
                                                llvm::StringRef symbol);

} // namespace moec::isacheck

#endif // MOEC_ISA_KERNELMETADATA_H
