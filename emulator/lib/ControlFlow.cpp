//===- ControlFlow.cpp - scf.if, scf.for and scf.while on a wave ----------===//
///
/// \file
/// Entering and leaving regions on a wave's frame stack: scf.if runs each
/// side under its lanes and merges the results per lane, scf.for iterates
/// uniformly or per lane, scf.while sends lanes out of the loop at
/// scf.condition and records the loop state at each back edge so that an
/// iteration that changed nothing (a spin that cannot progress) is known.
///
//===----------------------------------------------------------------------===//

#include "Executor.h"

namespace moec::emu::detail {

using llvm::success;
using mlir::LogicalResult;

/// Copies the lanes of `mask` from `src` into `dst`, making `dst` per-lane.
void mergeLanes(RtValue &dst, const RtValue &src, uint64_t mask,
                unsigned laneBytes) {
  if (laneBytes == 0)
    return; // memrefs: uniform by construction
  dst.spread(laneBytes);
  for (int l = 0; l < kLanes; ++l)
    if (mask >> l & 1)
      std::memcpy(dst.lane(l, laneBytes), src.lane(l, laneBytes), laneBytes);
}

LogicalResult Executor::enterIf(Wave &wave, unsigned opIndex, uint64_t mask) {
  const POp &p = program.ops[opIndex];
  const RtValue &cond = wave.regs[p.in[0]];
  uint64_t condBits = 0;
  if (cond.uniform) {
    condBits = cond.bytes[0] ? kAllLanes : 0;
  } else {
    for (int l = 0; l < kLanes; ++l)
      if (cond.bytes[l])
        condBits |= uint64_t(1) << l;
  }
  const uint64_t thenMask = mask & condBits, elseMask = mask & ~condBits;
  Frame frame;
  frame.owner = opIndex;
  frame.elseMask = p.regions[1] >= 0 ? elseMask : 0;
  // Like s_cbranch_execz, a side with no active lane is skipped.
  if (thenMask) {
    frame.kind = FrameKind::IfThen;
    frame.block = p.regions[0];
    frame.mask = thenMask;
  } else if (frame.elseMask) {
    frame.kind = FrameKind::IfElse;
    frame.block = p.regions[1];
    frame.mask = frame.elseMask;
  } else {
    if (!p.out.empty())
      return fatal(p, "scf.if with results ran neither region");
    return success();
  }
  wave.frames.push_back(std::move(frame));
  return success();
}

void Executor::bindLoopArgs(Wave &wave, Frame &frame) {
  const PBlock &body = program.blocks[frame.block];
  RtValue &iv = wave.regs[body.args[0]];
  const ValueInfo &ivInfo = info(body.args[0]);
  iv.shape(frame.uniformLoop, ivInfo.laneBytes);
  for (int l = 0; l < (frame.uniformLoop ? 1 : kLanes); ++l)
    setBits(iv.lane(l, ivInfo.laneBytes), ivInfo.elemBits, 0,
            static_cast<uint64_t>(frame.iv[l]) & widthMask(ivInfo.width));
  for (size_t i = 0; i < frame.saved.size(); ++i)
    wave.regs[body.args[i + 1]] = frame.saved[i];
}

LogicalResult Executor::enterFor(Wave &wave, unsigned opIndex, uint64_t mask) {
  const POp &p = program.ops[opIndex];
  const RtValue &lb = wave.regs[p.in[0]], &ub = wave.regs[p.in[1]],
                &step = wave.regs[p.in[2]];
  const ValueInfo &bi = info(p.in[0]);
  Frame frame;
  frame.kind = FrameKind::ForBody;
  frame.owner = opIndex;
  frame.block = p.regions[0];
  frame.uniformLoop = lb.uniform && ub.uniform && step.uniform;
  const int lanes = frame.uniformLoop ? 1 : kLanes;
  frame.iv.resize(lanes);
  frame.ub.resize(lanes);
  frame.step.resize(lanes);
  uint64_t active = 0;
  for (int l = 0; l < lanes; ++l) {
    frame.iv[l] = signExtend(getBits(lb.lane(l, bi.laneBytes), bi.elemBits, 0), bi.width);
    frame.ub[l] = signExtend(getBits(ub.lane(l, bi.laneBytes), bi.elemBits, 0), bi.width);
    frame.step[l] = signExtend(getBits(step.lane(l, bi.laneBytes), bi.elemBits, 0), bi.width);
    const bool laneActive = frame.uniformLoop || (mask >> l & 1);
    if (laneActive && frame.step[l] <= 0)
      return fatal(p, "scf.for step must be positive");
    if (laneActive && frame.iv[l] < frame.ub[l])
      active |= frame.uniformLoop ? mask : uint64_t(1) << l;
  }
  frame.saved.reserve(p.in.size() - 3);
  for (size_t i = 3; i < p.in.size(); ++i)
    frame.saved.push_back(wave.regs[p.in[i]]);
  if (!active) {
    for (size_t i = 0; i < p.out.size(); ++i)
      wave.regs[p.out[i]] = frame.saved[i];
    return success();
  }
  frame.mask = active;
  wave.frames.push_back(std::move(frame));
  bindLoopArgs(wave, wave.frames.back());
  return success();
}

LogicalResult Executor::enterWhile(Wave &wave, unsigned opIndex,
                                   uint64_t mask) {
  const POp &p = program.ops[opIndex];
  if (!mask)
    return fatal(p, "internal: scf.while entered with no active lane");
  Frame frame;
  frame.kind = FrameKind::WhileBefore;
  frame.owner = opIndex;
  frame.block = p.regions[0];
  frame.mask = mask;
  frame.saved.resize(p.out.size());
  const PBlock &before = program.blocks[p.regions[0]];
  for (size_t i = 0; i < before.args.size(); ++i)
    wave.regs[before.args[i]] = wave.regs[p.in[i]];
  wave.frames.push_back(std::move(frame));
  return success();
}

LogicalResult Executor::finishBefore(Wave &wave, const POp &condition) {
  Frame &frame = wave.frames.back();
  if (frame.kind != FrameKind::WhileBefore)
    return fatal(condition, "scf.condition outside an scf.while");
  const POp &owner = program.ops[frame.owner];
  const RtValue &cond = wave.regs[condition.in[0]];
  uint64_t condBits = 0;
  if (cond.uniform) {
    condBits = cond.bytes[0] ? kAllLanes : 0;
  } else {
    for (int l = 0; l < kLanes; ++l)
      if (cond.bytes[l])
        condBits |= uint64_t(1) << l;
  }
  const uint64_t stay = frame.mask & condBits, leave = frame.mask & ~condBits;
  // Lanes whose condition is false leave with the forwarded values; they
  // wait, masked off, until every lane has left.
  if (leave) {
    for (size_t i = 0; i < owner.out.size(); ++i) {
      const RtValue &value = wave.regs[condition.in[i + 1]];
      if (frame.anyExited)
        mergeLanes(frame.saved[i], value, leave, info(owner.out[i]).laneBytes);
      else
        frame.saved[i] = value;
    }
    frame.anyExited = true;
  }
  if (!stay) {
    for (size_t i = 0; i < owner.out.size(); ++i)
      wave.regs[owner.out[i]] = std::move(frame.saved[i]);
    wave.frames.pop_back();
    return success();
  }
  const PBlock &after = program.blocks[owner.regions[1]];
  for (size_t i = 0; i < after.args.size(); ++i)
    wave.regs[after.args[i]] = wave.regs[condition.in[i + 1]];
  frame.kind = FrameKind::WhileAfter;
  frame.block = owner.regions[1];
  frame.pos = 0;
  frame.mask = stay;
  return success();
}

namespace {

/// Whether `a` and `b` hold the same value on every lane of `mask` (memrefs:
/// the same memory and bounds).
bool sameOnLanes(const RtValue &a, const RtValue &b, uint64_t mask,
                 unsigned laneBytes) {
  if (laneBytes == 0)
    return a.mem.space == b.mem.space && a.mem.buffer == b.mem.buffer &&
           a.mem.baseBytes == b.mem.baseBytes &&
           a.mem.extentBytes == b.mem.extentBytes &&
           a.mem.numRecords == b.mem.numRecords;
  if (a.uniform && b.uniform)
    return a.bytes == b.bytes;
  for (int l = 0; l < kLanes; ++l)
    if ((mask >> l & 1) &&
        std::memcmp(a.lane(l, laneBytes), b.lane(l, laneBytes), laneBytes) != 0)
      return false;
  return true;
}

} // namespace

void Executor::backEdge(Wave &wave, const POp &yield) {
  Frame &frame = wave.frames.back();
  const POp &owner = program.ops[frame.owner];
  const PBlock &before = program.blocks[owner.regions[0]];
  for (size_t i = 0; i < before.args.size(); ++i)
    wave.regs[before.args[i]] = wave.regs[yield.in[i]];
  frame.kind = FrameKind::WhileBefore;
  frame.block = owner.regions[0];
  frame.pos = 0;
  // Values defined outside the loop are fixed while the wave is in it, so
  // the state at an iteration boundary is the mask and the before-region's
  // arguments. Equal to the previous boundary, with no write anywhere and no
  // barrier in between: the iteration changed nothing, and (execution being
  // deterministic) the next ones will not either until memory changes.
  bool same = frame.hasSnapshot && frame.snapWrites == writes &&
              frame.snapBarriers == wave.barrierStops &&
              frame.snapMask == frame.mask;
  for (size_t i = 0; same && i < before.args.size(); ++i)
    same = sameOnLanes(frame.snapArgs[i], wave.regs[before.args[i]],
                       frame.mask, info(before.args[i]).laneBytes);
  if (same && !isIdle(wave)) {
    wave.retracing = true;
    wave.retraceWrites = writes;
    wave.retraceBarriers = wave.barrierStops;
    wave.retraceDepth = wave.frames.size() - 1;
    wave.retraceOp = frame.owner;
  }
  frame.snapArgs.resize(before.args.size());
  for (size_t i = 0; i < before.args.size(); ++i)
    frame.snapArgs[i] = wave.regs[before.args[i]];
  frame.hasSnapshot = true;
  frame.snapMask = frame.mask;
  frame.snapWrites = writes;
  frame.snapBarriers = wave.barrierStops;
}

LogicalResult Executor::finishRegion(Wave &wave, const POp &yield) {
  Frame &frame = wave.frames.back();
  const POp &owner = program.ops[frame.owner];
  switch (frame.kind) {
  case FrameKind::Body:
    return fatal(yield, "scf.yield outside a region");
  case FrameKind::WhileBefore:
  case FrameKind::WhileAfter:
    return fatal(yield, "internal: scf.while regions end in runWave");
  case FrameKind::IfThen: {
    frame.saved.clear();
    for (unsigned slot : yield.in)
      frame.saved.push_back(wave.regs[slot]);
    frame.thenRan = true;
    if (frame.elseMask) {
      frame.kind = FrameKind::IfElse;
      frame.block = owner.regions[1];
      frame.pos = 0;
      frame.mask = frame.elseMask;
      return success();
    }
    for (size_t i = 0; i < owner.out.size(); ++i)
      wave.regs[owner.out[i]] = std::move(frame.saved[i]);
    wave.frames.pop_back();
    return success();
  }
  case FrameKind::IfElse: {
    for (size_t i = 0; i < owner.out.size(); ++i) {
      const RtValue &elseValue = wave.regs[yield.in[i]];
      if (frame.thenRan) {
        RtValue merged = std::move(frame.saved[i]);
        mergeLanes(merged, elseValue, frame.mask, info(owner.out[i]).laneBytes);
        wave.regs[owner.out[i]] = std::move(merged);
      } else {
        wave.regs[owner.out[i]] = elseValue;
      }
    }
    wave.frames.pop_back();
    return success();
  }
  case FrameKind::ForBody: {
    uint64_t active = 0;
    if (frame.uniformLoop) {
      for (size_t i = 0; i < frame.saved.size(); ++i)
        frame.saved[i] = wave.regs[yield.in[i]];
      frame.iv[0] += frame.step[0];
      if (frame.iv[0] < frame.ub[0])
        active = frame.mask;
    } else {
      for (size_t i = 0; i < frame.saved.size(); ++i)
        mergeLanes(frame.saved[i], wave.regs[yield.in[i]], frame.mask,
                   info(owner.out[i]).laneBytes);
      for (int l = 0; l < kLanes; ++l) {
        if (!(frame.mask >> l & 1))
          continue;
        frame.iv[l] += frame.step[l];
        if (frame.iv[l] < frame.ub[l])
          active |= uint64_t(1) << l;
      }
    }
    if (active) {
      frame.mask = active;
      frame.pos = 0;
      bindLoopArgs(wave, frame);
      return success();
    }
    for (size_t i = 0; i < owner.out.size(); ++i)
      wave.regs[owner.out[i]] = std::move(frame.saved[i]);
    wave.frames.pop_back();
    return success();
  }
  }
  return success();
}
} // namespace moec::emu::detail
