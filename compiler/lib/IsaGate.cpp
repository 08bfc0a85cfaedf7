//===- IsaGate.cpp - ISA checks on every kernel, hazards repaired ---------===//

#include "IsaGate.h"

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Isa/Decoder.h"
#include "moec/Isa/Repair.h"

namespace moec {

llvm::Error applyIsaGate(mlir::ModuleOp kernelIR, llvm::StringRef symbol,
                         const CompileTarget &target,
                         const isacheck::KernelExpectation &expected,
                         std::vector<uint8_t> &hsaco,
                         std::vector<rt::IsaRepairInfo> &repairs) {
  auto verify = [&](llvm::ArrayRef<uint8_t> object)
      -> llvm::Expected<isacheck::Findings> {
    auto checked = isacheck::verifyKernel(object, symbol, target.chip, expected);
    if (!checked)
      return llvm::createStringError("cannot be decoded (ISA gate): " +
                                     llvm::toString(checked.takeError()));
    return std::move(checked->findings);
  };
  llvm::Expected<isacheck::Findings> findings = verify(hsaco);
  if (!findings)
    return findings.takeError();
  if (findings->empty())
    return llvm::Error::success();

  auto text = compileKernelAssembly(kernelIR, symbol, target);
  if (!text)
    return text.takeError();
  auto build = [&](llvm::StringRef asmText) -> llvm::Expected<std::vector<uint8_t>> {
    auto object = isacheck::assembleObject(asmText, target.chip.arch, target.features);
    if (!object)
      return object.takeError();
    return linkHsaco(*object);
  };
  auto repaired = isacheck::repairHazards(hsaco, symbol, target.chip.arch, *text,
                                          std::move(*findings), build, verify);
  if (!repaired)
    return llvm::createStringError("fails the ISA gate: " +
                                   llvm::toString(repaired.takeError()));
  hsaco = std::move(repaired->object);
  repairs.clear();
  for (const isacheck::NopRepair &r : repaired->repairs)
    repairs.push_back({uint32_t(r.address), r.waitStates, r.rule});
  return llvm::Error::success();
}

} // namespace moec
