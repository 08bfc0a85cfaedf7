//===- Decoder.h - a kernel's machine code as instructions -------*- C++ -*-===//
///
/// \file
/// Decodes the code of one kernel of an AMDGPU code object with LLVM's MC
/// disassembler into instructions that carry what the ISA checks and
/// `moec inspect --isa` need: mnemonic, operand text, the 32-bit registers
/// each operand names (explicit and implicit), the class of the
/// instruction, its MFMA pass count, its s_waitcnt fields and its branch
/// target. Nothing here knows moec's kernels.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_ISA_DECODER_H
#define MOEC_ISA_DECODER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::isacheck {

/// One 32-bit register: VGPRs, AGPRs, SGPRs and the special registers the
/// checks follow, numbered in one space so that overlap is equality.
using RegUnit = uint16_t;
namespace reg {
inline constexpr RegUnit kVgpr0 = 0;     ///< v0..v511
inline constexpr RegUnit kAgpr0 = 512;   ///< a0..a255
inline constexpr RegUnit kSgpr0 = 768;   ///< s0..s127
inline constexpr RegUnit kTtmp0 = 896;   ///< ttmp0..ttmp15
inline constexpr RegUnit kVccLo = 912, kVccHi = 913;
inline constexpr RegUnit kExecLo = 914, kExecHi = 915;
inline constexpr RegUnit kM0 = 916;
inline constexpr RegUnit kScc = 917;
inline constexpr RegUnit kFlatScratchLo = 918, kFlatScratchHi = 919;
inline constexpr RegUnit kXnackMaskLo = 920, kXnackMaskHi = 921;
inline constexpr RegUnit kMode = 922;
/// Not registers: the LDS as a whole, as written by an LDS DMA (counted in
/// vmcnt) and by ds_write (counted in lgkmcnt), for the wait checks.
inline constexpr RegUnit kLdsByDma = 923, kLdsByStore = 924;
inline constexpr RegUnit kCount = 925;

inline bool isVgpr(RegUnit u) { return u < kAgpr0; }
inline bool isAgpr(RegUnit u) { return u >= kAgpr0 && u < kSgpr0; }
inline bool isVectorReg(RegUnit u) { return u < kSgpr0; }
/// SGPRs, TTMPs and the 32-bit halves of VCC, EXEC, FLAT_SCRATCH.
inline bool isScalarReg(RegUnit u) { return u >= kSgpr0 && u < kM0; }
/// "v7", "a3", "s12", "vcc_lo", "m0".
std::string name(RegUnit u);
} // namespace reg

/// What kind of instruction, as far as the checks tell them apart.
enum class InstClass : uint8_t {
  Salu,      ///< scalar ALU and scalar control (s_*, not listed below)
  Valu,      ///< vector ALU (v_*, not MFMA or lane access)
  ValuTrans, ///< transcendental VALU (v_exp, v_log, v_rcp, v_rsq, v_sqrt, v_sin, v_cos)
  LaneAccess, ///< v_readlane, v_readfirstlane, v_writelane, v_permlane*
  Mfma,      ///< v_mfma_*, v_smfmac_* (XDL or not: see Instruction::xdl)
  AccMove,   ///< v_accvgpr_read, v_accvgpr_write, v_accvgpr_mov
  VmemLoad,  ///< buffer/global/flat/scratch loads and atomics with return
  VmemStore, ///< stores and atomics without return
  LdsDma,    ///< buffer/global loads with the `lds` modifier: write LDS
  DsRead,    ///< LDS reads (and LDS atomics with return)
  DsWrite,   ///< LDS writes (and LDS atomics without return)
  Smem,      ///< s_load_*, s_buffer_load_*, s_memtime, s_memrealtime
  Waitcnt,   ///< s_waitcnt
  Barrier,   ///< s_barrier
  Nop,       ///< s_nop N: N + 1 wait states
  Branch,    ///< s_branch, s_cbranch_*, s_setpc, s_endpgm ends a path
  EndProgram,
  SendMsg,   ///< s_sendmsg, s_sendmsghalt
  SetReg,    ///< s_setreg_*
  GetReg,    ///< s_getreg_*
  Other,
};

/// One operand that names registers (immediates carry no units).
struct RegOperand {
  std::vector<RegUnit> units;
  bool isDef = false;
  /// Index among the explicit operands of the MCInst; -1 for implicit.
  int index = -1;
};

/// The fields of an s_waitcnt; a field at its maximum does not wait.
struct WaitFields {
  unsigned vmcnt = 63, expcnt = 7, lgkmcnt = 15;
};

/// One decoded instruction.
struct Instruction {
  uint64_t address = 0;
  uint32_t size = 0;
  /// The MC opcode (an index into LLVM's AMDGPU instruction table).
  unsigned opcode = 0;
  std::string mnemonic;
  /// Operand text as the MC printer writes it, after the mnemonic.
  std::string operands;
  InstClass kind = InstClass::Other;
  /// Register operands in MCInst order, then the implicit ones.
  std::vector<RegOperand> regs;
  /// MFMA only: passes (2, 4, 8 or 16), and whether it runs on the XDL
  /// (dense matrix) pipeline; scaled MFMAs and f8f6f4 ones are XDL.
  unsigned passes = 0;
  bool xdl = false;
  bool scaledMfma = false;
  /// The first immediate operand (s_nop's N, s_setreg's hwreg field, ...).
  int64_t immediate = 0;
  /// s_nop: its immediate N (N + 1 wait states).
  unsigned nopCount = 0;
  WaitFields wait;
  /// Branches: conditional (may fall through) and the target, if known.
  bool conditional = false;
  bool hasTarget = false;
  uint64_t target = 0;

  /// Wait states this instruction provides to the hazard counting.
  unsigned waitStates() const { return kind == InstClass::Nop ? nopCount + 1 : 1; }
  /// Units written (defs) or read (uses) by explicit operand `index`, or
  /// by every operand with `index < 0`.
  std::vector<RegUnit> defs() const;
  std::vector<RegUnit> uses() const;
  /// The register at explicit MCInst operand `mcIndex`; null when that
  /// operand is not a register (an inline constant, say) or is absent.
  const RegOperand *operand(int mcIndex) const;
  /// MFMA sources by role, in the MC layout of every gfx950 MFMA (vdst,
  /// src0 = A, src1 = B, src2 = C, then cbsz/abid/blgp; a scaled MFMA has
  /// cbsz and blgp at 4 and 5 and its A and B scales at 6 and 7).
  const RegOperand *mfmaSrcA() const { return operand(1); }
  const RegOperand *mfmaSrcB() const { return operand(2); }
  const RegOperand *mfmaSrcC() const { return operand(3); }
  const RegOperand *mfmaScaleA() const { return scaledMfma ? operand(6) : nullptr; }
  const RegOperand *mfmaScaleB() const { return scaledMfma ? operand(7) : nullptr; }
  /// "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], ..." for messages (a
  /// finding carries the address).
  std::string text() const;
};

/// A kernel's code: its instructions in address order.
struct DecodedKernel {
  std::string symbol;
  uint64_t begin = 0, end = 0;
  std::vector<Instruction> instructions;
  /// Bytes the disassembler could not decode, as (address, size) ranges.
  unsigned undecoded = 0;
  /// The kernel descriptor ("symbol.kd", 64 bytes) when the object has it.
  std::vector<uint8_t> descriptor;
};

/// Decodes kernel `symbol` (its function symbol or "symbol.kd") of the ELF
/// code object `elf` for processor `mcpu` ("gfx950").
llvm::Expected<DecodedKernel> decodeKernel(llvm::ArrayRef<uint8_t> elf,
                                           llvm::StringRef symbol,
                                           llvm::StringRef mcpu);

/// The names of the kernels (function symbols with a ".kd" descriptor) of
/// a code object, in symbol-table order.
llvm::Expected<std::vector<std::string>>
listKernels(llvm::ArrayRef<uint8_t> elf);

} // namespace moec::isacheck

#endif // MOEC_ISA_DECODER_H
