//===- McLayer.h - LLVM's AMDGPU MC objects for one subtarget ----*- C++ -*-===//
//
// The decoder and the repair's assembler both need the same MC objects
// (register, asm and instruction info and the subtarget); this builds them.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_LIB_MCLAYER_H
#define MOEC_ISA_LIB_MCLAYER_H

#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCTargetOptions.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Error.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>

namespace moec::isacheck {

/// The AMDGPU MC objects of one subtarget (amdgcn-amd-amdhsa, `mcpu`,
/// `features`); the targets' MC, disassembler and assembly parser are
/// registered on first use.
struct McLayer {
  llvm::Triple triple{"amdgcn-amd-amdhsa"};
  const llvm::Target *target = nullptr;
  llvm::MCTargetOptions options;
  std::unique_ptr<llvm::MCRegisterInfo> registers;
  std::unique_ptr<llvm::MCAsmInfo> asmInfo;
  std::unique_ptr<llvm::MCSubtargetInfo> subtarget;
  std::unique_ptr<llvm::MCInstrInfo> instructions;

  static llvm::Expected<std::unique_ptr<McLayer>>
  create(llvm::StringRef mcpu, llvm::StringRef features);
};

} // namespace moec::isacheck

#endif // MOEC_ISA_LIB_MCLAYER_H
