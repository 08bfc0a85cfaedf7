//===- CodeObjectMetadata.cpp - resources from NT_AMDGPU_METADATA ---------===//

#include "moec/Compiler/CodeObjectMetadata.h"

#include "moec/Isa/KernelMetadata.h"

#include "llvm/BinaryFormat/MsgPackDocument.h"

using namespace llvm;

namespace {

/// Reads an unsigned integer field of a kernel map; absent fields are 0
/// (the backend omits, for example, .agpr_count on chips without AGPRs).
Expected<uint32_t> readCount(msgpack::MapDocNode &kernel, StringRef field) {
  auto it = kernel.find(field);
  if (it == kernel.end())
    return 0u;
  msgpack::DocNode &node = it->second;
  if (node.getKind() == msgpack::Type::UInt)
    return static_cast<uint32_t>(node.getUInt());
  if (node.getKind() == msgpack::Type::Int && node.getInt() >= 0)
    return static_cast<uint32_t>(node.getInt());
  return createStringError("metadata field " + field.str() +
                           " is not an unsigned integer");
}

Expected<std::string> readString(msgpack::MapDocNode &kernel, StringRef field) {
  auto it = kernel.find(field);
  if (it == kernel.end() || it->second.getKind() != msgpack::Type::String)
    return createStringError("metadata field " + field.str() +
                             " is missing or not a string");
  return it->second.getString().str();
}

Expected<moec::CodeObjectKernel> readKernel(msgpack::MapDocNode &kernel) {
  moec::CodeObjectKernel out;
  moec::rt::KernelResources &r = out.resources;
  auto name = readString(kernel, ".name");
  if (!name)
    return name.takeError();
  out.name = *name;
  auto symbol = readString(kernel, ".symbol");
  if (!symbol)
    return symbol.takeError();
  out.symbol = *symbol;
  // `.vgpr_count` is LLVM's unified count on gfx90a and later (the
  // architected VGPRs, aligned to 4 when AGPRs are used, plus the
  // `.agpr_count` AGPRs), not the architected registers alone; the
  // occupancy model takes it as it is (docs/targets.md).
  struct Field {
    const char *key;
    uint32_t *slot;
  } fields[] = {{".vgpr_count", &r.vgpr},
                {".agpr_count", &r.agpr},
                {".sgpr_count", &r.sgpr},
                {".group_segment_fixed_size", &r.ldsBytes},
                {".private_segment_fixed_size", &r.privateSegmentBytes},
                {".vgpr_spill_count", &r.vgprSpill},
                {".sgpr_spill_count", &r.sgprSpill},
                {".wavefront_size", &r.wavefrontSize},
                {".max_flat_workgroup_size", &r.maxFlatWorkgroupSize}};
  for (Field &field : fields) {
    auto value = readCount(kernel, field.key);
    if (!value)
      return value.takeError();
    *field.slot = *value;
  }
  return out;
}

} // namespace

Expected<std::vector<moec::CodeObjectKernel>>
moec::readKernelResources(ArrayRef<uint8_t> hsaco) {
  msgpack::Document document;
  auto kernels = isacheck::readAmdhsaKernels(hsaco, document);
  if (!kernels)
    return kernels.takeError();
  std::vector<CodeObjectKernel> result;
  for (msgpack::MapDocNode *kernel : *kernels) {
    auto resources = readKernel(*kernel);
    if (!resources)
      return resources.takeError();
    result.push_back(std::move(*resources));
  }
  return result;
}
