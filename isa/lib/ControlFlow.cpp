//===- ControlFlow.cpp - basic blocks of a decoded kernel -----------------===//

#include "moec/Isa/ControlFlow.h"

#include <algorithm>
#include <map>

namespace moec::isacheck {

ControlFlowGraph buildControlFlow(const DecodedKernel &kernel) {
  const std::vector<Instruction> &insts = kernel.instructions;
  ControlFlowGraph cfg;
  if (insts.empty())
    return cfg;
  std::map<uint64_t, size_t> indexAt;
  for (size_t i = 0; i < insts.size(); ++i)
    indexAt[insts[i].address] = i;

  // Leaders: the entry, every branch target, every instruction after a
  // branch or s_endpgm.
  std::vector<bool> leader(insts.size(), false);
  leader[0] = true;
  std::vector<long> targetOf(insts.size(), -1);
  for (size_t i = 0; i < insts.size(); ++i) {
    const Instruction &inst = insts[i];
    if (inst.kind != InstClass::Branch && inst.kind != InstClass::EndProgram)
      continue;
    if (i + 1 < insts.size())
      leader[i + 1] = true;
    if (inst.kind != InstClass::Branch)
      continue;
    auto it = inst.hasTarget ? indexAt.find(inst.target) : indexAt.end();
    if (it == indexAt.end()) {
      cfg.unresolvedBranches.push_back(i);
      continue;
    }
    targetOf[i] = long(it->second);
    leader[it->second] = true;
  }
  cfg.blockOf.assign(insts.size(), 0);
  for (size_t i = 0; i < insts.size(); ++i) {
    if (leader[i]) {
      if (!cfg.blocks.empty())
        cfg.blocks.back().last = i - 1;
      cfg.blocks.push_back({i, i, {}, {}});
    }
    cfg.blockOf[i] = cfg.blocks.size() - 1;
  }
  cfg.blocks.back().last = insts.size() - 1;

  for (size_t b = 0; b < cfg.blocks.size(); ++b) {
    BasicBlock &block = cfg.blocks[b];
    const Instruction &end = insts[block.last];
    auto addEdge = [&](size_t to) {
      if (std::find(block.successors.begin(), block.successors.end(), to) ==
          block.successors.end()) {
        block.successors.push_back(to);
        cfg.blocks[to].predecessors.push_back(b);
      }
    };
    if (end.kind == InstClass::EndProgram)
      continue;
    if (end.kind == InstClass::Branch) {
      if (targetOf[block.last] >= 0)
        addEdge(cfg.blockOf[size_t(targetOf[block.last])]);
      if (!end.conditional)
        continue;
    }
    if (b + 1 < cfg.blocks.size())
      addEdge(b + 1);
  }
  return cfg;
}

} // namespace moec::isacheck
