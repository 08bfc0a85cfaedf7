//===- HazardCheck.cpp - enough wait states between producer and consumer -===//
//
// For each instruction that a rule's consumer class matches, walks back
// along every path (control-flow predecessors, loop back edges included)
// up to the table's lookback, counting the wait states of the instructions
// in between, and reports each producer of a matching rule that is closer
// than the rule requires. A block reached again with no fewer wait states
// than before is not walked again: whatever lies behind it was already
// found at a smaller distance.
//
//===----------------------------------------------------------------------===//

#include "moec/Isa/Checks.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>
#include <climits>
#include <set>

namespace moec::isacheck {

namespace {

using target::HazardConsumer;
using target::HazardProducer;
using target::HazardRelation;
using target::HazardRule;
using Units = std::vector<RegUnit>;

bool isValuKind(InstClass k) {
  return k == InstClass::Valu || k == InstClass::ValuTrans ||
         k == InstClass::LaneAccess || k == InstClass::AccMove;
}

bool isDot(const Instruction &inst) {
  return llvm::StringRef(inst.mnemonic).starts_with("v_dot");
}

/// A DOT's accumulator (SrcC): MC operand 6 of the VOP3P and VOP3 forms
/// (each source follows its modifiers), 3 of the VOP2 forms (v_dot2c_*
/// e32, the tied destination); null when it is an inline constant.
const RegOperand *dotSrcC(const Instruction &inst) {
  if (const RegOperand *c = inst.operand(6))
    return c;
  return inst.operand(3);
}

bool isMemoryKind(InstClass k) {
  return k == InstClass::VmemLoad || k == InstClass::VmemStore ||
         k == InstClass::LdsDma || k == InstClass::DsRead ||
         k == InstClass::DsWrite;
}

bool isDpp(const Instruction &inst) {
  llvm::StringRef ops = inst.operands;
  return llvm::StringRef(inst.mnemonic).ends_with("_dpp") ||
         ops.contains("quad_perm:") || ops.contains("row_") ||
         ops.contains("wave_") || ops.contains("bound_ctrl");
}

Units filter(const Units &units, bool (*keep)(RegUnit)) {
  Units out;
  for (RegUnit u : units)
    if (keep(u))
      out.push_back(u);
  return out;
}

bool isExec(RegUnit u) { return u == reg::kExecLo || u == reg::kExecHi; }
bool isSgprOrVcc(RegUnit u) {
  return (u >= reg::kSgpr0 && u < reg::kTtmp0) || u == reg::kVccLo ||
         u == reg::kVccHi;
}
bool isM0(RegUnit u) { return u == reg::kM0; }

Units explicitDefs(const Instruction &inst) {
  Units out;
  for (const RegOperand &op : inst.regs)
    if (op.isDef && op.index >= 0)
      out.insert(out.end(), op.units.begin(), op.units.end());
  return out;
}

/// The hardware register an s_setreg / s_getreg names, as a pseudo unit.
Units hwregOf(const Instruction &inst) {
  return {RegUnit(inst.immediate & 0x3f)};
}

/// The data registers of a store: MC operand 0 of a buffer store (vdata,
/// vaddr, srsrc, soffset), 1 of a global, flat or DS store (the address
/// comes first).
const RegOperand *storeData(const Instruction &inst) {
  llvm::StringRef m = inst.mnemonic;
  return inst.operand(m.starts_with("buffer_") ? 0 : 1);
}

bool hasSgprOffset(const Instruction &inst) {
  // A buffer instruction names its resource (4 SGPRs) and, when soffset is
  // a register, one more single SGPR.
  for (const RegOperand &op : inst.regs)
    if (!op.isDef && op.index >= 0 && op.units.size() == 1 &&
        reg::isScalarReg(op.units[0]))
      return true;
  return false;
}

/// What `inst` produces for `producer`: the registers (empty: it is not
/// such a producer).
Units producedBy(const Instruction &inst, HazardProducer producer) {
  const InstClass k = inst.kind;
  switch (producer) {
  case HazardProducer::XdlMfmaWrite:
    return k == InstClass::Mfma && inst.xdl ? explicitDefs(inst) : Units{};
  case HazardProducer::NonXdlMfmaWrite:
    return k == InstClass::Mfma && !inst.xdl ? explicitDefs(inst) : Units{};
  case HazardProducer::XdlMfmaSrcCRead:
    if (k == InstClass::Mfma && inst.xdl)
      if (const RegOperand *c = inst.mfmaSrcC())
        return c->units;
    return {};
  case HazardProducer::ValuWriteVgpr:
    return isValuKind(k) ? filter(inst.defs(), reg::isVectorReg) : Units{};
  case HazardProducer::NonDotValuWriteVgpr:
    return isValuKind(k) && !isDot(inst) ? filter(inst.defs(), reg::isVectorReg)
                                         : Units{};
  case HazardProducer::DotWrite:
    return isValuKind(k) && isDot(inst) ? explicitDefs(inst) : Units{};
  case HazardProducer::ValuWriteSgpr:
    return isValuKind(k) ? filter(inst.defs(), isSgprOrVcc) : Units{};
  case HazardProducer::ValuWriteExec:
    return isValuKind(k) ? filter(inst.defs(), isExec) : Units{};
  case HazardProducer::TransWriteVgpr:
    return k == InstClass::ValuTrans ? filter(inst.defs(), reg::isVectorReg)
                                     : Units{};
  case HazardProducer::SaluWriteM0:
    return !llvm::StringRef(inst.mnemonic).starts_with("v_")
               ? filter(inst.defs(), isM0)
               : Units{};
  case HazardProducer::SetReg:
    return k == InstClass::SetReg ? hwregOf(inst) : Units{};
  case HazardProducer::WideBufferStoreSgprOffset:
  case HazardProducer::WideStoreOther: {
    if (k != InstClass::VmemStore)
      return {};
    const RegOperand *data = storeData(inst);
    if (!data || data->units.size() <= 2)
      return {};
    const bool buffer = llvm::StringRef(inst.mnemonic).starts_with("buffer_");
    const bool sgprOffset = buffer && hasSgprOffset(inst);
    return (producer == HazardProducer::WideBufferStoreSgprOffset) == sgprOffset
               ? data->units
               : Units{};
  }
  }
  return {};
}

/// The operands of `inst` that `consumer` names (empty: it is not such a
/// consumer). `sameOpcodeAs` is the producer, for the SrcC rules.
std::vector<Units> consumedBy(const Instruction &inst, HazardConsumer consumer) {
  const InstClass k = inst.kind;
  auto explicitUses = [&](bool (*keep)(RegUnit)) {
    std::vector<Units> out;
    for (const RegOperand &op : inst.regs)
      if (!op.isDef && op.index >= 0) {
        Units kept = filter(op.units, keep);
        if (!kept.empty())
          out.push_back(std::move(kept));
      }
    return out;
  };
  auto one = [](const RegOperand *op) {
    return op ? std::vector<Units>{op->units} : std::vector<Units>{};
  };
  switch (consumer) {
  case HazardConsumer::MfmaSrcAB: {
    if (k != InstClass::Mfma)
      return {};
    std::vector<Units> out;
    for (const RegOperand *op : {inst.mfmaSrcA(), inst.mfmaSrcB(),
                                 inst.mfmaScaleA(), inst.mfmaScaleB()})
      if (op)
        out.push_back(op->units);
    return out;
  }
  case HazardConsumer::XdlMfmaSrcCOverlap:
  case HazardConsumer::XdlMfmaSrcCOtherOpcode:
    return k == InstClass::Mfma && inst.xdl ? one(inst.mfmaSrcC())
                                            : std::vector<Units>{};
  case HazardConsumer::MfmaSrcCFull:
    return k == InstClass::Mfma ? one(inst.mfmaSrcC()) : std::vector<Units>{};
  case HazardConsumer::NonXdlMfmaSrcCOverlap:
    return k == InstClass::Mfma && !inst.xdl ? one(inst.mfmaSrcC())
                                             : std::vector<Units>{};
  case HazardConsumer::MfmaAnyOperand:
    return k == InstClass::Mfma ? explicitUses(reg::isVectorReg)
                                : std::vector<Units>{};
  case HazardConsumer::MfmaExec:
    return k == InstClass::Mfma ? std::vector<Units>{{reg::kExecLo, reg::kExecHi}}
                                : std::vector<Units>{};
  case HazardConsumer::VectorRead:
    return isValuKind(k) || isMemoryKind(k) ? explicitUses(reg::isVectorReg)
                                            : std::vector<Units>{};
  case HazardConsumer::VectorWrite:
    if (isValuKind(k) || k == InstClass::VmemLoad || k == InstClass::DsRead) {
      Units defs = filter(inst.defs(), reg::isVectorReg);
      return defs.empty() ? std::vector<Units>{} : std::vector<Units>{defs};
    }
    return {};
  case HazardConsumer::VectorReadUnlessDotAccumulate:
    return isValuKind(k) || k == InstClass::Mfma || isMemoryKind(k)
               ? explicitUses(reg::isVectorReg)
               : std::vector<Units>{};
  case HazardConsumer::OtherOpcodeValuWrite:
    if (isValuKind(k) || k == InstClass::Mfma) {
      Units defs = filter(inst.defs(), reg::isVectorReg);
      return defs.empty() ? std::vector<Units>{} : std::vector<Units>{defs};
    }
    return {};
  case HazardConsumer::ValuWrite:
    if (isValuKind(k)) {
      Units defs = filter(inst.defs(), reg::isVectorReg);
      return defs.empty() ? std::vector<Units>{} : std::vector<Units>{defs};
    }
    return {};
  case HazardConsumer::NonTransValuRead:
    return isValuKind(k) && k != InstClass::ValuTrans
               ? explicitUses(reg::isVectorReg)
               : std::vector<Units>{};
  case HazardConsumer::VmemSgprRead:
    return k == InstClass::VmemLoad || k == InstClass::VmemStore ||
                   k == InstClass::LdsDma
               ? explicitUses(isSgprOrVcc)
               : std::vector<Units>{};
  case HazardConsumer::ValuSgprRead: {
    if (!isValuKind(k) || k == InstClass::LaneAccess)
      return {};
    std::vector<Units> out;
    for (const RegOperand &op : inst.regs)
      if (!op.isDef) {
        Units kept = filter(op.units, isSgprOrVcc);
        if (!kept.empty())
          out.push_back(std::move(kept));
      }
    return out;
  }
  case HazardConsumer::LaneSelectRead:
    if (k == InstClass::LaneAccess &&
        (llvm::StringRef(inst.mnemonic).starts_with("v_readlane") ||
         llvm::StringRef(inst.mnemonic).starts_with("v_writelane")))
      return explicitUses(isSgprOrVcc);
    return {};
  case HazardConsumer::ReadlaneVgprRead:
    if (k == InstClass::LaneAccess &&
        llvm::StringRef(inst.mnemonic).starts_with("v_read"))
      return explicitUses(reg::isVectorReg);
    return {};
  case HazardConsumer::LaneAccessExec:
    if (k == InstClass::LaneAccess &&
        !llvm::StringRef(inst.mnemonic).starts_with("v_permlane"))
      return {{reg::kExecLo, reg::kExecHi}};
    return {};
  case HazardConsumer::DppRead:
    return isValuKind(k) && isDpp(inst) ? explicitUses(reg::isVectorReg)
                                        : std::vector<Units>{};
  case HazardConsumer::DppExec:
    return isValuKind(k) && isDpp(inst)
               ? std::vector<Units>{{reg::kExecLo, reg::kExecHi}}
               : std::vector<Units>{};
  case HazardConsumer::M0Read:
    return k == InstClass::LdsDma || k == InstClass::SendMsg
               ? std::vector<Units>{{reg::kM0}}
               : std::vector<Units>{};
  case HazardConsumer::GetRegSame:
    return k == InstClass::GetReg ? std::vector<Units>{hwregOf(inst)}
                                  : std::vector<Units>{};
  case HazardConsumer::SetRegSame:
    return k == InstClass::SetReg ? std::vector<Units>{hwregOf(inst)}
                                  : std::vector<Units>{};
  }
  return {};
}

bool overlaps(const Units &a, const Units &b) {
  // Both sorted (RegOperand units are; filters keep the order).
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j])
      return true;
    a[i] < b[j] ? ++i : ++j;
  }
  return false;
}

Units sorted(Units u) {
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  return u;
}

/// Whether producer `p` (its registers `produced`) and consumer `c` (one of
/// its operands, `operand`) are related as `rule` says.
bool related(const HazardRule &rule, const Instruction &p, const Units &produced,
             const Instruction &c, const Units &operand) {
  if (!overlaps(produced, operand))
    return false;
  switch (rule.consumer) {
  case HazardConsumer::XdlMfmaSrcCOverlap:
    // Equal tuples chain through the accumulator forwarding (the same
    // opcode) or are the other-opcode rule's.
    return produced != operand;
  case HazardConsumer::XdlMfmaSrcCOtherOpcode:
    // MC opcodes, not mnemonics: the FP8 and FP4 forms of
    // v_mfma_scale_f32_16x16x128_f8f6f4 print alike and do not forward.
    return produced == operand && p.opcode != c.opcode;
  case HazardConsumer::MfmaSrcCFull:
    return produced == operand;
  case HazardConsumer::VectorReadUnlessDotAccumulate:
    if (p.opcode == c.opcode)
      if (const RegOperand *acc = dotSrcC(c))
        return sorted(acc->units) != operand;
    return true;
  case HazardConsumer::OtherOpcodeValuWrite:
    return p.opcode != c.opcode;
  default:
    return true;
  }
}

struct Candidate {
  const HazardRule *rule;
  std::vector<Units> operands;
};

} // namespace

Findings checkHazards(const DecodedKernel &kernel, const ControlFlowGraph &cfg,
                      const target::HazardTable &table) {
  const std::vector<Instruction> &insts = kernel.instructions;
  Findings findings;
  if (cfg.blocks.empty())
    return findings;
  std::vector<unsigned> best(cfg.blocks.size());
  for (size_t i = 0; i < insts.size(); ++i) {
    const Instruction &consumer = insts[i];
    std::vector<Candidate> candidates;
    unsigned window = 0;
    for (size_t r = 0; r < table.count; ++r) {
      const HazardRule &rule = table.rules[r];
      std::vector<Units> operands = consumedBy(consumer, rule.consumer);
      if (operands.empty())
        continue;
      for (Units &u : operands)
        u = sorted(std::move(u));
      window = std::max<unsigned>(
          window, *std::max_element(rule.waitStates, rule.waitStates + 4));
      candidates.push_back({&rule, std::move(operands)});
    }
    if (candidates.empty())
      continue;
    window = std::min(window, table.lookback);
    const size_t firstFinding = findings.size();
    // (rule, producer) pairs already reported for this consumer.
    std::set<std::pair<const HazardRule *, size_t>> reported;
    unsigned missing = 0;
    std::fill(best.begin(), best.end(), UINT_MAX);
    // Each item: walk instructions [block.first, last] backwards with
    // `waits` wait states between `last` and the consumer.
    struct Item {
      size_t block;
      size_t last; // index of the last instruction to examine, + 1
      unsigned waits;
    };
    std::vector<Item> stack{{cfg.blockOf[i], i, 0}};
    while (!stack.empty()) {
      Item item = stack.back();
      stack.pop_back();
      const BasicBlock &block = cfg.blocks[item.block];
      unsigned waits = item.waits;
      size_t j = item.last;
      for (; j > block.first && waits < window; --j) {
        const Instruction &p = insts[j - 1];
        for (const Candidate &candidate : candidates) {
          const HazardRule &rule = *candidate.rule;
          Units produced = sorted(producedBy(p, rule.producer));
          if (produced.empty())
            continue;
          const unsigned need =
              rule.waitStates[target::passIndex(p.passes ? p.passes : 2)];
          if (waits >= need)
            continue;
          for (const Units &operand : candidate.operands) {
            if (!related(rule, p, produced, consumer, operand))
              continue;
            missing = std::max(missing, need - waits);
            if (reported.insert({&rule, j - 1}).second) {
              std::string what =
                  p.kind == InstClass::Mfma
                      ? std::to_string(p.passes) + "-pass " +
                            (p.xdl ? "XDL " : "") + "MFMA"
                      : std::string("instruction");
              findings.push_back(
                  {rule.id, consumer.address,
                   consumer.text() + ": only " + std::to_string(waits) +
                       " wait states after the " + what + " at 0x" +
                       llvm::utohexstr(p.address, true) + " (" + p.mnemonic +
                       "); rule " + rule.id + " needs " +
                       std::to_string(need),
                   need - waits});
            }
            break;
          }
        }
        waits += p.waitStates();
      }
      if (j > block.first || waits >= window)
        continue; // the window closed inside the block
      for (size_t pred : block.predecessors) {
        if (waits >= best[pred])
          continue;
        best[pred] = waits;
        stack.push_back({pred, cfg.blocks[pred].last + 1, waits});
      }
    }
    // Record the largest shortfall at the consumer (what a repair adds).
    for (size_t f = firstFinding; f < findings.size(); ++f)
      findings[f].missingWaitStates = missing;
  }
  return findings;
}

} // namespace moec::isacheck
