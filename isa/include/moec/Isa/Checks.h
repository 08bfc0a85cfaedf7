//===- Checks.h - the ISA checks of one kernel -------------------*- C++ -*-===//
///
/// \file
/// Each check reads one decoded kernel (and its control-flow graph) and
/// returns what it found; docs/isa-verification.md lists the rules.
///  - checkWaits: every read (and overwrite) of a register a memory load
///    writes, every LDS read after an LDS DMA and every s_barrier after LDS
///    writes is preceded, on every path, by an s_waitcnt that retires them.
///  - checkHazards: the chip's hazard rules (moec/target/hazard_rules.h):
///    enough wait states between each producer and consumer on every path.
///  - checkResources: the kernel descriptor covers every register the code
///    names; no scratch access without a private segment.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_CHECKS_H
#define MOEC_ISA_CHECKS_H

#include "moec/Isa/ControlFlow.h"
#include "moec/Isa/Finding.h"
#include "moec/target/hazard_rules.h"

namespace moec::isacheck {

Findings checkWaits(const DecodedKernel &kernel, const ControlFlowGraph &cfg);

Findings checkHazards(const DecodedKernel &kernel, const ControlFlowGraph &cfg,
                      const target::HazardTable &rules);

/// Registers and segments the kernel descriptor grants, decoded from its 64
/// bytes (the AMDHSA kernel descriptor, code object v4 and later).
struct DescriptorGrant {
  unsigned vgprs = 0;      ///< unified VGPR + AGPR file, per lane
  unsigned archVgprs = 0;  ///< architected VGPRs: the AGPRs start here
  unsigned sgprs = 0;      ///< SGPRs the wave is given
  uint32_t groupSegmentBytes = 0;
  uint32_t privateSegmentBytes = 0;
};
/// Fails (returns false, with `error`) for a descriptor of another size.
bool decodeDescriptor(const std::vector<uint8_t> &descriptor,
                      DescriptorGrant &grant, std::string &error);

Findings checkResources(const DecodedKernel &kernel);

} // namespace moec::isacheck

#endif // MOEC_ISA_CHECKS_H
