//===- WaitCheck.cpp - every use of a loaded register waits for it --------===//
//
// A forward data-flow over the control-flow graph. For each register (and
// for the LDS as written by LDS DMA and by ds_write) the state is whether a
// memory operation that writes it may still be in flight and, if so, how
// many operations of the same counter were issued after it on every path
// (the smallest such count over the paths that meet at a join). The
// counters' rules (CDNA3/CDNA4 ISA guides, "Data dependency resolution"):
//  - vmcnt counts vector memory operations, LDS DMA included; they retire
//    in issue order, so s_waitcnt vmcnt(N) retires every operation with at
//    least N issued after it;
//  - lgkmcnt counts LDS, GDS, s_sendmsg and scalar memory operations; LDS
//    operations retire in order among themselves, scalar memory operations
//    in any order, so with a scalar load in flight only lgkmcnt(0) retires
//    it, and scalar operations issued after an LDS operation do not help
//    retire it;
//  - a counter cannot exceed its field (63 vmcnt, 15 lgkmcnt): an operation
//    with that many issued after it has retired.
//
//===----------------------------------------------------------------------===//

#include "moec/Isa/Checks.h"

#include "llvm/ADT/StringExtras.h"

#include <array>
#include <deque>
#include <set>

namespace moec::isacheck {

namespace {

constexpr int kIdle = -1;     ///< nothing in flight writes the register
constexpr int kNeedsZero = -2; ///< a scalar load: only lgkmcnt(0) retires it
constexpr int kVmMax = 63, kLgkmMax = 15;

/// In-flight writers of each register for one counter.
struct CounterState {
  /// kIdle, kNeedsZero, or the operations of the counter issued after it.
  std::array<int8_t, reg::kCount> after;
  /// Address of the writer (for messages).
  std::array<uint64_t, reg::kCount> writer;
  CounterState() {
    after.fill(kIdle);
    writer.fill(0);
  }
  bool operator==(const CounterState &other) const {
    return after == other.after;
  }
  /// Another operation of this counter issued (in-order class).
  void issue(int limit) {
    for (int8_t &a : after)
      if (a >= 0)
        a = a + 1 >= limit ? int8_t(kIdle) : int8_t(a + 1);
  }
  void set(RegUnit u, int value, uint64_t address) {
    after[u] = int8_t(value);
    writer[u] = address;
  }
  /// s_waitcnt with this counter's field `n`.
  void wait(unsigned n, unsigned max) {
    if (n >= max)
      return;
    for (int8_t &a : after)
      if ((a >= 0 && unsigned(a) >= n) || (a == kNeedsZero && n == 0))
        a = kIdle;
  }
  /// Join: in flight when in flight on either side, with the fewer
  /// operations after it; a scalar load dominates.
  void join(const CounterState &other) {
    for (size_t u = 0; u < after.size(); ++u) {
      const int8_t b = other.after[u];
      int8_t &a = after[u];
      if (b == kIdle)
        continue;
      if (a == kIdle || b == kNeedsZero || (a >= 0 && b < a)) {
        if (a != kNeedsZero) {
          a = b;
          writer[u] = other.writer[u];
        }
      }
    }
  }
};

struct State {
  CounterState vm, lgkm;
  bool reached = false;
  bool operator==(const State &o) const {
    return reached == o.reached && vm == o.vm && lgkm == o.lgkm;
  }
};

bool isGlobalAccess(InstClass k) {
  return k == InstClass::VmemLoad || k == InstClass::VmemStore ||
         k == InstClass::LdsDma;
}

std::string hex(uint64_t address) {
  return "0x" + llvm::utohexstr(address, /*LowerCase=*/true);
}

/// Reports a read or overwrite of `u` that is not retired.
void checkUnit(const Instruction &inst, RegUnit u, bool isWrite,
               const State &state, Findings *findings) {
  if (!findings)
    return;
  const int vm = state.vm.after[u];
  const int lgkm = state.lgkm.after[u];
  // A later load of the same counter may overwrite in order.
  const bool vmInOrder = isWrite && inst.kind == InstClass::VmemLoad;
  const bool ldsInOrder = isWrite && inst.kind == InstClass::DsRead;
  auto report = [&](const char *counter, int after, uint64_t writer) {
    const std::string need =
        after == kNeedsZero ? std::string(counter) + "(0)"
                            : std::string(counter) + "(" +
                                  std::to_string(after) + ") or lower";
    findings->push_back(
        {isWrite ? "wait.overwrite" : "wait.read", inst.address,
         inst.text() + (isWrite ? " overwrites " : " reads ") + reg::name(u) +
             " while the load at " + hex(writer) +
             " may be in flight on some path (needs s_waitcnt " + need + ")",
         0});
  };
  if (vm != kIdle && !vmInOrder)
    report("vmcnt", vm, state.vm.writer[u]);
  else if (lgkm != kIdle && !(ldsInOrder && lgkm >= 0))
    report("lgkmcnt", lgkm, state.lgkm.writer[u]);
}

/// Applies `inst` to `state`; with `findings`, reports what it violates.
void step(const Instruction &inst, State &state, Findings *findings) {
  const InstClass k = inst.kind;
  if (k == InstClass::Waitcnt) {
    state.vm.wait(inst.wait.vmcnt, kVmMax);
    state.lgkm.wait(inst.wait.lgkmcnt, kLgkmMax);
    return;
  }
  // Reads and overwrites of registers still being written.
  if (findings) {
    // A register named by two operands (v_add v2, v1, v1) is one read.
    std::set<std::pair<bool, RegUnit>> checked;
    for (const RegOperand &op : inst.regs)
      for (RegUnit u : op.units)
        if (u != reg::kExecLo && u != reg::kExecHi && u != reg::kMode &&
            checked.insert({op.isDef, u}).second)
          checkUnit(inst, u, op.isDef, state, findings);
    if (k == InstClass::DsRead && state.vm.after[reg::kLdsByDma] != kIdle)
      findings->push_back(
          {"wait.lds-dma-read", inst.address,
           inst.text() + " reads LDS while the LDS DMA at " +
               hex(state.vm.writer[reg::kLdsByDma]) +
               " may be in flight (needs s_waitcnt vmcnt(" +
               std::to_string(state.vm.after[reg::kLdsByDma]) +
               ") or lower)",
           0});
    if (k == InstClass::Barrier) {
      if (state.vm.after[reg::kLdsByDma] != kIdle)
        findings->push_back(
            {"wait.barrier-lds-dma", inst.address,
             inst.text() + " publishes LDS while the LDS DMA at " +
                 hex(state.vm.writer[reg::kLdsByDma]) +
                 " may be in flight (needs s_waitcnt vmcnt(" +
                 std::to_string(state.vm.after[reg::kLdsByDma]) +
                 ") or lower before it)",
             0});
      if (state.lgkm.after[reg::kLdsByStore] != kIdle)
        findings->push_back(
            {"wait.barrier-lds-write", inst.address,
             inst.text() + " publishes LDS while the LDS write at " +
                 hex(state.lgkm.writer[reg::kLdsByStore]) +
                 " may be in flight (needs s_waitcnt lgkmcnt(" +
                 std::to_string(state.lgkm.after[reg::kLdsByStore]) +
                 ") or lower before it)",
             0});
    }
  }
  // The operation's own effect on the counters.
  const bool flat = inst.mnemonic.rfind("flat_", 0) == 0;
  if (isGlobalAccess(k)) {
    state.vm.issue(kVmMax);
    if (k == InstClass::LdsDma)
      state.vm.set(reg::kLdsByDma, 0, inst.address);
    for (const RegOperand &op : inst.regs)
      if (op.isDef)
        for (RegUnit u : op.units) {
          state.vm.set(u, 0, inst.address);
          if (flat)
            state.lgkm.set(u, kNeedsZero, inst.address);
        }
    return;
  }
  if (k == InstClass::DsRead || k == InstClass::DsWrite) {
    state.lgkm.issue(kLgkmMax);
    if (k == InstClass::DsWrite)
      state.lgkm.set(reg::kLdsByStore, 0, inst.address);
    for (const RegOperand &op : inst.regs)
      if (op.isDef)
        for (RegUnit u : op.units)
          state.lgkm.set(u, 0, inst.address);
    return;
  }
  if (k == InstClass::Smem) {
    for (const RegOperand &op : inst.regs)
      if (op.isDef)
        for (RegUnit u : op.units)
          state.lgkm.set(u, kNeedsZero, inst.address);
    return;
  }
  // Any other write ends the register's wait (it was reported above).
  for (const RegOperand &op : inst.regs)
    if (op.isDef)
      for (RegUnit u : op.units) {
        state.vm.after[u] = kIdle;
        state.lgkm.after[u] = kIdle;
      }
}

} // namespace

Findings checkWaits(const DecodedKernel &kernel, const ControlFlowGraph &cfg) {
  const std::vector<Instruction> &insts = kernel.instructions;
  Findings findings;
  if (cfg.blocks.empty())
    return findings;
  std::vector<State> entry(cfg.blocks.size());
  entry[0].reached = true;
  std::deque<size_t> work{0};
  std::vector<bool> queued(cfg.blocks.size(), false);
  queued[0] = true;
  while (!work.empty()) {
    const size_t b = work.front();
    work.pop_front();
    queued[b] = false;
    State state = entry[b];
    for (size_t i = cfg.blocks[b].first; i <= cfg.blocks[b].last; ++i)
      step(insts[i], state, nullptr);
    for (size_t s : cfg.blocks[b].successors) {
      State joined = entry[s];
      if (!joined.reached) {
        joined = state;
      } else {
        joined.vm.join(state.vm);
        joined.lgkm.join(state.lgkm);
      }
      if (!(joined == entry[s])) {
        entry[s] = joined;
        if (!queued[s]) {
          queued[s] = true;
          work.push_back(s);
        }
      }
    }
  }
  for (size_t b = 0; b < cfg.blocks.size(); ++b) {
    if (!entry[b].reached)
      continue;
    State state = entry[b];
    for (size_t i = cfg.blocks[b].first; i <= cfg.blocks[b].last; ++i)
      step(insts[i], state, &findings);
  }
  return findings;
}

} // namespace moec::isacheck
