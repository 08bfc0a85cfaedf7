//===- IsaGate.cpp - ISA checks on every kernel, hazards repaired ---------===//

#include "IsaGate.h"

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Isa/Decoder.h"
#include "moec/Isa/Repair.h"

#include "llvm/ADT/StringExtras.h"

#include <map>

namespace moec {

namespace {

/// Rounds of repair before the gate gives up. One suffices when every
/// finding is a hazard: added s_nops only lengthen distances. A second
/// covers a loop's alignment padding moving.
constexpr unsigned kMaxRepairRounds = 3;

std::string describe(const isacheck::Findings &findings) {
  const isacheck::Finding &first = findings.front();
  return "fails the ISA gate with " + std::to_string(findings.size()) +
         " finding(s), the first at 0x" + llvm::utohexstr(first.address, true) +
         ", " + first.rule + ": " + first.message;
}

/// For each non-s_nop instruction of `now` (a repair of `original`), the
/// address it had in `original`. checkOnlyNopsAdded has matched them.
std::map<uint64_t, uint64_t>
originalAddresses(const isacheck::DecodedKernel &original,
                  const isacheck::DecodedKernel &now) {
  std::map<uint64_t, uint64_t> out;
  size_t i = 0;
  for (const isacheck::Instruction &inst : now.instructions) {
    if (inst.kind == isacheck::InstClass::Nop)
      continue;
    while (i < original.instructions.size() &&
           original.instructions[i].kind == isacheck::InstClass::Nop)
      ++i;
    if (i == original.instructions.size())
      break;
    out[inst.address] = original.instructions[i++].address;
  }
  return out;
}

} // namespace

llvm::Error applyIsaGate(mlir::ModuleOp kernelIR, llvm::StringRef symbol,
                         const CompileTarget &target,
                         const isacheck::KernelExpectation &expected,
                         std::vector<uint8_t> &hsaco,
                         std::vector<rt::IsaRepairInfo> &repairs) {
  auto verify = [&](const std::vector<uint8_t> &object)
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

  auto original = isacheck::decodeKernel(hsaco, symbol, target.chip.arch);
  if (!original)
    return original.takeError();
  auto text = compileKernelAssembly(kernelIR, symbol, target);
  if (!text)
    return text.takeError();
  isacheck::DecodedKernel current = *original;
  std::string currentText = std::move(*text);
  std::vector<rt::IsaRepairInfo> made;
  for (unsigned round = 0; round < kMaxRepairRounds; ++round) {
    auto plan = isacheck::planNopRepairs(*findings);
    if (!plan) {
      llvm::consumeError(plan.takeError());
      return llvm::createStringError(describe(*findings));
    }
    const std::map<uint64_t, uint64_t> back =
        originalAddresses(*original, current);
    for (const isacheck::NopRepair &r : *plan) {
      auto at = back.find(r.address);
      made.push_back({uint32_t(at == back.end() ? r.address : at->second),
                      r.waitStates, r.rule});
    }
    auto repairedText = isacheck::insertNops(currentText, current, *plan);
    if (!repairedText)
      return llvm::createStringError(
          describe(*findings) +
          "; the repair failed: " + llvm::toString(repairedText.takeError()));
    auto object = isacheck::assembleObject(*repairedText, target.chip.arch,
                                           target.features);
    if (!object)
      return object.takeError();
    auto linked = linkHsaco(*object);
    if (!linked)
      return linked.takeError();
    auto decoded = isacheck::decodeKernel(*linked, symbol, target.chip.arch);
    if (!decoded)
      return decoded.takeError();
    if (llvm::Error e = isacheck::checkOnlyNopsAdded(*original, *decoded))
      return llvm::createStringError("the ISA gate's repair is unsound: " +
                                     llvm::toString(std::move(e)));
    findings = verify(*linked);
    if (!findings)
      return findings.takeError();
    hsaco = std::move(*linked);
    current = std::move(*decoded);
    currentText = std::move(*repairedText);
    if (findings->empty()) {
      repairs = std::move(made);
      return llvm::Error::success();
    }
  }
  return llvm::createStringError(describe(*findings) + " after " +
                                 std::to_string(kMaxRepairRounds) +
                                 " rounds of repair");
}

} // namespace moec
