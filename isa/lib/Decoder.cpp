//===- Decoder.cpp - a kernel's machine code as instructions --------------===//

#include "moec/Isa/Decoder.h"

#include "McLayer.h"

#include "llvm/ADT/DenseMap.h"
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

#include <algorithm>
#include <memory>
#include <mutex>

extern "C" {
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUDisassembler();
}

using namespace llvm;

namespace moec::isacheck {

std::string reg::name(RegUnit u) {
  if (u < kAgpr0)
    return "v" + std::to_string(u - kVgpr0);
  if (u < kSgpr0)
    return "a" + std::to_string(u - kAgpr0);
  if (u < kTtmp0)
    return "s" + std::to_string(u - kSgpr0);
  if (u < kVccLo)
    return "ttmp" + std::to_string(u - kTtmp0);
  static const char *const kSpecial[] = {
      "vcc_lo",         "vcc_hi",        "exec_lo",        "exec_hi",
      "m0",             "scc",           "flat_scratch_lo", "flat_scratch_hi",
      "xnack_mask_lo",  "xnack_mask_hi", "mode"};
  if (u - kVccLo < std::size(kSpecial))
    return kSpecial[u - kVccLo];
  return "r" + std::to_string(u);
}

std::vector<RegUnit> Instruction::defs() const {
  std::vector<RegUnit> out;
  for (const RegOperand &op : regs)
    if (op.isDef)
      out.insert(out.end(), op.units.begin(), op.units.end());
  return out;
}

std::vector<RegUnit> Instruction::uses() const {
  std::vector<RegUnit> out;
  for (const RegOperand &op : regs)
    if (!op.isDef)
      out.insert(out.end(), op.units.begin(), op.units.end());
  return out;
}

const RegOperand *Instruction::operand(int mcIndex) const {
  for (const RegOperand &op : regs)
    if (op.index == mcIndex)
      return &op;
  return nullptr;
}

std::string Instruction::text() const {
  return mnemonic + operands;
}

namespace {

/// The 32-bit unit a register name of LLVM's AMDGPU register table stands
/// for ("VGPR12", "AGPR3", "SGPR5", "TTMP2", "VCC_LO", ...), if it is one.
std::optional<RegUnit> unitOfName(StringRef name) {
  // Encoding variants carry a lower-case suffix ("M0_gfxpre11",
  // "FLAT_SCR_LO_vi"): the unit is the same register.
  for (size_t i = 0; i + 1 < name.size(); ++i)
    if (name[i] == '_' && llvm::isLower(name[i + 1])) {
      name = name.take_front(i);
      break;
    }
  auto numbered = [&](StringRef prefix, RegUnit base,
                      unsigned limit) -> std::optional<RegUnit> {
    if (!name.starts_with(prefix))
      return std::nullopt;
    unsigned n = 0;
    if (name.drop_front(prefix.size()).getAsInteger(10, n) || n >= limit)
      return std::nullopt;
    return RegUnit(base + n);
  };
  if (auto u = numbered("VGPR", reg::kVgpr0, 512))
    return u;
  if (auto u = numbered("AGPR", reg::kAgpr0, 256))
    return u;
  if (auto u = numbered("SGPR", reg::kSgpr0, 128))
    return u;
  if (auto u = numbered("TTMP", reg::kTtmp0, 16))
    return u;
  static const std::pair<const char *, RegUnit> kSpecial[] = {
      {"VCC_LO", reg::kVccLo},
      {"VCC_HI", reg::kVccHi},
      {"EXEC_LO", reg::kExecLo},
      {"EXEC_HI", reg::kExecHi},
      {"M0", reg::kM0},
      {"SCC", reg::kScc},
      {"FLAT_SCR_LO", reg::kFlatScratchLo},
      {"FLAT_SCR_HI", reg::kFlatScratchHi},
      {"XNACK_MASK_LO", reg::kXnackMaskLo},
      {"XNACK_MASK_HI", reg::kXnackMaskHi},
      {"MODE", reg::kMode}};
  for (const auto &[special, unit] : kSpecial)
    if (name == special)
      return unit;
  return std::nullopt;
}

/// The 32-bit units of register `r`, through its sub-registers.
class UnitMap {
public:
  explicit UnitMap(const MCRegisterInfo &mri) : mri_(mri) {}
  const std::vector<RegUnit> &units(MCRegister r) {
    auto [it, inserted] = cache_.try_emplace(r.id());
    if (inserted) {
      for (MCPhysReg sub : mri_.subregs_inclusive(r))
        if (std::optional<RegUnit> u = unitOfName(mri_.getName(sub)))
          it->second.push_back(*u);
      std::sort(it->second.begin(), it->second.end());
      it->second.erase(std::unique(it->second.begin(), it->second.end()),
                       it->second.end());
    }
    return it->second;
  }

private:
  const MCRegisterInfo &mri_;
  DenseMap<unsigned, std::vector<RegUnit>> cache_;
};

bool isTranscendental(StringRef m) {
  static const char *const kTrans[] = {"v_exp_", "v_log_",  "v_rcp_",
                                       "v_rsq_", "v_sqrt_", "v_sin_",
                                       "v_cos_", "v_exp_legacy", "v_log_legacy"};
  for (const char *prefix : kTrans)
    if (m.starts_with(prefix))
      return true;
  return false;
}

InstClass classify(StringRef m, StringRef operands, const MCInstrDesc &desc) {
  if (m == "s_nop")
    return InstClass::Nop;
  if (m == "s_waitcnt")
    return InstClass::Waitcnt;
  if (m == "s_barrier")
    return InstClass::Barrier;
  if (m == "s_endpgm")
    return InstClass::EndProgram;
  if (desc.isBranch() || m.starts_with("s_setpc"))
    return InstClass::Branch;
  if (m.starts_with("s_sendmsg"))
    return InstClass::SendMsg;
  if (m.starts_with("s_setreg"))
    return InstClass::SetReg;
  if (m.starts_with("s_getreg"))
    return InstClass::GetReg;
  if (m.starts_with("s_load_") || m.starts_with("s_buffer_load_") ||
      m.starts_with("s_memtime") || m.starts_with("s_memrealtime") ||
      m.starts_with("s_store_") || m.starts_with("s_buffer_store_"))
    return InstClass::Smem;
  if (m.starts_with("buffer_") || m.starts_with("global_") ||
      m.starts_with("flat_") || m.starts_with("scratch_")) {
    // gfx950 spells the LDS DMA as a buffer load with an `lds` modifier or
    // as global_load_lds_* (no destination VGPR: M0 gives the LDS address).
    if (operands.ends_with(" lds") || operands.contains(" lds ") ||
        m.contains("_load_lds_"))
      return InstClass::LdsDma;
    if (m.contains("atomic"))
      return desc.getNumDefs() ? InstClass::VmemLoad : InstClass::VmemStore;
    if (m.contains("load"))
      return InstClass::VmemLoad;
    return InstClass::VmemStore;
  }
  if (m.starts_with("ds_"))
    return desc.getNumDefs() ? InstClass::DsRead : InstClass::DsWrite;
  if (m.starts_with("v_mfma") || m.starts_with("v_smfmac"))
    return InstClass::Mfma;
  if (m.starts_with("v_accvgpr_"))
    return InstClass::AccMove;
  if (m.starts_with("v_readlane") || m.starts_with("v_readfirstlane") ||
      m.starts_with("v_writelane") || m.starts_with("v_permlane"))
    return InstClass::LaneAccess;
  if (m.starts_with("v_"))
    return isTranscendental(m) ? InstClass::ValuTrans : InstClass::Valu;
  if (m.starts_with("s_"))
    return InstClass::Salu;
  return InstClass::Other;
}

/// Passes of an MFMA on gfx950, from its shape (LLVM's SISchedule.td,
/// the gfx950 model's WriteNPassMAI classes): 4x4 MFMAs 2; 16x16 4, but 8
/// for the K 1 and K 4 forms; 32x32 8, but 16 for K 1, 2 and 4; f64 MFMAs
/// 4 (4x4x4) and 16 (16x16x4). The f8f6f4 MFMAs (scaled or not) take 8
/// passes at 16x16x128 and 16 at 32x32x64 when either operand is FP8 or
/// BF8, and half that when both are FP6 or FP4; the operand's width tells
/// its format (FP8 fragments are 8 registers, FP6 6, FP4 4). Every MFMA
/// but the f64 ones runs on the XDL pipeline (docs/isa-verification.md).
void setMfmaPasses(Instruction &inst) {
  StringRef m = inst.mnemonic;
  inst.scaledMfma = m.starts_with("v_mfma_scale_");
  const bool f64 = m.contains("_f64_");
  inst.xdl = !f64;
  // The shape "MxNxK" follows the element type: v_mfma_f32_16x16x32_bf16.
  unsigned shape[3] = {0, 0, 0};
  SmallVector<StringRef> parts;
  m.split(parts, '_');
  for (StringRef part : parts) {
    SmallVector<StringRef> dims;
    part.split(dims, 'x');
    if (dims.size() != 3)
      continue;
    bool ok = true;
    for (unsigned d = 0; d < 3; ++d) {
      StringRef digits = dims[d].take_while([](char c) { return isDigit(c); });
      ok = ok && !digits.empty() && !digits.getAsInteger(10, shape[d]);
    }
    if (ok)
      break;
    shape[0] = shape[1] = shape[2] = 0;
  }
  unsigned passes = 16; // an unknown shape: the longest, so nothing is missed
  if (m.contains("f8f6f4")) {
    const RegOperand *a = inst.mfmaSrcA(), *b = inst.mfmaSrcB();
    const bool fp8 = !a || !b || a->units.size() >= 8 || b->units.size() >= 8;
    passes = (shape[0] == 32 ? 8 : 4) * (fp8 ? 2 : 1);
  } else if (shape[0] == 4) {
    passes = f64 ? 4 : 2;
  } else if (shape[0] == 16) {
    passes = f64 ? 16 : (shape[2] == 1 || shape[2] == 4) ? 8 : 4;
  } else if (shape[0] == 32) {
    passes = (shape[2] == 1 || shape[2] == 2 || shape[2] == 4) ? 16 : 8;
  }
  inst.passes = passes;
}

} // namespace

Expected<DecodedKernel> decodeKernel(ArrayRef<uint8_t> elf, StringRef symbol,
                                     StringRef mcpu) {
  auto layer = McLayer::create(mcpu, "");
  if (!layer)
    return layer.takeError();
  const Target *target = (*layer)->target;
  const Triple &triple = (*layer)->triple;
  MCRegisterInfo *mri = (*layer)->registers.get();
  MCAsmInfo *mai = (*layer)->asmInfo.get();
  MCSubtargetInfo *sti = (*layer)->subtarget.get();
  MCInstrInfo *mii = (*layer)->instructions.get();
  MCContext context(triple, mai, mri, sti);
  std::unique_ptr<MCDisassembler> disassembler(
      target->createMCDisassembler(*sti, context));
  std::unique_ptr<MCInstPrinter> printer(target->createMCInstPrinter(
      triple, mai->getAssemblerDialect(), *mai, *mii, *mri));
  std::unique_ptr<MCInstrAnalysis> analysis(
      target->createMCInstrAnalysis(mii));
  if (!disassembler || !printer)
    return createStringError("no AMDGPU disassembler for " + mcpu.str());

  auto object = object::ObjectFile::createELFObjectFile(MemoryBufferRef(
      StringRef(reinterpret_cast<const char *>(elf.data()), elf.size()),
      symbol));
  if (!object)
    return object.takeError();
  // Manifests name the kernel descriptor ("name.kd"); the code is "name".
  symbol.consume_back(".kd");
  DecodedKernel kernel;
  kernel.symbol = symbol.str();
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
    const bool isCode = *name == symbol && *type == object::SymbolRef::ST_Function;
    const bool isDescriptor = *name == (symbol + ".kd").str();
    if (!isCode && !isDescriptor)
      continue;
    Expected<uint64_t> address = sym.getAddress();
    Expected<object::section_iterator> section = sym.getSection();
    if (!address || !section || *section == (*object)->section_end()) {
      consumeError(address.takeError());
      consumeError(section.takeError());
      return createStringError("symbol '" + name->str() + "' has no section");
    }
    Expected<StringRef> contents = (*section)->getContents();
    if (!contents)
      return contents.takeError();
    const uint64_t base = (*section)->getAddress();
    const uint64_t size = object::ELFSymbolRef(sym).getSize();
    if (*address < base || *address + size - base > contents->size())
      return createStringError("symbol '" + name->str() +
                               "' lies outside its section");
    if (isDescriptor) {
      StringRef bytes = contents->substr(*address - base, size);
      kernel.descriptor.assign(bytes.begin(), bytes.end());
      continue;
    }
    code = *contents;
    sectionAddress = base;
    kernel.begin = *address;
    kernel.end = *address + size;
    found = true;
  }
  if (!found)
    return createStringError("no function symbol '" + symbol.str() + "'");

  UnitMap unitMap(*mri);
  ArrayRef<uint8_t> bytes(reinterpret_cast<const uint8_t *>(code.data()),
                          code.size());
  for (uint64_t address = kernel.begin; address < kernel.end;) {
    MCInst mc;
    uint64_t size = 0;
    ArrayRef<uint8_t> at =
        bytes.slice(address - sectionAddress, kernel.end - address);
    if (disassembler->getInstruction(mc, size, at, address, nulls()) !=
            MCDisassembler::Success ||
        size == 0) {
      ++kernel.undecoded;
      address += 4;
      continue;
    }
    Instruction inst;
    inst.address = address;
    inst.size = uint32_t(size);
    inst.opcode = mc.getOpcode();
    std::string text;
    raw_string_ostream os(text);
    printer->printInst(&mc, address, "", *sti, os);
    os.flush();
    auto [mnemonic, rest] = StringRef(text).trim().split(' ');
    inst.mnemonic = mnemonic.str();
    const std::string restText = rest.trim().str();
    inst.operands = restText.empty() ? "" : " " + restText;
    const MCInstrDesc &desc = mii->get(mc.getOpcode());
    inst.kind = classify(inst.mnemonic, inst.operands, desc);
    int64_t firstImm = -1;
    for (unsigned i = 0; i < mc.getNumOperands(); ++i) {
      const MCOperand &op = mc.getOperand(i);
      if (op.isImm() && firstImm < 0)
        firstImm = op.getImm();
      if (!op.isReg() || !op.getReg())
        continue;
      const std::vector<RegUnit> &units = unitMap.units(op.getReg());
      if (units.empty())
        continue;
      inst.regs.push_back({units, i < desc.getNumDefs(), int(i)});
    }
    for (MCPhysReg r : desc.implicit_defs())
      inst.regs.push_back({unitMap.units(r), true, -1});
    for (MCPhysReg r : desc.implicit_uses())
      inst.regs.push_back({unitMap.units(r), false, -1});
    inst.immediate = firstImm;
    // gfx9 reads only SIMM16[3:0] of s_nop: `s_nop 16` waits 1 state.
    if (inst.kind == InstClass::Nop && firstImm >= 0)
      inst.nopCount = unsigned(firstImm & 0xf);
    if (inst.kind == InstClass::Waitcnt && firstImm >= 0) {
      // gfx9 encoding: vmcnt [3:0] and [15:14], expcnt [6:4], lgkmcnt [11:8].
      const uint64_t imm = uint64_t(firstImm);
      inst.wait.vmcnt = unsigned((imm & 0xf) | ((imm >> 14) & 0x3) << 4);
      inst.wait.expcnt = unsigned((imm >> 4) & 0x7);
      inst.wait.lgkmcnt = unsigned((imm >> 8) & 0xf);
    }
    if (inst.kind == InstClass::Mfma)
      setMfmaPasses(inst);
    if (inst.kind == InstClass::Branch) {
      inst.conditional = desc.isConditionalBranch();
      if (analysis)
        inst.hasTarget = analysis->evaluateBranch(mc, address, size, inst.target);
    }
    kernel.instructions.push_back(std::move(inst));
    address += size;
  }
  return kernel;
}

Expected<std::vector<std::string>> listKernels(ArrayRef<uint8_t> elf) {
  auto object = object::ObjectFile::createELFObjectFile(MemoryBufferRef(
      StringRef(reinterpret_cast<const char *>(elf.data()), elf.size()), ""));
  if (!object)
    return object.takeError();
  std::vector<std::string> names;
  std::vector<std::string> descriptors;
  for (const object::SymbolRef &sym : (*object)->symbols()) {
    Expected<StringRef> name = sym.getName();
    if (!name) {
      consumeError(name.takeError());
      continue;
    }
    if (name->ends_with(".kd"))
      descriptors.push_back(name->drop_back(3).str());
  }
  for (const std::string &d : descriptors)
    names.push_back(d);
  return names;
}

} // namespace moec::isacheck
