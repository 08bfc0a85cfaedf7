//===- IsaSummary.cpp - a kernel's main loop from its disassembly ---------===//

#include "IsaSummary.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCAsmInfo.h"
#include "llvm/MC/MCContext.h"
#include "llvm/MC/MCDisassembler/MCDisassembler.h"
#include "llvm/MC/MCInst.h"
#include "llvm/MC/MCInstPrinter.h"
#include "llvm/MC/MCInstrAnalysis.h"
#include "llvm/MC/MCInstrInfo.h"
#include "llvm/MC/MCRegisterInfo.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/MCTargetOptions.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>
#include <mutex>

extern "C" {
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUDisassembler();
}

using namespace llvm;

namespace moec::cli {

namespace {

/// One decoded instruction: its address, size, mnemonic, operand text and,
/// for a branch with a known target, that target.
struct DecodedInst {
  uint64_t address = 0;
  uint64_t size = 0;
  std::string mnemonic;
  std::string operands;
  bool isBranch = false;
  bool hasTarget = false;
  uint64_t target = 0;
};

/// Bytes one lane moves in a memory instruction, from its mnemonic's
/// width token ("dwordx4", "ubyte", "b128", "u16"); 0 when none is found.
/// ds_read2/ds_write2 move two elements.
unsigned memoryWidth(StringRef mnemonic) {
  SmallVector<StringRef> parts;
  mnemonic.split(parts, '_');
  unsigned factor = 1;
  if (parts.size() > 1 && parts[0] == "ds" &&
      (parts[1].starts_with("read2") || parts[1].starts_with("write2")))
    factor = 2;
  static const std::pair<const char *, unsigned> kWidths[] = {
      {"byte", 1},    {"ubyte", 1},   {"sbyte", 1},  {"b8", 1},  {"u8", 1},
      {"i8", 1},      {"short", 2},   {"ushort", 2}, {"sshort", 2},
      {"b16", 2},     {"u16", 2},     {"i16", 2},    {"dword", 4},
      {"b32", 4},     {"dwordx2", 8}, {"b64", 8},    {"dwordx3", 12},
      {"b96", 12},    {"dwordx4", 16}, {"b128", 16}};
  for (StringRef part : ArrayRef(parts).drop_front(2 <= parts.size() ? 2 : 0))
    for (const auto &[name, bytes] : kWidths)
      if (part == name)
        return factor * bytes;
  return 0;
}

/// The buffer resource operand ("s[8:11]") of a buffer instruction.
std::string bufferResource(StringRef operands) {
  SmallVector<StringRef> parts;
  operands.split(parts, ',');
  for (StringRef part : parts) {
    part = part.trim();
    if (part.starts_with("s[") || part.starts_with("ttmp["))
      return part.str();
  }
  return "?";
}

void countInstruction(const DecodedInst &inst, LoopCounts &counts) {
  StringRef m = inst.mnemonic;
  ++counts.instructions;
  if (m.starts_with("v_mfma_scale_")) {
    ++counts.scaledMfma;
    if (counts.mfmaMnemonic.empty())
      counts.mfmaMnemonic = m.str();
  } else if (m.starts_with("v_mfma_") || m.starts_with("v_smfmac_")) {
    ++counts.otherMfma;
  } else if (m.starts_with("buffer_load_") || m.starts_with("global_load_") ||
             m.starts_with("flat_load_")) {
    unsigned width = memoryWidth(m);
    // gfx950 spells the LDS DMA as a buffer load with an `lds` modifier.
    if (StringRef(inst.operands).ends_with(" lds") ||
        StringRef(inst.operands).contains(" lds ")) {
      ++counts.ldsDmaLoads[width];
    } else {
      ++counts.globalLoads[width];
      ++counts.globalLoadsByResource[m.starts_with("buffer_")
                                         ? bufferResource(inst.operands)
                                         : "global"][width];
    }
  } else if (m.starts_with("buffer_store_") || m.starts_with("global_store_") ||
             m.starts_with("flat_store_")) {
    ++counts.globalStores[memoryWidth(m)];
  } else if (m.starts_with("ds_read") || m.starts_with("ds_load")) {
    ++counts.ldsReads[memoryWidth(m)];
  } else if (m.starts_with("ds_write") || m.starts_with("ds_store")) {
    ++counts.ldsWrites[memoryWidth(m)];
  } else if (m.starts_with("s_load_") || m.starts_with("s_buffer_load_")) {
    ++counts.scalarLoads;
  } else if (m.starts_with("s_waitcnt")) {
    ++counts.waits;
  } else if (m == "s_barrier") {
    ++counts.barriers;
  } else if (m.starts_with("v_")) {
    ++counts.valu;
  } else if (m.starts_with("s_")) {
    ++counts.salu;
  }
}

} // namespace

uint64_t LoopCounts::tileBytesPerWave(unsigned waveSize) const {
  uint64_t bytes = 0;
  for (const auto *byWidth : {&globalLoads, &ldsDmaLoads})
    for (const auto &[width, count] : *byWidth)
      if (width >= 16)
        bytes += uint64_t(width) * count * waveSize;
  return bytes;
}

uint64_t LoopCounts::narrowBytesPerWave(unsigned waveSize) const {
  uint64_t bytes = 0;
  for (const auto &[width, count] : globalLoads)
    if (width < 16)
      bytes += uint64_t(width) * count * waveSize;
  return bytes;
}

std::string formatWidths(const std::map<unsigned, unsigned> &byWidth) {
  std::string out;
  for (auto it = byWidth.rbegin(); it != byWidth.rend(); ++it) {
    if (!out.empty())
      out += ' ';
    out += std::to_string(it->second) + "x" +
           (it->first ? std::to_string(it->first) + "B" : std::string("?B"));
  }
  return out.empty() ? "-" : out;
}

Expected<IsaSummary> summarizeKernelIsa(ArrayRef<uint8_t> elf, StringRef symbol,
                                        StringRef mcpu) {
  static std::once_flag initialized;
  std::call_once(initialized, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUDisassembler();
  });
  const Triple triple("amdgcn-amd-amdhsa");
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return createStringError(error);
  std::unique_ptr<MCRegisterInfo> mri(target->createMCRegInfo(triple));
  MCTargetOptions options;
  std::unique_ptr<MCAsmInfo> mai(target->createMCAsmInfo(*mri, triple, options));
  std::unique_ptr<MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(triple, mcpu, ""));
  std::unique_ptr<MCInstrInfo> mii(target->createMCInstrInfo());
  if (!mri || !mai || !sti || !mii)
    return createStringError("no AMDGPU MC layer for " + mcpu.str());
  MCContext context(triple, mai.get(), mri.get(), sti.get());
  std::unique_ptr<MCDisassembler> disassembler(
      target->createMCDisassembler(*sti, context));
  std::unique_ptr<MCInstPrinter> printer(target->createMCInstPrinter(
      triple, mai->getAssemblerDialect(), *mai, *mii, *mri));
  std::unique_ptr<MCInstrAnalysis> analysis(target->createMCInstrAnalysis(mii.get()));
  if (!disassembler || !printer)
    return createStringError("no AMDGPU disassembler for " + mcpu.str());

  auto object = object::ObjectFile::createELFObjectFile(MemoryBufferRef(
      StringRef(reinterpret_cast<const char *>(elf.data()), elf.size()),
      symbol));
  if (!object)
    return object.takeError();
  // Manifests name the kernel descriptor ("name.kd"); the code is "name".
  symbol.consume_back(".kd");
  IsaSummary summary;
  StringRef code;
  uint64_t sectionAddress = 0;
  bool found = false;
  for (const object::SymbolRef &sym : (*object)->symbols()) {
    Expected<StringRef> name = sym.getName();
    Expected<object::SymbolRef::Type> type = sym.getType();
    if (!name || !type) {
      consumeError(name.takeError());
      consumeError(type.takeError());
      continue;
    }
    if (*name != symbol || *type != object::SymbolRef::ST_Function)
      continue;
    Expected<uint64_t> address = sym.getAddress();
    Expected<object::section_iterator> section = sym.getSection();
    if (!address || !section || *section == (*object)->section_end()) {
      consumeError(address.takeError());
      consumeError(section.takeError());
      return createStringError("symbol '" + symbol.str() + "' has no code");
    }
    Expected<StringRef> contents = (*section)->getContents();
    if (!contents)
      return contents.takeError();
    code = *contents;
    sectionAddress = (*section)->getAddress();
    summary.begin = *address;
    summary.end = *address + object::ELFSymbolRef(sym).getSize();
    found = true;
    break;
  }
  if (!found)
    return createStringError("no function symbol '" + symbol.str() + "'");
  if (summary.begin < sectionAddress ||
      summary.end - sectionAddress > code.size() || summary.end < summary.begin)
    return createStringError("symbol '" + symbol.str() +
                             "' lies outside its section");

  std::vector<DecodedInst> insts;
  ArrayRef<uint8_t> bytes(reinterpret_cast<const uint8_t *>(code.data()),
                          code.size());
  for (uint64_t address = summary.begin; address < summary.end;) {
    MCInst inst;
    uint64_t size = 0;
    ArrayRef<uint8_t> at = bytes.slice(address - sectionAddress,
                                       summary.end - address);
    if (disassembler->getInstruction(inst, size, at, address, nulls()) !=
            MCDisassembler::Success ||
        size == 0) {
      ++summary.undecoded;
      address += 4;
      continue;
    }
    DecodedInst decoded;
    decoded.address = address;
    decoded.size = size;
    std::string text;
    raw_string_ostream os(text);
    printer->printInst(&inst, address, "", *sti, os);
    os.flush();
    StringRef trimmed = StringRef(text).trim();
    auto [mnemonic, rest] = trimmed.split(' ');
    decoded.mnemonic = mnemonic.str();
    decoded.operands = (" " + rest.trim()).str();
    decoded.isBranch = mii->get(inst.getOpcode()).isBranch();
    if (decoded.isBranch && analysis)
      decoded.hasTarget =
          analysis->evaluateBranch(inst, address, size, decoded.target);
    if (StringRef(decoded.mnemonic).starts_with("v_mfma_scale_"))
      ++summary.scaledMfma;
    insts.push_back(std::move(decoded));
    address += size;
  }
  summary.instructions = insts.size();

  // Loops: [target, end of the backward branch). The main loop is the one
  // with the most scaled MFMAs (then the most instructions) among those
  // with no nested loop that has scaled MFMAs too: a GEMM's K loop may
  // hold a small loop without MFMAs (a waterfall loop around a buffer load
  // whose resource is not uniform), which must not hide it. Kernels
  // without MFMAs get their largest innermost loop.
  struct Loop {
    uint64_t begin, end;
    LoopCounts counts;
  };
  std::vector<Loop> loops;
  for (const DecodedInst &inst : insts)
    if (inst.isBranch && inst.hasTarget && inst.target <= inst.address &&
        inst.target >= summary.begin)
      loops.push_back({inst.target, inst.address + inst.size, {}});
  summary.loops = loops.size();
  for (Loop &loop : loops)
    for (const DecodedInst &inst : insts)
      if (inst.address >= loop.begin && inst.address < loop.end)
        countInstruction(inst, loop.counts);
  for (size_t i = 0; i < loops.size(); ++i) {
    LoopCounts &counts = loops[i].counts;
    bool candidate = true;
    for (size_t j = 0; j < loops.size() && candidate; ++j) {
      const bool nested = j != i && loops[j].begin >= loops[i].begin &&
                          loops[j].end <= loops[i].end;
      candidate = !nested || (counts.scaledMfma && !loops[j].counts.scaledMfma);
    }
    if (!candidate)
      continue;
    if (counts.scaledMfma && counts.barriers >= 2 && counts.barriers % 2 == 0)
      counts.kSteps = counts.barriers / 2;
    if (!summary.hasLoop ||
        std::make_pair(counts.scaledMfma, counts.instructions) >
            std::make_pair(summary.loop.scaledMfma, summary.loop.instructions)) {
      summary.hasLoop = true;
      summary.loopBegin = loops[i].begin;
      summary.loopEnd = loops[i].end;
      summary.loop = counts;
    }
  }
  return summary;
}

} // namespace moec::cli
