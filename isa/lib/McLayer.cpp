//===- McLayer.cpp - LLVM's AMDGPU MC objects for one subtarget -----------===//

#include "McLayer.h"

#include "llvm/Support/TargetSelect.h"

#include <mutex>

using namespace llvm;

namespace moec::isacheck {

Expected<std::unique_ptr<McLayer>> McLayer::create(StringRef mcpu,
                                                   StringRef features) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUDisassembler();
    LLVMInitializeAMDGPUAsmParser();
  });
  auto mc = std::make_unique<McLayer>();
  std::string error;
  mc->target = TargetRegistry::lookupTarget(mc->triple, error);
  if (!mc->target)
    return createStringError(error);
  mc->registers.reset(mc->target->createMCRegInfo(mc->triple));
  if (mc->registers)
    mc->asmInfo.reset(
        mc->target->createMCAsmInfo(*mc->registers, mc->triple, mc->options));
  mc->subtarget.reset(
      mc->target->createMCSubtargetInfo(mc->triple, mcpu, features));
  mc->instructions.reset(mc->target->createMCInstrInfo());
  if (!mc->registers || !mc->asmInfo || !mc->subtarget || !mc->instructions)
    return createStringError("no AMDGPU MC layer for " + mcpu.str());
  return std::move(mc);
}

} // namespace moec::isacheck
