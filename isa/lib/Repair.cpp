//===- Repair.cpp - s_nops inserted into LLVM's assembly, re-assembled ----===//
//
// The repair works on the assembly text rather than on the bytes: inserting
// an instruction moves every later address, and MC re-resolves the branches,
// the loop alignment and the kernel descriptor from the text, as it did for
// the original object.
//
//===----------------------------------------------------------------------===//

#include "moec/Isa/Repair.h"

#include "McLayer.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCAsmBackend.h"
#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCCodeEmitter.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCObjectFileInfo.h"
#include "llvm/MC/MCObjectWriter.h"
#include "llvm/MC/MCParser/MCAsmParser.h"
#include "llvm/MC/MCParser/MCTargetAsmParser.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCStreamer.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCTargetOptions.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <algorithm>
#include <map>
#include <mutex>

using namespace llvm;

namespace moec::isacheck {

namespace {

/// The rules an s_nop cannot fix: they are not about wait states.
bool isHazardRule(StringRef rule) {
  return !rule.starts_with("wait.") && !rule.starts_with("abi.") &&
         !rule.starts_with("resource.") && !rule.starts_with("decode");
}

/// The mnemonic of an assembly line that is an instruction, else empty
/// (blank lines, comments, labels and directives).
StringRef instructionMnemonic(StringRef line) {
  line = line.trim();
  if (line.empty() || line.starts_with(";") || line.starts_with(".") ||
      line.starts_with("//"))
    return {};
  StringRef first = line.take_until([](char c) { return isSpace(c); });
  if (first.ends_with(":"))
    return {}; // a label
  return first;
}

/// `s_nop` lines giving `waitStates`, at most 8 per s_nop as LLVM's own
/// hazard recognizer emits them.
std::string nopLines(unsigned waitStates) {
  std::string out;
  while (waitStates > 0) {
    const unsigned n = std::min(waitStates, 8u);
    out += "\ts_nop " + std::to_string(n - 1) +
           "                                ; moec ISA gate repair\n";
    waitStates -= n;
  }
  return out;
}

} // namespace

Expected<std::vector<NopRepair>> planNopRepairs(const Findings &findings) {
  std::map<uint64_t, NopRepair> byAddress;
  for (const Finding &f : findings) {
    if (!isHazardRule(f.rule) || f.missingWaitStates == 0)
      return createStringError(
          (f.atInstruction() ? "0x" + utohexstr(f.address, true) + ": " : "") +
          f.rule + " is not repaired by wait states");
    NopRepair &r = byAddress[f.address];
    if (f.missingWaitStates > r.waitStates) {
      r = {f.address, f.missingWaitStates, f.rule};
    }
  }
  std::vector<NopRepair> out;
  for (auto &[address, repair] : byAddress)
    out.push_back(std::move(repair));
  return out;
}

Expected<std::string> insertNops(StringRef asmText, const DecodedKernel &kernel,
                                 ArrayRef<NopRepair> repairs) {
  const std::string label = kernel.symbol + ":";
  SmallVector<StringRef> lines;
  asmText.split(lines, '\n');
  size_t at = 0;
  // "name:                                   ; @name"
  auto isLabel = [&](StringRef line) {
    if (!line.consume_front(label))
      return false;
    line = line.ltrim();
    return line.empty() || line.starts_with(";");
  };
  while (at < lines.size() && !isLabel(lines[at]))
    ++at;
  if (at == lines.size())
    return createStringError("the assembly has no label '" + label + "'");
  std::map<uint64_t, unsigned> wanted;
  for (const NopRepair &r : repairs)
    wanted[r.address] = r.waitStates;

  std::string out;
  for (size_t i = 0; i <= at; ++i)
    out += lines[i].str() + "\n";
  const std::vector<Instruction> &insts = kernel.instructions;
  size_t next = 0; // the decoded instruction the next text one must match
  bool ended = false;
  for (size_t i = at + 1; i < lines.size(); ++i) {
    StringRef line = lines[i];
    StringRef mnemonic = ended ? StringRef() : instructionMnemonic(line);
    if (!mnemonic.empty()) {
      while (next < insts.size() && insts[next].mnemonic != mnemonic &&
             insts[next].kind == InstClass::Nop)
        ++next; // alignment padding the assembler adds
      if (next == insts.size() || insts[next].mnemonic != mnemonic)
        return createStringError(
            "the assembly's '" + mnemonic.str() + "' does not match the code " +
            (next == insts.size()
                 ? std::string("object's end")
                 : "object's " + insts[next].mnemonic + " at 0x" +
                       utohexstr(insts[next].address, true)));
      auto it = wanted.find(insts[next].address);
      if (it != wanted.end()) {
        out += nopLines(it->second);
        wanted.erase(it);
      }
      if (insts[next].kind == InstClass::EndProgram && next + 1 == insts.size())
        ended = true;
      ++next;
    }
    if (line.trim().starts_with(".Lfunc_end"))
      ended = true;
    out += line.str();
    if (i + 1 < lines.size())
      out += "\n";
  }
  if (!wanted.empty())
    return createStringError("no instruction at 0x" +
                             utohexstr(wanted.begin()->first, true) +
                             " in the assembly");
  return out;
}

Expected<std::vector<uint8_t>> assembleObject(StringRef asmText,
                                              StringRef mcpu,
                                              StringRef features) {
  auto layer = McLayer::create(mcpu, features);
  if (!layer)
    return layer.takeError();
  const Target *target = (*layer)->target;
  const Triple &triple = (*layer)->triple;
  const MCTargetOptions &options = (*layer)->options;
  MCRegisterInfo *mri = (*layer)->registers.get();
  MCAsmInfo *mai = (*layer)->asmInfo.get();
  MCSubtargetInfo *sti = (*layer)->subtarget.get();
  MCInstrInfo *mii = (*layer)->instructions.get();

  SourceMgr sources;
  std::string diagnostics;
  sources.setDiagHandler(
      [](const SMDiagnostic &d, void *context) {
        auto *text = static_cast<std::string *>(context);
        if (text->empty() && d.getKind() == SourceMgr::DK_Error)
          *text = "line " + std::to_string(d.getLineNo()) + ": " +
                  d.getMessage().str();
      },
      &diagnostics);
  sources.AddNewSourceBuffer(MemoryBuffer::getMemBufferCopy(asmText, "kernel.s"),
                             SMLoc());
  MCContext context(triple, mai, mri, sti, &sources,
                    &options);
  std::unique_ptr<MCObjectFileInfo> fileInfo(
      target->createMCObjectFileInfo(context, /*PIC=*/true));
  context.setObjectFileInfo(fileInfo.get());

  SmallVector<char, 0> buffer;
  raw_svector_ostream stream(buffer);
  std::unique_ptr<MCAsmBackend> backend(
      target->createMCAsmBackend(*sti, *mri, options));
  std::unique_ptr<MCCodeEmitter> emitter(
      target->createMCCodeEmitter(*mii, context));
  if (!backend || !emitter)
    return createStringError("no AMDGPU assembler backend for " + mcpu.str());
  std::unique_ptr<MCObjectWriter> writer = backend->createObjectWriter(stream);
  std::unique_ptr<MCStreamer> streamer(target->createMCObjectStreamer(
      triple, context, std::move(backend), std::move(writer),
      std::move(emitter), *sti));
  std::unique_ptr<MCAsmParser> parser(
      createMCAsmParser(sources, context, *streamer, *mai));
  std::unique_ptr<MCTargetAsmParser> targetParser(
      target->createMCAsmParser(*sti, *parser, *mii, options));
  if (!targetParser)
    return createStringError("no AMDGPU assembly parser");
  parser->setTargetParser(*targetParser);
  if (parser->Run(/*NoInitialTextSection=*/false) || !diagnostics.empty())
    return createStringError("the assembler refused the assembly: " +
                             (diagnostics.empty() ? std::string("an error")
                                                  : diagnostics));
  return std::vector<uint8_t>(buffer.begin(), buffer.end());
}

Error checkOnlyNopsAdded(const DecodedKernel &original,
                         const DecodedKernel &repaired) {
  auto skipNops = [](const std::vector<Instruction> &insts, size_t i) {
    while (i < insts.size() && insts[i].kind == InstClass::Nop)
      ++i;
    return i;
  };
  const std::vector<Instruction> &a = original.instructions;
  const std::vector<Instruction> &b = repaired.instructions;
  size_t i = skipNops(a, 0), j = skipNops(b, 0);
  while (i < a.size() && j < b.size()) {
    const bool same =
        a[i].mnemonic == b[j].mnemonic &&
        (a[i].kind == InstClass::Branch || a[i].operands == b[j].operands);
    if (!same)
      return createStringError(
          "the repaired kernel differs beyond s_nops: 0x" +
          utohexstr(a[i].address, true) + " " + a[i].text() + " became 0x" +
          utohexstr(b[j].address, true) + " " + b[j].text());
    i = skipNops(a, i + 1);
    j = skipNops(b, j + 1);
  }
  if (i != a.size() || j != b.size())
    return createStringError("the repaired kernel has " +
                             std::to_string(b.size()) + " instructions where " +
                             std::to_string(a.size()) +
                             " and s_nops were expected");
  if (original.descriptor != repaired.descriptor)
    return createStringError("the repaired kernel's descriptor differs");
  return Error::success();
}

namespace {

/// Rounds of repair before giving up. One suffices when every finding is a
/// hazard: added s_nops only lengthen distances. A second covers a loop's
/// alignment padding moving.
constexpr unsigned kMaxRepairRounds = 3;

std::string describe(const Findings &findings) {
  const Finding &first = findings.front();
  return std::to_string(findings.size()) + " finding(s), the first " +
         (first.atInstruction() ? "at 0x" + utohexstr(first.address, true) + ", "
                                : std::string()) +
         first.rule + ": " + first.message;
}

/// For each non-s_nop instruction of `now` (a repair of `original`), the
/// address it had in `original`. checkOnlyNopsAdded has matched them.
std::map<uint64_t, uint64_t> originalAddresses(const DecodedKernel &original,
                                               const DecodedKernel &now) {
  std::map<uint64_t, uint64_t> out;
  size_t i = 0;
  for (const Instruction &inst : now.instructions) {
    if (inst.kind == InstClass::Nop)
      continue;
    while (i < original.instructions.size() &&
           original.instructions[i].kind == InstClass::Nop)
      ++i;
    if (i == original.instructions.size())
      break;
    out[inst.address] = original.instructions[i++].address;
  }
  return out;
}

} // namespace

Expected<HazardRepair> repairHazards(ArrayRef<uint8_t> object, StringRef symbol,
                                     StringRef mcpu, StringRef asmText,
                                     Findings findings, BuildObject build,
                                     CheckObject check) {
  auto original = decodeKernel(object, symbol, mcpu);
  if (!original)
    return original.takeError();
  DecodedKernel current = *original;
  std::string currentText = asmText.str();
  HazardRepair out;
  for (unsigned round = 0; round < kMaxRepairRounds; ++round) {
    auto plan = planNopRepairs(findings);
    if (!plan) {
      consumeError(plan.takeError());
      return createStringError(describe(findings));
    }
    const std::map<uint64_t, uint64_t> back = originalAddresses(*original, current);
    for (const NopRepair &r : *plan) {
      auto at = back.find(r.address);
      out.repairs.push_back(
          {at == back.end() ? r.address : at->second, r.waitStates, r.rule});
    }
    auto repairedText = insertNops(currentText, current, *plan);
    if (!repairedText)
      return createStringError(describe(findings) + "; the repair failed: " +
                               toString(repairedText.takeError()));
    auto built = build(*repairedText);
    if (!built)
      return built.takeError();
    auto decoded = decodeKernel(*built, symbol, mcpu);
    if (!decoded)
      return decoded.takeError();
    if (Error e = checkOnlyNopsAdded(*original, *decoded))
      return createStringError("the repair is unsound: " + toString(std::move(e)));
    auto again = check(*built);
    if (!again)
      return again.takeError();
    findings = std::move(*again);
    out.object = std::move(*built);
    current = std::move(*decoded);
    currentText = std::move(*repairedText);
    if (findings.empty())
      return out;
  }
  return createStringError(describe(findings) + " after " +
                           std::to_string(kMaxRepairRounds) + " rounds of repair");
}

} // namespace moec::isacheck
