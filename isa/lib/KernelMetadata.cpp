//===- KernelMetadata.cpp - a code object's NT_AMDGPU_METADATA ------------===//

#include "moec/Isa/KernelMetadata.h"

#include "llvm/BinaryFormat/ELF.h"
#include "llvm/Object/ELF.h"
#include "llvm/Object/ELFTypes.h"

using namespace llvm;

namespace moec::isacheck {

Error readAmdgpuMetadata(ArrayRef<uint8_t> elf, msgpack::Document &document) {
  auto file = object::ELFFile<object::ELF64LE>::create(
      StringRef(reinterpret_cast<const char *>(elf.data()), elf.size()));
  if (!file)
    return file.takeError();
  if (file->getHeader().e_machine != ELF::EM_AMDGPU)
    return createStringError("not an AMDGPU code object");
  auto sections = file->sections();
  if (!sections)
    return sections.takeError();
  for (const auto &section : *sections) {
    if (section.sh_type != ELF::SHT_NOTE)
      continue;
    Error noteError = Error::success();
    for (const auto &note : file->notes(section, noteError)) {
      if (note.getName() != "AMDGPU" ||
          note.getType() != ELF::NT_AMDGPU_METADATA)
        continue;
      ArrayRef<uint8_t> desc = note.getDesc(section.sh_addralign);
      if (!document.readFromBlob(
              StringRef(reinterpret_cast<const char *>(desc.data()),
                        desc.size()),
              /*Multi=*/false)) {
        consumeError(std::move(noteError));
        return createStringError("malformed NT_AMDGPU_METADATA msgpack");
      }
      consumeError(std::move(noteError));
      return Error::success();
    }
    if (noteError)
      return noteError;
  }
  return createStringError("no NT_AMDGPU_METADATA note in the code object");
}

namespace {

Expected<uint32_t> readUnsigned(msgpack::MapDocNode &map, StringRef field,
                                bool required) {
  auto it = map.find(field);
  if (it == map.end()) {
    if (required)
      return createStringError("metadata field " + field.str() +
                               " is missing");
    return 0u;
  }
  if (it->second.getKind() == msgpack::Type::UInt)
    return uint32_t(it->second.getUInt());
  if (it->second.getKind() == msgpack::Type::Int && it->second.getInt() >= 0)
    return uint32_t(it->second.getInt());
  return createStringError("metadata field " + field.str() +
                           " is not an unsigned integer");
}

std::string readText(msgpack::MapDocNode &map, StringRef field) {
  auto it = map.find(field);
  if (it == map.end() || it->second.getKind() != msgpack::Type::String)
    return "";
  return it->second.getString().str();
}

} // namespace

Expected<std::vector<msgpack::MapDocNode *>>
readAmdhsaKernels(ArrayRef<uint8_t> elf, msgpack::Document &document) {
  if (Error error = readAmdgpuMetadata(elf, document))
    return std::move(error);
  msgpack::DocNode &root = document.getRoot();
  if (root.getKind() != msgpack::Type::Map)
    return createStringError("NT_AMDGPU_METADATA root is not a map");
  auto kernels = root.getMap().find("amdhsa.kernels");
  if (kernels == root.getMap().end() ||
      kernels->second.getKind() != msgpack::Type::Array)
    return createStringError("NT_AMDGPU_METADATA has no amdhsa.kernels");
  std::vector<msgpack::MapDocNode *> out;
  for (msgpack::DocNode &node : kernels->second.getArray()) {
    if (node.getKind() != msgpack::Type::Map)
      return createStringError("amdhsa.kernels entry is not a map");
    out.push_back(&node.getMap());
  }
  return out;
}

Expected<KernelAbiMetadata> readKernelAbi(ArrayRef<uint8_t> elf,
                                          StringRef symbol) {
  msgpack::Document document;
  Expected<std::vector<msgpack::MapDocNode *>> kernels =
      readAmdhsaKernels(elf, document);
  if (!kernels)
    return kernels.takeError();
  symbol.consume_back(".kd");
  for (msgpack::MapDocNode *node : *kernels) {
    msgpack::MapDocNode &kernel = *node;
    KernelAbiMetadata out;
    out.name = readText(kernel, ".name");
    out.symbol = readText(kernel, ".symbol");
    if (StringRef(out.symbol) != (symbol + ".kd").str() &&
        StringRef(out.symbol) != symbol)
      continue;
    struct Field {
      const char *key;
      uint32_t *slot;
    } fields[] = {{".kernarg_segment_size", &out.kernargSegmentSize},
                  {".kernarg_segment_align", &out.kernargSegmentAlign},
                  {".max_flat_workgroup_size", &out.maxFlatWorkgroupSize},
                  {".wavefront_size", &out.wavefrontSize}};
    for (Field &field : fields) {
      Expected<uint32_t> value = readUnsigned(kernel, field.key, true);
      if (!value)
        return value.takeError();
      *field.slot = *value;
    }
    auto args = kernel.find(".args");
    if (args != kernel.end()) {
      if (args->second.getKind() != msgpack::Type::Array)
        return createStringError("metadata field .args is not an array");
      for (msgpack::DocNode &argNode : args->second.getArray()) {
        if (argNode.getKind() != msgpack::Type::Map)
          return createStringError(".args entry is not a map");
        msgpack::MapDocNode &arg = argNode.getMap();
        KernargEntry entry;
        entry.name = readText(arg, ".name");
        entry.valueKind = readText(arg, ".value_kind");
        Expected<uint32_t> offset = readUnsigned(arg, ".offset", true);
        Expected<uint32_t> size = readUnsigned(arg, ".size", true);
        if (!offset)
          return offset.takeError();
        if (!size)
          return size.takeError();
        entry.offset = *offset;
        entry.size = *size;
        out.args.push_back(std::move(entry));
      }
    }
    return out;
  }
  return createStringError("no kernel '" + symbol.str() +
                           "' in the code object's metadata");
}

} // namespace moec::isacheck
