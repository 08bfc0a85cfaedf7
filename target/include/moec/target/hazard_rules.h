//===- hazard_rules.h - wait states the hardware does not insert -*- C++ -*-===//
//
// The software-visible hazards of a chip: pairs of instructions that need
// independent instructions or s_nop wait states between them because the
// hardware does not interlock. One record per rule, checked on every path
// of every code object by moec's ISA verifier (isa/lib/HazardCheck.cpp;
// docs/isa-verification.md lists the rules with their sources).
//
// Wait states count as the ISA guides say and LLVM's hazard recognizer
// counts them: `s_nop N` gives N + 1, every other instruction 1 (a branch,
// an s_waitcnt and a scaled MFMA included), and across a join the fewest
// over the paths that meet. Where an MFMA is the producer the wait states
// depend on its passes (2, 4, 8, 16).
//
// Plain C++17, header-only, no dependency.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_TARGET_HAZARD_RULES_H
#define MOEC_TARGET_HAZARD_RULES_H

#include <cstddef>
#include <cstdint>

namespace moec::target {

/// The instruction (and its operand) that starts a hazard window.
enum class HazardProducer : uint8_t {
  XdlMfmaWrite,      ///< an XDL MFMA's destination
  NonXdlMfmaWrite,   ///< a non-XDL (f64) MFMA's destination
  XdlMfmaSrcCRead,   ///< an XDL MFMA's SrcC, read late in its passes (WAR)
  ValuWriteVgpr,     ///< a VALU writing a VGPR or AGPR (not an MFMA)
  NonDotValuWriteVgpr, ///< the same, not a DOT (v_dot*): DOT has its own rules
  DotWrite,          ///< a DOT VALU's (v_dot*) destination
  ValuWriteSgpr,     ///< a VALU writing an SGPR or VCC (v_cmp, v_readlane)
  ValuWriteExec,     ///< a VALU writing EXEC (v_cmpx)
  TransWriteVgpr,    ///< a transcendental VALU's destination
  SaluWriteM0,       ///< a scalar instruction writing M0
  SetReg,            ///< s_setreg of a hardware register
  WideBufferStoreSgprOffset, ///< buffer store of > 8 bytes, SGPR soffset: its data
  WideStoreOther,    ///< any other store of > 8 bytes: its data
};

/// The instruction (and its operand) that must not come too soon.
enum class HazardConsumer : uint8_t {
  MfmaSrcAB,          ///< an MFMA's SrcA or SrcB, or a scaled MFMA's scales
  XdlMfmaSrcCOverlap, ///< an XDL MFMA's SrcC overlapping, not equal to, the register
  NonXdlMfmaSrcCOverlap, ///< a non-XDL MFMA's SrcC overlapping the register
  XdlMfmaSrcCOtherOpcode, ///< an XDL MFMA of another opcode, SrcC equal to it
  MfmaSrcCFull,       ///< any MFMA whose SrcC equals the register
  MfmaAnyOperand,     ///< any register an MFMA reads
  MfmaExec,           ///< any MFMA (it reads EXEC)
  VectorRead,         ///< a VALU, VMEM or LDS instruction reading the register
  VectorWrite,        ///< a VALU, VMEM load or LDS read writing the register
  ValuWrite,          ///< a VALU writing the register
  VectorReadUnlessDotAccumulate, ///< a VALU (an MFMA included), VMEM or LDS
                      ///< instruction reading it, except the producer's own
                      ///< DOT opcode reading it as its accumulator (SrcC)
  OtherOpcodeValuWrite, ///< a VALU (an MFMA included) of another opcode writing it
  NonTransValuRead,   ///< a VALU that is not transcendental reading it
  VmemSgprRead,       ///< a VMEM instruction reading the SGPR (resource, offset)
  ValuSgprRead,       ///< a VALU reading the SGPR (explicit, or VCC)
  LaneSelectRead,     ///< v_readlane / v_writelane lane-select SGPR
  ReadlaneVgprRead,   ///< v_readlane / v_readfirstlane source VGPR
  LaneAccessExec,     ///< v_readlane, v_readfirstlane, v_writelane (read EXEC)
  DppRead,            ///< a DPP VALU reading the register
  DppExec,            ///< a DPP VALU (reads EXEC)
  M0Read,             ///< LDS DMA, s_sendmsg (read M0)
  GetRegSame,         ///< s_getreg of the same hardware register
  SetRegSame,         ///< s_setreg of the same hardware register
};

enum class HazardRelation : uint8_t {
  ReadAfterWrite,
  WriteAfterWrite,
  WriteAfterRead,
};

struct HazardRule {
  /// Stable id, as findings and docs/isa-verification.md name it.
  const char *id;
  HazardProducer producer;
  HazardConsumer consumer;
  HazardRelation relation;
  /// Wait states needed by a producer MFMA of 2, 4, 8 and 16 passes; the
  /// same four times when the producer is not an MFMA.
  uint8_t waitStates[4];
  /// Where the numbers come from.
  const char *source;
};

/// The hazard rules of one chip.
struct HazardTable {
  const HazardRule *rules;
  size_t count;
  /// The longest window of any rule: the backward walk stops there.
  unsigned lookback;
};

/// gfx950 (CDNA4). Numbers as LLVM's GCNHazardRecognizer enforces them for
/// gfx950 at the revisions named, with the 2026 fixes PR 222040 (the full
/// 20-wait-state window) and PR 218363 (a different MFMA reading the same
/// accumulator) applied; AMD's CDNA4 ISA guide, "Data dependency
/// resolution", states the same dependency classes.
inline constexpr HazardRule kGfx950HazardRules[] = {
    {"xdl-write-srcab", HazardProducer::XdlMfmaWrite, HazardConsumer::MfmaSrcAB,
     HazardRelation::ReadAfterWrite, {5, 8, 12, 20},
     "LLVM GCNHazardRecognizer checkMAIHazards90A, "
     "GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates; PR 126732 (gfx950 "
     "+1); PR 222040 (the 20th wait state)"},
    {"xdl-write-srcc-overlap", HazardProducer::XdlMfmaWrite,
     HazardConsumer::XdlMfmaSrcCOverlap, HazardRelation::ReadAfterWrite,
     {4, 6, 10, 18},
     "LLVM checkMAIHazards90A, "
     "GFX940_XDL_N_PassWritesVGPROverlappedXDLOrSMFMASrcCWaitStates; PR 117263"},
    {"xdl-write-srcc-nonxdl", HazardProducer::XdlMfmaWrite,
     HazardConsumer::NonXdlMfmaSrcCOverlap, HazardRelation::ReadAfterWrite,
     {3, 6, 10, 18},
     "LLVM checkMAIHazards90A, "
     "GFX940_XDL_N_PassWritesVGPROverlappedSGEMMDGEMMSrcCWaitStates; PR 117285"},
    {"xdl-write-srcc-other-opcode", HazardProducer::XdlMfmaWrite,
     HazardConsumer::XdlMfmaSrcCOtherOpcode, HazardRelation::ReadAfterWrite,
     {4, 6, 10, 18},
     "llvm-project PR 218363: accumulator forwarding holds only along one "
     "MFMA opcode; another opcode needs the overlapped-SrcC wait states"},
    {"mfma-2pass-write-srcc-full", HazardProducer::XdlMfmaWrite,
     HazardConsumer::MfmaSrcCFull, HazardRelation::ReadAfterWrite,
     {2, 0, 0, 0},
     "LLVM checkMAIHazards90A, GFX940_SMFMA4x4WritesVGPRFullSrcCWaitStates "
     "(a 2-pass MFMA's result as the whole SrcC of the next, even of the "
     "same opcode)"},
    {"nonxdl-write-srcab", HazardProducer::NonXdlMfmaWrite,
     HazardConsumer::MfmaSrcAB, HazardRelation::ReadAfterWrite, {4, 6, 10, 18},
     "LLVM checkMAIHazards90A, "
     "GFX940_SMFMA_N_PassWritesVGPROverlappedSrcABWaitStates (N + 2)"},
    {"nonxdl-write-srcc", HazardProducer::NonXdlMfmaWrite,
     HazardConsumer::NonXdlMfmaSrcCOverlap, HazardRelation::ReadAfterWrite,
     {2, 4, 8, 16},
     "LLVM checkMAIHazards90A, "
     "GFX940_SMFMA_N_PassWritesVGPROverlappedSMFMASrcCWaitStates (N)"},
    {"xdl-write-vector-read", HazardProducer::XdlMfmaWrite,
     HazardConsumer::VectorRead, HazardRelation::ReadAfterWrite,
     {5, 8, 12, 20},
     "LLVM checkMAIVALUHazards, "
     "GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates; PR 126727; PR 222040"},
    {"nonxdl-write-vector-read", HazardProducer::NonXdlMfmaWrite,
     HazardConsumer::VectorRead, HazardRelation::ReadAfterWrite,
     {4, 6, 10, 18},
     "LLVM checkMAIVALUHazards, "
     "GFX940_SMFMA_N_PassWriteVgprVALUMemExpReadWaitStates (N + 2)"},
    {"xdl-write-vector-write", HazardProducer::XdlMfmaWrite,
     HazardConsumer::VectorWrite, HazardRelation::WriteAfterWrite,
     {5, 8, 12, 20},
     "LLVM checkMAIVALUHazards, GFX940_XDL_N_PassWriteVgprVALUWawWaitStates; "
     "PR 126132 (gfx950: 5, 8, 12, 20)"},
    {"nonxdl-write-vector-write", HazardProducer::NonXdlMfmaWrite,
     HazardConsumer::VectorWrite, HazardRelation::WriteAfterWrite,
     {4, 6, 10, 18},
     "LLVM checkMAIVALUHazards, GFX940_SMFMA_N_PassWriteVgprVALUWawWaitStates"},
    {"xdl-srcc-read-vector-write", HazardProducer::XdlMfmaSrcCRead,
     HazardConsumer::VectorWrite, HazardRelation::WriteAfterRead,
     {1, 3, 7, 15},
     "LLVM checkMAIVALUHazards, SMFMA{4x4,16x16,32x32}ReadVgprVALUWarWaitStates "
     "(XDL readers on gfx940 and later)"},
    {"valu-write-mfma-read", HazardProducer::NonDotValuWriteVgpr,
     HazardConsumer::MfmaAnyOperand, HazardRelation::ReadAfterWrite,
     {2, 2, 2, 2},
     "LLVM checkMAIHazards90A, LegacyVALUNotDotWritesVGPRWaitStates"},
    {"dot-write-vector-read", HazardProducer::DotWrite,
     HazardConsumer::VectorReadUnlessDotAccumulate,
     HazardRelation::ReadAfterWrite, {3, 3, 3, 3},
     "LLVM checkMAIVALUHazards, DotWriteSameDotReadSrcAB and "
     "DotWriteDifferentVALURead (gfx90a and later)"},
    {"dot-write-valu-write", HazardProducer::DotWrite,
     HazardConsumer::OtherOpcodeValuWrite, HazardRelation::WriteAfterWrite,
     {3, 3, 3, 3},
     "LLVM checkMAIVALUHazards, DotWriteDifferentVALUWrite (gfx90a and later)"},
    {"valu-write-exec-mfma", HazardProducer::ValuWriteExec,
     HazardConsumer::MfmaExec, HazardRelation::ReadAfterWrite, {4, 4, 4, 4},
     "LLVM checkMAIHazards90A, VALUWritesExecWaitStates"},
    {"valu-write-sgpr-vmem", HazardProducer::ValuWriteSgpr,
     HazardConsumer::VmemSgprRead, HazardRelation::ReadAfterWrite,
     {5, 5, 5, 5}, "LLVM checkVMEMHazards, VmemSgprWaitStates"},
    {"valu-write-sgpr-valu", HazardProducer::ValuWriteSgpr,
     HazardConsumer::ValuSgprRead, HazardRelation::ReadAfterWrite,
     {2, 2, 2, 2},
     "LLVM checkVALUHazards, VALUWriteSGPRVALUReadWaitstates (gfx940 and later)"},
    {"valu-write-sgpr-lane-select", HazardProducer::ValuWriteSgpr,
     HazardConsumer::LaneSelectRead, HazardRelation::ReadAfterWrite,
     {4, 4, 4, 4}, "LLVM checkRWLaneHazards, RWLaneWaitStates"},
    {"valu-write-vgpr-readlane", HazardProducer::ValuWriteVgpr,
     HazardConsumer::ReadlaneVgprRead, HazardRelation::ReadAfterWrite,
     {1, 1, 1, 1},
     "LLVM checkVALUHazards, VALUWriteVGPRReadlaneRead (gfx940 and later)"},
    {"valu-write-exec-lane-access", HazardProducer::ValuWriteExec,
     HazardConsumer::LaneAccessExec, HazardRelation::ReadAfterWrite,
     {4, 4, 4, 4},
     "LLVM checkVALUHazards, VALUWriteEXECRWLane (gfx940 and later)"},
    {"trans-write-valu-read", HazardProducer::TransWriteVgpr,
     HazardConsumer::NonTransValuRead, HazardRelation::ReadAfterWrite,
     {1, 1, 1, 1},
     "LLVM checkVALUHazards, TransDefWaitstates (hasTransForwardingHazard, "
     "gfx940 and later)"},
    {"valu-write-vgpr-dpp", HazardProducer::ValuWriteVgpr,
     HazardConsumer::DppRead, HazardRelation::ReadAfterWrite, {2, 2, 2, 2},
     "LLVM checkDPPHazards, DppVgprWaitStates"},
    {"valu-write-exec-dpp", HazardProducer::ValuWriteExec,
     HazardConsumer::DppExec, HazardRelation::ReadAfterWrite, {5, 5, 5, 5},
     "LLVM checkDPPHazards, DppExecWaitStates"},
    {"wide-store-data-sgpr-offset", HazardProducer::WideBufferStoreSgprOffset,
     HazardConsumer::ValuWrite, HazardRelation::WriteAfterRead, {1, 1, 1, 1},
     "LLVM createsVALUHazard / checkSOFFSETWindowVALUHazardsHelper; PR 197267 "
     "(gfx940 family, SGPR soffset), PR 203770 (branchy control flow)"},
    {"wide-store-data", HazardProducer::WideStoreOther,
     HazardConsumer::ValuWrite, HazardRelation::WriteAfterRead, {2, 2, 2, 2},
     "LLVM createsVALUHazard; PR 197267 (literal or no soffset, and FLAT/"
     "global stores: 2)"},
    {"salu-write-m0-read", HazardProducer::SaluWriteM0, HazardConsumer::M0Read,
     HazardRelation::ReadAfterWrite, {1, 1, 1, 1},
     "LLVM checkReadM0Hazards (LDS DMA, s_sendmsg; gfx9 family); D124550"},
    {"setreg-getreg", HazardProducer::SetReg, HazardConsumer::GetRegSame,
     HazardRelation::ReadAfterWrite, {2, 2, 2, 2},
     "LLVM checkGetRegHazards, GetRegWaitStates"},
    {"setreg-setreg", HazardProducer::SetReg, HazardConsumer::SetRegSame,
     HazardRelation::WriteAfterWrite, {2, 2, 2, 2},
     "LLVM checkSetRegHazards, getSetRegWaitStates"},
};

inline constexpr HazardTable kGfx950Hazards = {
    kGfx950HazardRules,
    sizeof(kGfx950HazardRules) / sizeof(kGfx950HazardRules[0]),
    /*lookback=*/20};

/// The index of an MFMA's pass count in HazardRule::waitStates.
inline constexpr unsigned passIndex(unsigned passes) {
  return passes <= 2 ? 0 : passes <= 4 ? 1 : passes <= 8 ? 2 : 3;
}

} // namespace moec::target

#endif // MOEC_TARGET_HAZARD_RULES_H
