//===- ResourceCheck.cpp - the descriptor covers what the code names ------===//
//
// The AMDHSA kernel descriptor (LLVM's AMDGPUUsage, "Kernel Descriptor"):
// group_segment_fixed_size at byte 0, private_segment_fixed_size at 4,
// compute_pgm_rsrc3 at 44, compute_pgm_rsrc1 at 48, compute_pgm_rsrc2 at 52.
// On gfx90a and later (wave64) GRANULATED_WORKITEM_VGPR_COUNT (rsrc1 bits
// 5:0) grants (value + 1) x 8 registers of the unified VGPR + AGPR file,
// ACCUM_OFFSET (rsrc3 bits 5:0) puts the AGPRs at (value + 1) x 4, and
// GRANULATED_WAVEFRONT_SGPR_COUNT (rsrc1 bits 9:6) grants (value + 1) x 8
// SGPRs (the encoding granule of gfx9; the hardware allocates in 16s).
//
//===----------------------------------------------------------------------===//

#include "moec/Isa/Checks.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstring>

namespace moec::isacheck {

namespace {

uint32_t word(const std::vector<uint8_t> &bytes, size_t offset) {
  uint32_t value = 0;
  std::memcpy(&value, bytes.data() + offset, 4);
  return value;
}

/// The byte offset an LDS instruction names with its immediates, scaled
/// for ds_read2/ds_write2 (offset0/offset1 count elements), or 0.
uint64_t ldsImmediateOffset(const Instruction &inst, unsigned width) {
  llvm::StringRef ops = inst.operands;
  uint64_t largest = 0;
  for (llvm::StringRef key : {"offset:", "offset0:", "offset1:"}) {
    size_t at = ops.find(key);
    if (at == llvm::StringRef::npos)
      continue;
    llvm::StringRef digits = ops.drop_front(at + key.size());
    digits = digits.take_while([](char c) { return c >= '0' && c <= '9'; });
    uint64_t value = 0;
    if (digits.getAsInteger(10, value))
      continue;
    if (key != "offset:")
      value *= width;
    largest = std::max(largest, value);
  }
  return largest;
}

} // namespace

bool decodeDescriptor(const std::vector<uint8_t> &descriptor,
                      DescriptorGrant &grant, std::string &error) {
  if (descriptor.size() != 64) {
    error = "the kernel descriptor has " + std::to_string(descriptor.size()) +
            " bytes, not 64";
    return false;
  }
  const uint32_t rsrc1 = word(descriptor, 48), rsrc3 = word(descriptor, 44);
  grant.groupSegmentBytes = word(descriptor, 0);
  grant.privateSegmentBytes = word(descriptor, 4);
  grant.vgprs = ((rsrc1 & 0x3f) + 1) * 8;
  grant.sgprs = (((rsrc1 >> 6) & 0xf) + 1) * 8;
  grant.archVgprs = ((rsrc3 & 0x3f) + 1) * 4;
  return true;
}

Findings checkResources(const DecodedKernel &kernel) {
  Findings findings;
  DescriptorGrant grant;
  std::string error;
  if (!decodeDescriptor(kernel.descriptor, grant, error)) {
    findings.push_back({"resource.descriptor", kWholeKernel, error, 0});
    return findings;
  }
  int maxVgpr = -1, maxAgpr = -1, maxSgpr = -1;
  uint64_t maxVgprAt = 0, maxAgprAt = 0, maxSgprAt = 0;
  bool scratch = false;
  uint64_t scratchAt = 0;
  for (const Instruction &inst : kernel.instructions) {
    for (const RegOperand &op : inst.regs)
      for (RegUnit u : op.units) {
        if (reg::isVgpr(u) && int(u - reg::kVgpr0) > maxVgpr) {
          maxVgpr = u - reg::kVgpr0;
          maxVgprAt = inst.address;
        } else if (reg::isAgpr(u) && int(u - reg::kAgpr0) > maxAgpr) {
          maxAgpr = u - reg::kAgpr0;
          maxAgprAt = inst.address;
        } else if (u >= reg::kSgpr0 && u < reg::kTtmp0 &&
                   int(u - reg::kSgpr0) > maxSgpr) {
          maxSgpr = u - reg::kSgpr0;
          maxSgprAt = inst.address;
        }
      }
    if (!scratch && llvm::StringRef(inst.mnemonic).starts_with("scratch_")) {
      scratch = true;
      scratchAt = inst.address;
    }
    if (inst.kind == InstClass::DsRead || inst.kind == InstClass::DsWrite) {
      const uint64_t offset = ldsImmediateOffset(inst, 4);
      if (grant.groupSegmentBytes > 0 && offset >= grant.groupSegmentBytes)
        findings.push_back(
            {"resource.lds-offset", inst.address,
             inst.text() + ": its immediate offset " + std::to_string(offset) +
                 " lies outside the " +
                 std::to_string(grant.groupSegmentBytes) +
                 "-byte group segment",
             0});
    }
  }
  const unsigned agprBase = maxAgpr >= 0 ? grant.archVgprs : 0;
  if (maxVgpr >= 0 && unsigned(maxVgpr) >= (maxAgpr >= 0 ? grant.archVgprs
                                                         : grant.vgprs))
    findings.push_back(
        {"resource.vgpr", maxVgprAt,
         "the code names v" + std::to_string(maxVgpr) + " (at 0x" +
             llvm::utohexstr(maxVgprAt, true) + ") but the descriptor grants " +
             std::to_string(maxAgpr >= 0 ? grant.archVgprs : grant.vgprs) +
             " architected VGPRs",
         0});
  if (maxAgpr >= 0 && agprBase + unsigned(maxAgpr) >= grant.vgprs)
    findings.push_back(
        {"resource.agpr", maxAgprAt,
         "the code names a" + std::to_string(maxAgpr) + " (at 0x" +
             llvm::utohexstr(maxAgprAt, true) +
             "), register " + std::to_string(agprBase + maxAgpr) +
             " of the unified file, but the descriptor grants " +
             std::to_string(grant.vgprs),
         0});
  if (maxSgpr >= 0 && unsigned(maxSgpr) >= grant.sgprs)
    findings.push_back(
        {"resource.sgpr", maxSgprAt,
         "the code names s" + std::to_string(maxSgpr) + " (at 0x" +
             llvm::utohexstr(maxSgprAt, true) + ") but the descriptor grants " +
             std::to_string(grant.sgprs) + " SGPRs",
         0});
  if (scratch && grant.privateSegmentBytes == 0)
    findings.push_back({"resource.scratch", scratchAt,
                        "a scratch access without a private segment", 0});
  return findings;
}

} // namespace moec::isacheck
