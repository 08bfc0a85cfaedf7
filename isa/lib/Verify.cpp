//===- Verify.cpp - the ISA verifier of one code object -------------------===//

#include "moec/Isa/Verify.h"
#include "moec/Isa/Checks.h"

#include "llvm/ADT/StringExtras.h"

namespace moec::isacheck {

llvm::Expected<KernelVerification>
verifyKernel(llvm::ArrayRef<uint8_t> elf, llvm::StringRef symbol,
             const target::TargetInfo &chip,
             const std::optional<KernelExpectation> &expected) {
  llvm::Expected<DecodedKernel> kernel = decodeKernel(elf, symbol, chip.arch);
  if (!kernel)
    return kernel.takeError();
  KernelVerification out;
  out.instructions = kernel->instructions.size();
  Findings &findings = out.findings;
  if (kernel->undecoded)
    findings.push_back({"decode", kWholeKernel,
                        std::to_string(kernel->undecoded) +
                            " words the disassembler cannot decode",
                        0});
  const ControlFlowGraph cfg = buildControlFlow(*kernel);
  out.blocks = cfg.blocks.size();
  for (size_t i : cfg.unresolvedBranches)
    findings.push_back({"decode.branch", kernel->instructions[i].address,
                        kernel->instructions[i].text() +
                            ": a branch whose target is not in the kernel",
                        0});
  auto append = [&](Findings more) {
    findings.insert(findings.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  };
  append(checkWaits(*kernel, cfg));
  if (chip.hazards) {
    append(checkHazards(*kernel, cfg, *chip.hazards));
    out.hazardsChecked = true;
  }
  append(checkResources(*kernel));
  if (expected) {
    llvm::Expected<KernelAbiMetadata> metadata = readKernelAbi(elf, symbol);
    if (!metadata)
      return metadata.takeError();
    append(checkKernelAbi(*metadata, *expected, chip));
  }
  return out;
}

std::string formatFindings(llvm::StringRef kernel, const Findings &findings) {
  std::string out;
  for (const Finding &f : findings) {
    out += kernel.str() + ": ";
    if (f.atInstruction())
      out += "0x" + llvm::utohexstr(f.address, true) + ": ";
    out += f.rule + ": " + f.message + "\n";
  }
  return out;
}

} // namespace moec::isacheck
