//===- AbiCheck.cpp - the code object's kernargs are the runtime's --------===//

#include "moec/Isa/Verify.h"

namespace moec::isacheck {

namespace {

/// The metadata value kind of an argument the runtime writes.
const char *valueKindOf(abi::ArgKind kind) {
  return kind == abi::ArgKind::Buffer ? "global_buffer" : "by_value";
}

} // namespace

Findings checkKernelAbi(const KernelAbiMetadata &metadata,
                        const KernelExpectation &expected,
                        const target::TargetInfo &chip) {
  Findings findings;
  auto add = [&](const char *rule, std::string message) {
    findings.push_back({rule, kWholeKernel, std::move(message), 0});
  };
  std::vector<const KernargEntry *> explicitArgs;
  unsigned explicitEnd = 0, hiddenBegin = ~0u;
  for (const KernargEntry &entry : metadata.args) {
    if (entry.hidden()) {
      hiddenBegin = std::min(hiddenBegin, entry.offset);
      continue;
    }
    explicitArgs.push_back(&entry);
  }
  if (explicitArgs.size() != expected.args.size())
    add("abi.arg-count",
        "the code object declares " + std::to_string(explicitArgs.size()) +
            " explicit kernel arguments; the runtime writes " +
            std::to_string(expected.args.size()));
  const size_t common = std::min(explicitArgs.size(), expected.args.size());
  unsigned end = 0;
  for (size_t i = 0; i < common; ++i) {
    const KernargEntry &entry = *explicitArgs[i];
    const abi::ArgKind kind = expected.args[i];
    const unsigned offset = abi::kernargOffset(end, kind);
    const unsigned size = abi::kernargSize(kind);
    end = offset + size;
    const std::string what = "argument " + std::to_string(i) +
                             (entry.name.empty() ? "" : " '" + entry.name + "'");
    if (entry.offset != offset)
      add("abi.arg-offset", what + " is at kernarg offset " +
                                std::to_string(entry.offset) +
                                "; the runtime writes it at " +
                                std::to_string(offset));
    if (entry.size != size)
      add("abi.arg-size", what + " has " + std::to_string(entry.size) +
                              " bytes; the runtime writes " +
                              std::to_string(size) + " (" +
                              abi::argKindName(kind) + ")");
    if (entry.valueKind != valueKindOf(kind))
      add("abi.arg-kind", what + " is " + entry.valueKind +
                              "; the runtime passes a " +
                              abi::argKindName(kind) + " (" +
                              valueKindOf(kind) + ")");
    explicitEnd = std::max(explicitEnd, entry.offset + entry.size);
  }
  for (size_t i = 0; i < expected.args.size(); ++i)
    if (i >= common) {
      const unsigned offset = abi::kernargOffset(end, expected.args[i]);
      end = offset + abi::kernargSize(expected.args[i]);
    }
  explicitEnd = std::max(explicitEnd, end);
  if (hiddenBegin != ~0u && hiddenBegin < explicitEnd)
    add("abi.hidden-overlap",
        "a hidden argument starts at kernarg offset " +
            std::to_string(hiddenBegin) +
            ", inside the explicit arguments (which end at " +
            std::to_string(explicitEnd) + ")");
  if (metadata.kernargSegmentSize < explicitEnd)
    add("abi.kernarg-size",
        ".kernarg_segment_size is " +
            std::to_string(metadata.kernargSegmentSize) +
            " bytes; the arguments the runtime writes end at " +
            std::to_string(explicitEnd));
  if (metadata.kernargSegmentAlign < 8 ||
      (metadata.kernargSegmentAlign & (metadata.kernargSegmentAlign - 1)))
    add("abi.kernarg-align", ".kernarg_segment_align is " +
                                 std::to_string(metadata.kernargSegmentAlign) +
                                 "; the runtime's 8-byte pointers need 8");
  if (expected.workgroupSize &&
      expected.workgroupSize > metadata.maxFlatWorkgroupSize)
    add("abi.workgroup-size",
        "the runtime launches " + std::to_string(expected.workgroupSize) +
            " threads per workgroup; .max_flat_workgroup_size is " +
            std::to_string(metadata.maxFlatWorkgroupSize));
  if (metadata.wavefrontSize != chip.wavefrontSize)
    add("abi.wavefront-size",
        ".wavefront_size is " + std::to_string(metadata.wavefrontSize) + "; " +
            chip.name + " runs waves of " +
            std::to_string(chip.wavefrontSize));
  return findings;
}

} // namespace moec::isacheck
