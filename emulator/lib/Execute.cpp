//===- Execute.cpp - waves, workgroups, memory and detectors --------------===//
///
/// \file
/// Runs decoded Programs. A wave executes all 64 lanes of an op at once;
/// every value is uniform (one copy) or per-lane (64 copies). Control flow
/// uses an explicit frame stack, never C++ recursion, so a wave suspends at a
/// barrier or a yield in any nesting and resumes later. Workgroups are
/// resident up to a limit per launch and scheduled round-robin over all
/// launches of a run; a barrier releases when every live wave of the
/// workgroup has reached it. A wave yields at every scf.while iteration
/// boundary and at rocdl.s.sleep, so spin-waits make progress, and a round in
/// which nothing can change any more is reported as a deadlock.
///
/// Plain C++ apart from the MLIR support types in signatures: no MLIR op is
/// touched here (Program.cpp decoded them).
///
//===----------------------------------------------------------------------===//

#include "Program.h"

#include "moec/Emulator/ScaledMfma.h"
#include "moec/reference/Formats.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>

namespace moec::emu::detail {

using llvm::failure;
using llvm::success;
using mlir::FailureOr;
using mlir::LogicalResult;

namespace {

constexpr int kLanes = 64;
constexpr uint64_t kAllLanes = ~uint64_t(0);

/// A memref value: which memory, where its element 0 lies, and its bounds.
struct MemRefDesc {
  Space space = Space::Global;
  /// Global buffer id, or the LDS region index.
  unsigned buffer = 0;
  int64_t baseBytes = 0;
  int64_t extentBytes = 0;
  /// Raw buffers: bytes the descriptor's range check admits.
  int64_t numRecords = 0;
};

/// One SSA value of one wave.
struct RtValue {
  bool uniform = true;
  std::vector<uint8_t> bytes;
  MemRefDesc mem;

  uint8_t *lane(int l, unsigned laneBytes) {
    return bytes.data() + (uniform ? 0 : size_t(l) * laneBytes);
  }
  const uint8_t *lane(int l, unsigned laneBytes) const {
    return bytes.data() + (uniform ? 0 : size_t(l) * laneBytes);
  }
  void shape(bool isUniform, unsigned laneBytes) {
    uniform = isUniform;
    bytes.assign(size_t(laneBytes) * (isUniform ? 1 : kLanes), 0);
  }
};

uint64_t getBits(const uint8_t *laneBytes, unsigned elemBits, unsigned index) {
  switch (elemBits) {
  case 4:
    return (laneBytes[index / 2] >> ((index & 1) * 4)) & 0xF;
  case 8:
    return laneBytes[index];
  case 16: {
    uint16_t v;
    std::memcpy(&v, laneBytes + 2 * index, 2);
    return v;
  }
  case 32: {
    uint32_t v;
    std::memcpy(&v, laneBytes + 4 * index, 4);
    return v;
  }
  default: {
    uint64_t v;
    std::memcpy(&v, laneBytes + 8 * index, 8);
    return v;
  }
  }
}

void setBits(uint8_t *laneBytes, unsigned elemBits, unsigned index,
             uint64_t bits) {
  switch (elemBits) {
  case 4: {
    uint8_t &byte = laneBytes[index / 2];
    const unsigned shift = (index & 1) * 4;
    byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | ((bits & 0xF) << shift));
    return;
  }
  case 8:
    laneBytes[index] = static_cast<uint8_t>(bits);
    return;
  case 16: {
    uint16_t v = static_cast<uint16_t>(bits);
    std::memcpy(laneBytes + 2 * index, &v, 2);
    return;
  }
  case 32: {
    uint32_t v = static_cast<uint32_t>(bits);
    std::memcpy(laneBytes + 4 * index, &v, 4);
    return;
  }
  default:
    std::memcpy(laneBytes + 8 * index, &bits, 8);
  }
}

uint64_t widthMask(unsigned width) {
  return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
}
int64_t signExtend(uint64_t bits, unsigned width) {
  if (width >= 64)
    return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t(1) << (width - 1);
  bits &= widthMask(width);
  return static_cast<int64_t>((bits ^ sign) - sign);
}

double decodeFloat(Elem elem, uint64_t bits) {
  switch (elem) {
  case Elem::F32: {
    uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  case Elem::F64: {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  case Elem::BF16:
    return ref::decodeBf16(static_cast<uint16_t>(bits));
  case Elem::F8E4M3FN:
    return ref::decodeFp8E4M3(static_cast<uint8_t>(bits));
  default:
    return 0.0;
  }
}

/// Rounds `value` once to `elem` (nearest even) and returns its bits.
uint64_t encodeFloat(Elem elem, double value) {
  switch (elem) {
  case Elem::F32: {
    float f = static_cast<float>(value);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  case Elem::F64: {
    uint64_t b;
    std::memcpy(&b, &value, 8);
    return b;
  }
  case Elem::BF16:
    return ref::encodeBf16(value);
  case Elem::F8E4M3FN:
    // The pipeline lowers truncf to FP8 with saturate-fp8-truncf: clamp to
    // +-448, then round to nearest even; NaN stays NaN.
    return ref::encodeFp8E4M3(value, ref::Overflow::Saturate);
  default:
    return 0;
  }
}

/// IEEE 754-2019 maximum / minimum (arith.maximumf / minimumf): NaN if
/// either operand is NaN, and -0 orders below +0.
double ieeeMaximum(double x, double y) {
  if (std::isnan(x) || std::isnan(y))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == y)
    return std::signbit(x) ? y : x;
  return x > y ? x : y;
}
double ieeeMinimum(double x, double y) {
  if (std::isnan(x) || std::isnan(y))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == y)
    return std::signbit(x) ? x : y;
  return x < y ? x : y;
}

enum class WaveState { Ready, AtBarrier, Done };

enum class FrameKind : uint8_t {
  Body,
  IfThen,
  IfElse,
  ForBody,
  WhileBefore,
  WhileAfter,
};

/// One active region of a wave.
struct Frame {
  FrameKind kind = FrameKind::Body;
  int block = 0;
  unsigned pos = 0;
  uint64_t mask = 0;
  /// The scf.if / scf.for / scf.while that owns this region.
  unsigned owner = 0;
  // scf.if
  uint64_t elseMask = 0;
  bool thenRan = false;
  // scf.for: induction variable, bound and step as per-lane int64 (all lanes
  // equal for a uniform loop), the values carried between iterations.
  bool uniformLoop = true;
  std::vector<int64_t> iv, ub, step;
  /// scf.for: the carried values; scf.if: the then-region's results;
  /// scf.while: the results of the lanes that have left the loop.
  std::vector<RtValue> saved;
  // scf.while: whether any lane has left, and the state at the previous
  // iteration boundary (the before-region's arguments, the loop mask, the
  // global write count and the wave's barrier count), to recognise an
  // iteration that changed nothing.
  bool anyExited = false;
  bool hasSnapshot = false;
  uint64_t snapMask = 0;
  uint64_t snapWrites = 0;
  uint64_t snapBarriers = 0;
  std::vector<RtValue> snapArgs;
};

/// LDS shadow of one byte: who wrote and read it in which barrier interval.
/// Epochs are stored +1 so that 0 means "never".
struct LdsShadow {
  uint32_t writeEpoch = 0;
  uint32_t readEpoch = 0;
  int16_t writer = -1;
  /// -2: several waves read it in readEpoch.
  int16_t reader = -1;
  uint8_t written = 0;
};

struct Wave {
  int id = 0;
  WaveState state = WaveState::Ready;
  uint64_t steps = 0;
  /// Barriers this wave has stopped at.
  uint64_t barrierStops = 0;
  /// Retracing: an scf.while iteration of the frame at `retraceDepth` ended
  /// in the state it started in, with no memory write anywhere and no
  /// barrier on the way. Until something writes memory the wave repeats that
  /// iteration forever (execution is deterministic); see Executor::isIdle.
  bool retracing = false;
  uint64_t retraceWrites = 0;
  uint64_t retraceBarriers = 0;
  size_t retraceDepth = 0;
  unsigned retraceOp = 0;
  std::vector<RtValue> regs;
  std::vector<Frame> frames;
};

struct Workgroup {
  std::array<int64_t, 3> id{{0, 0, 0}};
  std::vector<Wave> waves;
  std::vector<uint8_t> lds;
  std::vector<LdsShadow> shadow;
  uint32_t epoch = 1;
};

/// Why runWave returned: a barrier, a yield (scf.while iteration boundary
/// or rocdl.s.sleep; the wave stays ready), the wave's end, or a hard error.
enum class Stop { Barrier, Yield, Done, Error };

/// One launch of a run: its program, geometry, resident workgroups and
/// results. Every launch of a run shares the global memory and the count of
/// memory writes.
class Executor {
public:
  Executor(const Program &program, GlobalMemory &memory,
           const LaunchConfig &launch, std::string label, uint64_t &writes,
           RunResult &result, std::string &error)
      : program(program), memory(memory), launch(launch),
        label(std::move(label)), writes(writes), result(result),
        error(error) {}

  /// Resolves the workgroup size and binds the arguments.
  LogicalResult prepare(llvm::ArrayRef<KernelArgValue> args);
  /// Fills free resident slots, then runs every ready wave of every resident
  /// workgroup once (until it stops), releases barriers and retires finished
  /// workgroups. Sets `progress` when anything happened that can let a wave
  /// get further: a workgroup started or finished, a wave ended, a barrier
  /// released, or a wave yielded that is not merely retracing.
  LogicalResult runRound(bool &progress);
  /// Every workgroup of the grid has finished.
  bool finished() const { return next >= total && resident.empty(); }
  /// Deadlock report: one entry per resident workgroup with a retracing
  /// wave, and a note on workgroups never made resident.
  void describeStall(std::vector<std::string> &spinners,
                     std::vector<std::string> &notes) const;

private:
  LogicalResult bindArguments(llvm::ArrayRef<KernelArgValue> args);
  std::unique_ptr<Workgroup> makeWorkgroup(int64_t linearId);
  Stop runWave(Workgroup &wg, Wave &wave);
  LogicalResult execOp(Workgroup &wg, Wave &wave, const POp &p, uint64_t mask);
  LogicalResult enterIf(Wave &wave, unsigned opIndex, uint64_t mask);
  LogicalResult enterFor(Wave &wave, unsigned opIndex, uint64_t mask);
  LogicalResult enterWhile(Wave &wave, unsigned opIndex, uint64_t mask);
  LogicalResult finishRegion(Wave &wave, const POp &yield);
  LogicalResult finishBefore(Wave &wave, const POp &condition);
  void backEdge(Wave &wave, const POp &yield);
  void bindLoopArgs(Wave &wave, Frame &frame);
  /// The wave is retracing and nothing has been written since it started to:
  /// on its own it can never get further.
  bool isIdle(const Wave &wave) const;

  /// "LABEL: " or nothing.
  std::string prefix() const { return label.empty() ? label : label + ": "; }
  LogicalResult fatal(const POp &p, const std::string &why) {
    error = "emulator: " + prefix() + program.kernelName + " at " +
            describeLocation(p.op) + " (" + describeOpName(p.op) + "): " + why;
    return failure();
  }
  void report(FindingKind kind, const POp &p, const Workgroup &wg,
              const Wave &wave, int lane, std::string detail);

  /// Resolves one lane's access of `bytes` bytes at element `index` of a
  /// memref; returns null when the access must not happen (raw-buffer range
  /// check, or a finding that suppresses it).
  uint8_t *access(const POp &p, Workgroup &wg, const Wave &wave, int lane,
                  const MemRefDesc &mem, int64_t index, unsigned bytes,
                  bool isWrite, bool atomic = false);
  int64_t linearIndex(const ValueInfo &memInfo, const Wave &wave,
                      const std::vector<unsigned> &indexSlots, size_t first,
                      int lane);

  const RtValue &in(const Wave &w, const POp &p, unsigned i) const {
    return w.regs[p.in[i]];
  }
  const ValueInfo &info(unsigned slot) const { return program.values[slot]; }

  const Program &program;
  GlobalMemory &memory;
  const LaunchConfig &launch;
  const std::string label;
  /// Stores and atomics, over all launches, that changed a byte of global
  /// memory or LDS (its value or its written-shadow).
  uint64_t &writes;
  RunResult &result;
  std::string &error;
  std::array<int64_t, 3> block{{1, 1, 1}};
  int64_t threadsPerGroup = 1;
  int wavesPerGroup = 1;
  std::vector<RtValue> argValues;
  std::deque<std::unique_ptr<Workgroup>> resident;
  /// Linear id of the next workgroup to start, and the grid's size.
  int64_t next = 0;
  int64_t total = 0;
};

void Executor::report(FindingKind kind, const POp &p, const Workgroup &wg,
                      const Wave &wave, int lane, std::string detail) {
  ++result.findingCounts[static_cast<int>(kind)];
  if (result.findings.size() >= launch.maxFindings)
    return;
  Finding finding;
  finding.kind = kind;
  finding.launch = label;
  finding.kernel = program.kernelName;
  finding.location = describeLocation(p.op);
  finding.opName = describeOpName(p.op);
  finding.workgroup = wg.id;
  finding.wave = wave.id;
  finding.lane = lane;
  finding.detail = std::move(detail);
  result.findings.push_back(std::move(finding));
}

LogicalResult Executor::bindArguments(llvm::ArrayRef<KernelArgValue> args) {
  if (args.size() != program.argSlots.size()) {
    error = "emulator: " + prefix() + program.kernelName + " takes " +
            std::to_string(program.argSlots.size()) + " arguments, got " +
            std::to_string(args.size());
    return failure();
  }
  argValues.resize(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const ValueInfo &vi = info(program.argSlots[i]);
    RtValue &value = argValues[i];
    const std::string which = "argument " + std::to_string(i) + " of " +
                              program.kernelName;
    if (vi.isMemRef) {
      if (args[i].kind != KernelArgValue::Kind::Buffer ||
          args[i].buffer >= memory.bufferCount()) {
        error = "emulator: " + prefix() + which + " must be a registered buffer";
        return failure();
      }
      if (vi.space != Space::Global) {
        error = "emulator: " + prefix() + which + " must be a global memref";
        return failure();
      }
      int64_t extent = vi.memElemBytes;
      for (int64_t d : vi.shape)
        extent *= d;
      value.mem = {Space::Global, args[i].buffer, 0, extent, 0};
      continue;
    }
    if (args[i].kind != KernelArgValue::Kind::Scalar || vi.elem != Elem::Int ||
        vi.count != 1) {
      error = "emulator: " + prefix() + which + " must be an integer scalar";
      return failure();
    }
    value.shape(true, vi.laneBytes);
    setBits(value.bytes.data(), vi.elemBits, 0,
            static_cast<uint64_t>(args[i].scalar) & widthMask(vi.width));
  }
  return success();
}

std::unique_ptr<Workgroup> Executor::makeWorkgroup(int64_t linearId) {
  auto wg = std::make_unique<Workgroup>();
  wg->id = {linearId % launch.grid[0],
            (linearId / launch.grid[0]) % launch.grid[1],
            linearId / (launch.grid[0] * launch.grid[1])};
  // LDS starts poisoned: every byte unwritten.
  wg->lds.assign(size_t(program.ldsBytes), 0xFF);
  wg->shadow.assign(size_t(program.ldsBytes), LdsShadow());
  wg->waves.resize(wavesPerGroup);
  for (int w = 0; w < wavesPerGroup; ++w) {
    Wave &wave = wg->waves[w];
    wave.id = w;
    wave.regs.resize(program.values.size());
    for (size_t i = 0; i < program.argSlots.size(); ++i)
      wave.regs[program.argSlots[i]] = argValues[i];
    for (size_t r = 0; r < program.lds.size(); ++r) {
      RtValue &v = wave.regs[program.lds[r].slot];
      v.mem = {Space::Lds, static_cast<unsigned>(r), program.lds[r].offset,
               program.lds[r].bytes, 0};
    }
    Frame body;
    body.kind = FrameKind::Body;
    body.block = static_cast<int>(program.entry);
    const int64_t lanes = std::min<int64_t>(kLanes, threadsPerGroup - w * kLanes);
    body.mask = lanes >= kLanes ? kAllLanes : (uint64_t(1) << lanes) - 1;
    wave.frames.push_back(std::move(body));
  }
  ++result.stats.workgroups;
  result.stats.waves += wavesPerGroup;
  return wg;
}

LogicalResult Executor::prepare(llvm::ArrayRef<KernelArgValue> args) {
  for (int d = 0; d < 3; ++d) {
    block[d] = launch.block[d] ? launch.block[d] : program.knownBlockSize[d];
    if (block[d] <= 0) {
      error = "emulator: " + prefix() + program.kernelName +
              ": no workgroup size (launch.block or known_block_size)";
      return failure();
    }
    if (launch.grid[d] <= 0) {
      error = "emulator: " + prefix() + "grid dimensions must be positive";
      return failure();
    }
  }
  threadsPerGroup = block[0] * block[1] * block[2];
  wavesPerGroup = static_cast<int>((threadsPerGroup + kLanes - 1) / kLanes);
  total = launch.grid[0] * launch.grid[1] * launch.grid[2];
  return bindArguments(args);
}

bool Executor::isIdle(const Wave &wave) const {
  if (!wave.retracing || wave.retraceWrites != writes ||
      wave.retraceBarriers != wave.barrierStops ||
      wave.frames.size() <= wave.retraceDepth)
    return false;
  const Frame &loop = wave.frames[wave.retraceDepth];
  return loop.owner == wave.retraceOp &&
         (loop.kind == FrameKind::WhileBefore ||
          loop.kind == FrameKind::WhileAfter);
}

LogicalResult Executor::runRound(bool &progress) {
  const unsigned cap = std::max(1u, launch.maxResidentWorkgroups);
  while (resident.size() < cap && next < total) {
    resident.push_back(makeWorkgroup(next++));
    progress = true;
  }
  for (auto it = resident.begin(); it != resident.end();) {
    Workgroup &wg = **it;
    for (Wave &wave : wg.waves) {
      if (wave.state != WaveState::Ready)
        continue;
      switch (runWave(wg, wave)) {
      case Stop::Error:
        return failure();
      case Stop::Done:
        wave.state = WaveState::Done;
        progress = true;
        break;
      case Stop::Barrier:
        // Arriving changes nothing another wave can see; the release below
        // (when every live wave is here) is the progress.
        wave.state = WaveState::AtBarrier;
        break;
      case Stop::Yield:
        ++result.stats.yields;
        if (!isIdle(wave))
          progress = true;
        break;
      }
    }
    bool anyWaiting = false, allDone = true;
    for (const Wave &wave : wg.waves) {
      anyWaiting |= wave.state == WaveState::AtBarrier;
      allDone &= wave.state == WaveState::Done;
    }
    // Every live wave is at the barrier (finished waves do not hold it, as
    // s_barrier counts only waves that have not ended).
    bool allArrived = anyWaiting;
    for (const Wave &wave : wg.waves)
      allArrived &= wave.state != WaveState::Ready;
    if (allArrived) {
      for (Wave &wave : wg.waves)
        if (wave.state == WaveState::AtBarrier)
          wave.state = WaveState::Ready;
      ++wg.epoch;
      ++result.stats.barriers;
      progress = true;
    }
    if (allDone) {
      it = resident.erase(it);
      progress = true;
    } else {
      ++it;
    }
  }
  return success();
}

void Executor::describeStall(std::vector<std::string> &spinners,
                             std::vector<std::string> &notes) const {
  for (const auto &wg : resident) {
    for (const Wave &wave : wg->waves) {
      if (wave.state != WaveState::Ready || !isIdle(wave))
        continue;
      const POp &loop = program.ops[wave.retraceOp];
      spinners.push_back(prefix() + program.kernelName + " workgroup (" +
                         std::to_string(wg->id[0]) + "," +
                         std::to_string(wg->id[1]) + "," +
                         std::to_string(wg->id[2]) + ") wave " +
                         std::to_string(wave.id) + " at " +
                         describeLocation(loop.op) + " (" +
                         describeOpName(loop.op) + ")");
      break;
    }
  }
  if (next < total) {
    const int64_t waiting = total - next;
    notes.push_back(prefix() + std::to_string(waiting) + " workgroup" +
                    (waiting == 1 ? "" : "s") + " of " + program.kernelName +
                    " not yet resident (at most " +
                    std::to_string(std::max(1u, launch.maxResidentWorkgroups)) +
                    " resident)");
  }
}

Stop Executor::runWave(Workgroup &wg, Wave &wave) {
  while (!wave.frames.empty()) {
    Frame &frame = wave.frames.back();
    const PBlock &blk = program.blocks[frame.block];
    const unsigned opIndex = blk.ops[frame.pos];
    const POp &p = program.ops[opIndex];
    if (launch.maxStepsPerWave && ++wave.steps > launch.maxStepsPerWave) {
      (void)fatal(p, "wave " + std::to_string(wave.id) + " exceeded " +
                         std::to_string(launch.maxStepsPerWave) +
                         " steps (runaway loop?)");
      return Stop::Error;
    }
    ++result.stats.waveOps;
    switch (p.kind) {
    case Kind::Return:
      wave.frames.clear();
      return Stop::Done;
    case Kind::Barrier:
      ++frame.pos;
      ++wave.barrierStops;
      return Stop::Barrier;
    case Kind::Sleep:
      ++frame.pos;
      return Stop::Yield;
    case Kind::Yield:
      if (frame.kind == FrameKind::WhileAfter) {
        // An scf.while iteration boundary: give the scheduler its turn back.
        backEdge(wave, p);
        return Stop::Yield;
      }
      if (failed(finishRegion(wave, p)))
        return Stop::Error;
      continue;
    case Kind::Condition:
      if (failed(finishBefore(wave, p)))
        return Stop::Error;
      continue;
    case Kind::While:
    case Kind::If:
    case Kind::For: {
      // Entering a region pushes a frame, which may move `frame`.
      const uint64_t mask = frame.mask;
      ++frame.pos;
      LogicalResult entered = p.kind == Kind::While ? enterWhile(wave, opIndex, mask)
                              : p.kind == Kind::If  ? enterIf(wave, opIndex, mask)
                                                    : enterFor(wave, opIndex, mask);
      if (failed(entered))
        return Stop::Error;
      continue;
    }
    default:
      if (failed(execOp(wg, wave, p, frame.mask)))
        return Stop::Error;
      ++frame.pos;
    }
  }
  return Stop::Done;
}

/// Copies the lanes of `mask` from `src` into `dst`, making `dst` per-lane.
void mergeLanes(RtValue &dst, const RtValue &src, uint64_t mask,
                unsigned laneBytes) {
  if (laneBytes == 0)
    return; // memrefs: uniform by construction
  if (dst.uniform) {
    std::vector<uint8_t> copy = dst.bytes;
    dst.shape(false, laneBytes);
    for (int l = 0; l < kLanes; ++l)
      std::memcpy(dst.lane(l, laneBytes), copy.data(), laneBytes);
  }
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

int64_t Executor::linearIndex(const ValueInfo &memInfo, const Wave &wave,
                              const std::vector<unsigned> &indexSlots,
                              size_t first, int lane) {
  int64_t linear = 0;
  for (size_t d = 0; d < memInfo.shape.size(); ++d) {
    const RtValue &v = wave.regs[indexSlots[first + d]];
    const int64_t i = static_cast<int64_t>(getBits(v.lane(lane, 8), 64, 0));
    linear = linear * memInfo.shape[d] + i;
  }
  return linear;
}

uint8_t *Executor::access(const POp &p, Workgroup &wg, const Wave &wave,
                          int lane, const MemRefDesc &mem, int64_t index,
                          unsigned bytes, bool isWrite, bool atomic) {
  // `index` is a byte offset (callers scale element indices). An atomic is a
  // read and a write: it must find its bytes initialised, and it takes no
  // part in race detection (atomics are how waves may share a location).
  const int64_t offset = index;
  const char *verb = atomic ? "atomic" : isWrite ? "store" : "load";
  auto range = [&](const std::string &what) {
    return std::string(verb) + " of " + std::to_string(bytes) + " bytes at byte " +
           std::to_string(offset) + " of " + what;
  };
  if (mem.space == Space::Lds) {
    const auto &region = program.lds[mem.buffer];
    if (offset < 0 || offset + bytes > mem.extentBytes) {
      report(FindingKind::OutOfBounds, p, wg, wave, lane,
             range("LDS buffer " + std::to_string(mem.buffer) + " (" +
                   std::to_string(region.bytes) + " bytes)"));
      return nullptr;
    }
    const int64_t at = mem.baseBytes + offset;
    const uint32_t epoch = wg.epoch;
    const int16_t self = static_cast<int16_t>(wave.id);
    for (unsigned b = 0; b < bytes; ++b) {
      LdsShadow &s = wg.shadow[size_t(at + b)];
      // Built only when reporting: this loop runs for every LDS byte.
      auto byteText = [&] {
        return "LDS buffer " + std::to_string(mem.buffer) + " byte " +
               std::to_string(offset + b);
      };
      if (atomic) {
        if (!s.written) {
          report(FindingKind::UninitializedRead, p, wg, wave, lane,
                 "atomic on never-written " + byteText());
          break;
        }
        continue;
      }
      if (!isWrite) {
        if (!s.written) {
          report(FindingKind::UninitializedRead, p, wg, wave, lane,
                 "load of never-written " + byteText());
          break;
        }
        if (s.writeEpoch == epoch && s.writer != self) {
          report(FindingKind::LdsRace, p, wg, wave, lane,
                 "load of " + byteText() + " written by wave " +
                     std::to_string(s.writer) +
                     " in the same barrier interval");
          break;
        }
      } else {
        if (s.writeEpoch == epoch && s.writer != self) {
          report(FindingKind::LdsRace, p, wg, wave, lane,
                 "store to " + byteText() + " also written by wave " +
                     std::to_string(s.writer) +
                     " in the same barrier interval");
          break;
        }
        if (s.readEpoch == epoch && s.reader != self) {
          report(FindingKind::LdsRace, p, wg, wave, lane,
                 "store to " + byteText() + " read by " +
                     (s.reader == -2 ? std::string("several waves")
                                     : "wave " + std::to_string(s.reader)) +
                     " in the same barrier interval");
          break;
        }
      }
    }
    for (unsigned b = 0; b < bytes && !atomic; ++b) {
      LdsShadow &s = wg.shadow[size_t(at + b)];
      if (isWrite) {
        // A byte becoming written changes what a load of it reports.
        if (!s.written)
          ++writes;
        s.written = 1;
        s.writer = self;
        s.writeEpoch = epoch;
      } else if (s.readEpoch != epoch) {
        s.readEpoch = epoch;
        s.reader = self;
      } else if (s.reader != self) {
        s.reader = -2;
      }
    }
    return wg.lds.data() + at;
  }

  const size_t bufferSize = memory.size(mem.buffer);
  const std::string &name = memory.name(mem.buffer);
  if (mem.space == Space::RawBuffer) {
    // The descriptor's range check (num_records = validBytes, or the memref
    // size): the whole access is in or out; out reads 0, a store is dropped.
    if (offset < 0 || offset + int64_t(bytes) > mem.numRecords) {
      if (isWrite)
        ++result.stats.rawStoresDropped;
      else
        ++result.stats.rawLoadsOutOfRange;
      return nullptr;
    }
  } else if (offset < 0 || offset + int64_t(bytes) > mem.extentBytes) {
    report(FindingKind::OutOfBounds, p, wg, wave, lane,
           range("global memref over buffer '" + name + "' (" +
                 std::to_string(mem.extentBytes) + " bytes)"));
    return nullptr;
  }
  if (offset + int64_t(bytes) > int64_t(bufferSize)) {
    report(FindingKind::OutOfBounds, p, wg, wave, lane,
           range("buffer '" + name + "' (" + std::to_string(bufferSize) +
                 " bytes registered)"));
    return nullptr;
  }
  uint8_t *shadow = memory.written(mem.buffer) + offset;
  if (isWrite && !atomic) {
    if (std::memchr(shadow, 0, bytes))
      ++writes;
    std::memset(shadow, 1, bytes);
  } else {
    for (unsigned b = 0; b < bytes; ++b)
      if (!shadow[b]) {
        report(FindingKind::UninitializedRead, p, wg, wave, lane,
               "load of never-written byte " + std::to_string(offset + b) +
                   " of buffer '" + name + "'");
        break;
      }
  }
  return memory.data(mem.buffer) + offset;
}

/// Iterates the lanes a result must be computed for: lane 0 alone for a
/// uniform result, else every active lane.
template <typename F> void forLanes(bool uniform, uint64_t mask, F &&f) {
  if (uniform) {
    f(0);
    return;
  }
  for (int l = 0; l < kLanes; ++l)
    if (mask >> l & 1)
      f(l);
}

int firstLane(uint64_t mask) {
  for (int l = 0; l < kLanes; ++l)
    if (mask >> l & 1)
      return l;
  return 0;
}

LogicalResult Executor::execOp(Workgroup &wg, Wave &wave, const POp &p,
                               uint64_t mask) {
  auto &regs = wave.regs;
  auto allUniform = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      if (!regs[p.in[i]].uniform)
        return false;
    return true;
  };

  switch (p.kind) {
  case Kind::Constant: {
    RtValue &r = regs[p.out[0]];
    r.uniform = true;
    r.bytes = p.constant;
    return success();
  }
  case Kind::NoOp:
    return success();

  case Kind::IntBinary: {
    const ValueInfo &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
    RtValue &r = regs[p.out[0]];
    const bool uni = a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    const unsigned w = ri.width;
    const uint64_t m = widthMask(w);
    const IntOp op = static_cast<IntOp>(p.sub);
    bool divZero = false, overflow = false;
    forLanes(uni, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        const uint64_t x = getBits(a.lane(l, ri.laneBytes), ri.elemBits, e) & m;
        const uint64_t y = getBits(b.lane(l, ri.laneBytes), ri.elemBits, e) & m;
        const int64_t sx = signExtend(x, w), sy = signExtend(y, w);
        uint64_t v = 0;
        switch (op) {
        case IntOp::Add: v = x + y; break;
        case IntOp::Sub: v = x - y; break;
        case IntOp::Mul: v = x * y; break;
        case IntOp::And: v = x & y; break;
        case IntOp::Or: v = x | y; break;
        case IntOp::Xor: v = x ^ y; break;
        case IntOp::MinU: v = std::min(x, y); break;
        case IntOp::MaxU: v = std::max(x, y); break;
        case IntOp::MinS: v = static_cast<uint64_t>(std::min(sx, sy)); break;
        case IntOp::MaxS: v = static_cast<uint64_t>(std::max(sx, sy)); break;
        // Shifts by the width or more are poison in arith; give 0 (or the
        // sign fill) so a result is defined.
        case IntOp::Shl: v = y >= w ? 0 : x << y; break;
        case IntOp::ShrU: v = y >= w ? 0 : x >> y; break;
        case IntOp::ShrS:
          v = static_cast<uint64_t>(sx >> std::min<uint64_t>(y, w - 1));
          break;
        case IntOp::DivU: case IntOp::RemU: case IntOp::CeilDivU:
          if (y == 0) { divZero = true; break; }
          v = op == IntOp::DivU ? x / y : op == IntOp::RemU ? x % y
                                                            : (x + y - 1) / y;
          if (op == IntOp::CeilDivU)
            v = x / y + (x % y != 0);
          break;
        case IntOp::DivS: case IntOp::RemS: case IntOp::FloorDivS:
        case IntOp::CeilDivS: {
          if (sy == 0) { divZero = true; break; }
          if (sy == -1 && sx == signExtend(uint64_t(1) << (w - 1), w)) {
            overflow = true;
            break;
          }
          const int64_t q = sx / sy, rem = sx % sy;
          if (op == IntOp::DivS) v = static_cast<uint64_t>(q);
          else if (op == IntOp::RemS) v = static_cast<uint64_t>(rem);
          else if (op == IntOp::FloorDivS)
            v = static_cast<uint64_t>(q - ((rem != 0) && ((rem < 0) != (sy < 0))));
          else
            v = static_cast<uint64_t>(q + ((rem != 0) && ((rem < 0) == (sy < 0))));
          break;
        }
        }
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v & m);
      }
    });
    if (divZero)
      return fatal(p, "integer division by zero");
    if (overflow)
      return fatal(p, "signed division overflow");
    return success();
  }

  case Kind::CmpI: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
    RtValue &r = regs[p.out[0]];
    const bool uni = a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    const unsigned w = ai.width;
    const CmpPred pred = static_cast<CmpPred>(p.sub);
    forLanes(uni, mask, [&](int l) {
      for (unsigned e = 0; e < ai.count; ++e) {
        const uint64_t x = getBits(a.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(w);
        const uint64_t y = getBits(b.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(w);
        const int64_t sx = signExtend(x, w), sy = signExtend(y, w);
        bool c = false;
        switch (pred) {
        case CmpPred::Eq: c = x == y; break;
        case CmpPred::Ne: c = x != y; break;
        case CmpPred::Slt: c = sx < sy; break;
        case CmpPred::Sle: c = sx <= sy; break;
        case CmpPred::Sgt: c = sx > sy; break;
        case CmpPred::Sge: c = sx >= sy; break;
        case CmpPred::Ult: c = x < y; break;
        case CmpPred::Ule: c = x <= y; break;
        case CmpPred::Ugt: c = x > y; break;
        case CmpPred::Uge: c = x >= y; break;
        }
        setBits(r.lane(l, ri.laneBytes), 8, e, c ? 1 : 0);
      }
    });
    return success();
  }

  case Kind::IntCast: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    r.shape(a.uniform, ri.laneBytes);
    forLanes(a.uniform, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        uint64_t x = getBits(a.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(ai.width);
        if (p.sub == 1)
          x = static_cast<uint64_t>(signExtend(x, ai.width));
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, x & widthMask(ri.width));
      }
    });
    return success();
  }

  case Kind::Bitcast: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    if (ai.laneBytes != ri.laneBytes)
      return fatal(p, "bitcast between different sizes");
    regs[p.out[0]].uniform = regs[p.in[0]].uniform;
    regs[p.out[0]].bytes = regs[p.in[0]].bytes;
    return success();
  }

  case Kind::Select: {
    const RtValue &c = regs[p.in[0]], &a = regs[p.in[1]], &b = regs[p.in[2]];
    const ValueInfo &ri = info(p.out[0]);
    RtValue &r = regs[p.out[0]];
    if (ri.isMemRef) {
      if (!c.uniform)
        return fatal(p, "per-lane select of memrefs");
      r = c.bytes[0] ? a : b;
      return success();
    }
    const bool uni = c.uniform && a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    forLanes(uni, mask, [&](int l) {
      const RtValue &pick = c.lane(l, 1)[0] ? a : b;
      std::memcpy(r.lane(l, ri.laneBytes), pick.lane(l, ri.laneBytes), ri.laneBytes);
    });
    return success();
  }

  case Kind::FloatBinary: {
    const ValueInfo &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
    RtValue &r = regs[p.out[0]];
    const bool uni = a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    const FloatOp op = static_cast<FloatOp>(p.sub);
    forLanes(uni, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        const double x = decodeFloat(ri.elem, getBits(a.lane(l, ri.laneBytes), ri.elemBits, e));
        const double y = decodeFloat(ri.elem, getBits(b.lane(l, ri.laneBytes), ri.elemBits, e));
        double v = 0.0;
        // F32 and BF16 compute in float (BF16 arithmetic is legalised to
        // f32 then truncated), F64 in double.
        if (ri.elem == Elem::F64) {
          switch (op) {
          case FloatOp::Add: v = x + y; break;
          case FloatOp::Sub: v = x - y; break;
          case FloatOp::Mul: v = x * y; break;
          case FloatOp::Div: v = x / y; break;
          case FloatOp::MaxNum: v = std::fmax(x, y); break;
          case FloatOp::MinNum: v = std::fmin(x, y); break;
          case FloatOp::Maximum: v = ieeeMaximum(x, y); break;
          case FloatOp::Minimum: v = ieeeMinimum(x, y); break;
          }
        } else {
          const float fx = static_cast<float>(x), fy = static_cast<float>(y);
          float f = 0.0f;
          switch (op) {
          case FloatOp::Add: f = fx + fy; break;
          case FloatOp::Sub: f = fx - fy; break;
          case FloatOp::Mul: f = fx * fy; break;
          case FloatOp::Div: f = fx / fy; break;
          case FloatOp::MaxNum: f = std::fmax(fx, fy); break;
          case FloatOp::MinNum: f = std::fmin(fx, fy); break;
          case FloatOp::Maximum: f = static_cast<float>(ieeeMaximum(fx, fy)); break;
          case FloatOp::Minimum: f = static_cast<float>(ieeeMinimum(fx, fy)); break;
          }
          v = f;
        }
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, v));
      }
    });
    return success();
  }

  case Kind::FloatUnary: {
    const ValueInfo &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    r.shape(a.uniform, ri.laneBytes);
    const FloatUnaryOp op = static_cast<FloatUnaryOp>(p.sub);
    forLanes(a.uniform, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        const double x = decodeFloat(ri.elem, getBits(a.lane(l, ri.laneBytes), ri.elemBits, e));
        double v = 0.0;
        switch (op) {
        case FloatUnaryOp::Abs: v = std::fabs(x); break;
        case FloatUnaryOp::Neg: v = -x; break;
        // Correctly rounded exp2 (the double result rounded once); the
        // hardware's v_exp_f32 is within 1 ulp of it (docs/emulator.md).
        case FloatUnaryOp::Exp2: v = std::exp2(x); break;
        }
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, v));
      }
    });
    return success();
  }

  case Kind::Interleave: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
    RtValue &r = regs[p.out[0]];
    const bool uni = a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    forLanes(uni, mask, [&](int l) {
      for (unsigned e = 0; e < ai.count; ++e) {
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, 2 * e,
                getBits(a.lane(l, ai.laneBytes), ai.elemBits, e));
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, 2 * e + 1,
                getBits(b.lane(l, ai.laneBytes), ai.elemBits, e));
      }
    });
    return success();
  }

  case Kind::FloatCast: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    r.shape(a.uniform, ri.laneBytes);
    forLanes(a.uniform, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        const double x = decodeFloat(ai.elem, getBits(a.lane(l, ai.laneBytes), ai.elemBits, e));
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, x));
      }
    });
    return success();
  }

  case Kind::MemLoad: {
    const ValueInfo &mi = info(p.in[0]), &ri = info(p.out[0]);
    const MemRefDesc &mem = regs[p.in[0]].mem;
    const bool uni = allUniform(1, p.in.size());
    RtValue &r = regs[p.out[0]];
    r.shape(uni, ri.laneBytes);
    const unsigned bytes = ri.laneBytes;
    if (!mask)
      return success();
    forLanes(uni, mask, [&](int l) {
      const int lane = uni ? firstLane(mask) : l;
      const int64_t index = linearIndex(mi, wave, p.in, 1, lane);
      const uint8_t *src =
          access(p, wg, wave, lane, mem, index * mi.memElemBytes, bytes, false);
      uint8_t *dst = r.lane(l, bytes);
      if (src)
        std::memcpy(dst, src, bytes);
      else
        std::memset(dst, 0, bytes);
    });
    return success();
  }

  case Kind::MemStore: {
    const ValueInfo &vi = info(p.in[0]), &mi = info(p.in[1]);
    const RtValue &value = regs[p.in[0]];
    const MemRefDesc &mem = regs[p.in[1]].mem;
    const unsigned bytes = vi.laneBytes;
    // Every active lane stores, in lane order: with one address for all
    // lanes the highest active lane's value remains.
    for (int l = 0; l < kLanes; ++l) {
      if (!(mask >> l & 1))
        continue;
      const int64_t index = linearIndex(mi, wave, p.in, 2, l);
      uint8_t *dst =
          access(p, wg, wave, l, mem, index * mi.memElemBytes, bytes, true);
      if (!dst)
        continue;
      // Only a store that changes memory counts as a write: a wave that
      // rewrites the same value while it waits cannot release anyone.
      if (std::memcmp(dst, value.lane(l, bytes), bytes) != 0)
        ++writes;
      std::memcpy(dst, value.lane(l, bytes), bytes);
    }
    return success();
  }

  case Kind::GatherToLds: {
    // Each active lane reads `bytes` at its own source index (a raw buffer's
    // range check gives zeros, as for a load) and the wave's results go to
    // LDS contiguously in lane order: lane l at the base + l * bytes, with
    // the base from one lane's destination indices. The op's definition
    // names lane 0; the backend puts the first active lane's into M0
    // (v_readfirstlane), so the two agree only when every active lane
    // passes the same base, which is required here. The write happens now:
    // the backend waits for the DMA (vmcnt) before the workgroup's next
    // barrier and before this wave's own LDS reads of it.
    const unsigned bytes = static_cast<unsigned>(p.ints[0]);
    const size_t dstAt = 1 + static_cast<size_t>(p.ints[1]);
    const ValueInfo &si = info(p.in[0]), &di = info(p.in[dstAt]);
    const MemRefDesc &src = regs[p.in[0]].mem;
    const MemRefDesc &dst = regs[p.in[dstAt]].mem;
    if (!mask)
      return success();
    const int first = firstLane(mask);
    const int64_t base = linearIndex(di, wave, p.in, dstAt + 1, first);
    for (int l = first + 1; l < kLanes; ++l)
      if ((mask >> l & 1) &&
          linearIndex(di, wave, p.in, dstAt + 1, l) != base)
        return fatal(p, "lanes " + std::to_string(first) + " and " +
                            std::to_string(l) +
                            " pass different LDS destinations; the wave "
                            "writes from one base (lane 0's by the op's "
                            "definition, the first active lane's on the "
                            "hardware)");
    uint8_t data[16];
    for (int l = 0; l < kLanes; ++l) {
      if (!(mask >> l & 1))
        continue;
      const int64_t from = linearIndex(si, wave, p.in, 1, l);
      const uint8_t *in =
          access(p, wg, wave, l, src, from * si.memElemBytes, bytes, false);
      if (in)
        std::memcpy(data, in, bytes);
      else
        std::memset(data, 0, bytes);
      uint8_t *out = access(p, wg, wave, l, dst,
                            base * di.memElemBytes + int64_t(l) * bytes, bytes,
                            true);
      if (!out)
        continue;
      if (std::memcmp(out, data, bytes) != 0)
        ++writes;
      std::memcpy(out, data, bytes);
    }
    ++result.stats.ldsDmaOps;
    return success();
  }

  case Kind::AtomicRmw: {
    const ValueInfo &vi = info(p.in[0]), &mi = info(p.in[1]);
    const RtValue &value = regs[p.in[0]];
    const MemRefDesc &mem = regs[p.in[1]].mem;
    RtValue &r = regs[p.out[0]];
    r.shape(false, vi.laneBytes);
    const unsigned bytes = vi.laneBytes;
    const AtomicOp op = static_cast<AtomicOp>(p.sub);
    // Lanes in increasing order, each a whole read-modify-write: one valid
    // serialisation of the hardware's atomics.
    for (int l = 0; l < kLanes; ++l) {
      if (!(mask >> l & 1))
        continue;
      const int64_t index = linearIndex(mi, wave, p.in, 2, l);
      uint8_t *at = access(p, wg, wave, l, mem, index * mi.memElemBytes,
                           bytes, /*isWrite=*/true, /*atomic=*/true);
      if (!at)
        continue; // result stays 0, as for an out-of-range raw load
      const uint64_t old = getBits(at, vi.elemBits, 0);
      const uint64_t operand = getBits(value.lane(l, bytes), vi.elemBits, 0);
      const uint64_t m = widthMask(vi.width);
      const int64_t so = signExtend(old, vi.width), sv = signExtend(operand, vi.width);
      uint64_t next = 0;
      auto fp = [&](double v) { return encodeFloat(vi.elem, v); };
      const double fo = decodeFloat(vi.elem, old), fv = decodeFloat(vi.elem, operand);
      switch (op) {
      case AtomicOp::AddI: next = old + operand; break;
      case AtomicOp::MulI: next = old * operand; break;
      case AtomicOp::MaxS: next = uint64_t(std::max(so, sv)); break;
      case AtomicOp::MinS: next = uint64_t(std::min(so, sv)); break;
      case AtomicOp::MaxU: next = std::max(old & m, operand & m); break;
      case AtomicOp::MinU: next = std::min(old & m, operand & m); break;
      case AtomicOp::AndI: next = old & operand; break;
      case AtomicOp::OrI: next = old | operand; break;
      case AtomicOp::XorI: next = old ^ operand; break;
      case AtomicOp::Assign: next = operand; break;
      case AtomicOp::AddF:
        next = vi.elem == Elem::F32 ? fp(double(float(fo) + float(fv))) : fp(fo + fv);
        break;
      case AtomicOp::MaximumF: next = fp(ieeeMaximum(fo, fv)); break;
      case AtomicOp::MinimumF: next = fp(ieeeMinimum(fo, fv)); break;
      case AtomicOp::MaxNumF: next = fp(std::fmax(fo, fv)); break;
      case AtomicOp::MinNumF: next = fp(std::fmin(fo, fv)); break;
      }
      setBits(r.lane(l, bytes), vi.elemBits, 0, old);
      setBits(at, vi.elemBits, 0, next & m);
      // An atomic that leaves the value as it was (a spin's fetch-add of 0)
      // is not a write.
      if (getBits(at, vi.elemBits, 0) != old)
        ++writes;
      if (mem.space != Space::Lds) {
        uint8_t *shadow = memory.written(mem.buffer) + index * mi.memElemBytes;
        if (std::memchr(shadow, 0, bytes))
          ++writes;
        std::memset(shadow, 1, bytes);
      }
    }
    return success();
  }

  case Kind::Shuffle: {
    const ValueInfo &ai = info(p.in[0]), &bi = info(p.in[1]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
    RtValue &r = regs[p.out[0]];
    const bool uni = a.uniform && b.uniform;
    r.shape(uni, ri.laneBytes);
    forLanes(uni, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e) {
        const int64_t idx = p.ints[e];
        uint64_t v = 0; // a poison index (-1) reads 0
        if (idx >= 0 && idx < int64_t(ai.count))
          v = getBits(a.lane(l, ai.laneBytes), ai.elemBits, unsigned(idx));
        else if (idx >= int64_t(ai.count))
          v = getBits(b.lane(l, bi.laneBytes), bi.elemBits, unsigned(idx - ai.count));
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v);
      }
    });
    return success();
  }

  case Kind::Extract:
  case Kind::ExtractSlice: {
    const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &a = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    if (p.ints[0] < 0 || p.ints[0] + ri.count > ai.count)
      return fatal(p, "position out of range");
    r.shape(a.uniform, ri.laneBytes);
    forLanes(a.uniform, mask, [&](int l) {
      for (unsigned e = 0; e < ri.count; ++e)
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e,
                getBits(a.lane(l, ai.laneBytes), ai.elemBits,
                        unsigned(p.ints[0]) + e));
    });
    return success();
  }

  case Kind::Insert: {
    const ValueInfo &si = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &s = regs[p.in[0]], &dest = regs[p.in[1]];
    if (p.ints[0] < 0 || p.ints[0] >= int64_t(ri.count))
      return fatal(p, "position out of range");
    RtValue r = dest;
    const bool uni = s.uniform && dest.uniform;
    if (!uni && r.uniform)
      mergeLanes(r, dest, 0, ri.laneBytes);
    forLanes(uni, mask, [&](int l) {
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, unsigned(p.ints[0]),
              getBits(s.lane(l, si.laneBytes), si.elemBits, 0));
    });
    regs[p.out[0]] = std::move(r);
    return success();
  }

  case Kind::Broadcast: {
    const ValueInfo &si = info(p.in[0]), &ri = info(p.out[0]);
    const RtValue &s = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    r.shape(s.uniform, ri.laneBytes);
    forLanes(s.uniform, mask, [&](int l) {
      const uint64_t v = getBits(s.lane(l, si.laneBytes), si.elemBits, 0);
      for (unsigned e = 0; e < ri.count; ++e)
        setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v);
    });
    return success();
  }

  case Kind::ThreadId: {
    const int dim = static_cast<int>(p.ints[0]);
    RtValue &r = regs[p.out[0]];
    if (block[dim] == 1) {
      r.shape(true, 8);
      return success();
    }
    r.shape(false, 8);
    for (int l = 0; l < kLanes; ++l) {
      const int64_t t = int64_t(wave.id) * kLanes + l;
      const int64_t x = t % block[0], y = (t / block[0]) % block[1],
                    z = t / (block[0] * block[1]);
      setBits(r.lane(l, 8), 64, 0, uint64_t(dim == 0 ? x : dim == 1 ? y : z));
    }
    return success();
  }
  case Kind::BlockId:
  case Kind::BlockDim:
  case Kind::GridDim: {
    const int dim = static_cast<int>(p.ints[0]);
    RtValue &r = regs[p.out[0]];
    r.shape(true, 8);
    const int64_t v = p.kind == Kind::BlockId    ? wg.id[dim]
                      : p.kind == Kind::BlockDim ? block[dim]
                                                 : launch.grid[dim];
    setBits(r.bytes.data(), 64, 0, uint64_t(v));
    return success();
  }

  case Kind::FatRawBufferCast: {
    const RtValue &src = regs[p.in[0]];
    RtValue &r = regs[p.out[0]];
    r = src;
    r.mem.space = Space::RawBuffer;
    r.mem.numRecords = src.mem.extentBytes;
    if (p.ints[0]) {
      const RtValue &valid = regs[p.in[1]];
      if (!valid.uniform)
        return fatal(p, "validBytes must be uniform (a buffer descriptor is "
                        "scalar)");
      // num_records is a 32-bit descriptor field.
      const uint64_t v = getBits(valid.bytes.data(), 64, 0);
      r.mem.numRecords = static_cast<int64_t>(std::min<uint64_t>(v, 0xFFFFFFFFu));
    }
    return success();
  }

  case Kind::ScaledMfma: {
    if (mask != kAllLanes)
      return fatal(p, "scaled_mfma needs all 64 lanes active (the emulator "
                      "does not model MFMA under a partial EXEC mask)");
    const auto shape = static_cast<mfma::Shape>(p.ints[0]);
    const mfma::ShapeInfo si = mfma::shapeInfo(shape);
    // Each lane's source register bytes (FP4 uses the low 16 of 32).
    auto gatherSource = [&](unsigned operand, std::vector<uint8_t> &regsOut) {
      const ValueInfo &vi = info(p.in[operand]);
      const RtValue &v = regs[p.in[operand]];
      regsOut.assign(size_t(kLanes) * 32, 0);
      for (int l = 0; l < kLanes; ++l)
        std::memcpy(&regsOut[size_t(l) * 32], v.lane(l, vi.laneBytes),
                    std::min(32u, vi.laneBytes));
    };
    auto gatherScale = [&](unsigned operand, int64_t select,
                           std::array<uint8_t, kLanes> &out) {
      const ValueInfo &vi = info(p.in[operand]);
      const RtValue &v = regs[p.in[operand]];
      // A scalar scale is byte 0; a vector<4> scale is the op_sel byte.
      const unsigned byte = vi.count == 1 ? 0 : unsigned(select);
      for (int l = 0; l < kLanes; ++l)
        out[l] = v.lane(l, vi.laneBytes)[byte];
    };
    std::vector<uint8_t> aRegs, bRegs;
    std::array<uint8_t, kLanes> aScales, bScales;
    gatherSource(0, aRegs);
    gatherSource(1, bRegs);
    // amdgpu.mfma (ints[5] set) has no scale operands: every scale is 1.0.
    if (p.ints[5]) {
      aScales.fill(127);
      bScales.fill(127);
    } else {
      gatherScale(3, p.ints[1], aScales);
      gatherScale(4, p.ints[2], bScales);
    }
    MfmaOperand a{static_cast<mfma::OperandFormat>(p.ints[3]), aRegs.data(), 32,
                  aScales.data()};
    MfmaOperand b{static_cast<mfma::OperandFormat>(p.ints[4]), bRegs.data(), 32,
                  bScales.data()};
    const ValueInfo &ci = info(p.in[2]);
    const RtValue &c = regs[p.in[2]];
    std::vector<float> acc(size_t(kLanes) * si.accPerLane);
    for (int l = 0; l < kLanes; ++l)
      std::memcpy(&acc[size_t(l) * si.accPerLane], c.lane(l, ci.laneBytes),
                  size_t(si.accPerLane) * 4);
    scaledMfma(shape, a, b, acc.data(), acc.data());
    RtValue &r = regs[p.out[0]];
    r.shape(false, ci.laneBytes);
    for (int l = 0; l < kLanes; ++l)
      std::memcpy(r.lane(l, ci.laneBytes), &acc[size_t(l) * si.accPerLane],
                  size_t(si.accPerLane) * 4);
    ++result.stats.mfmas;
    return success();
  }

  default:
    return fatal(p, "internal: op kind not executable here");
  }
}

} // namespace

FailureOr<RunResult> execute(llvm::ArrayRef<LaunchInput> launches,
                             GlobalMemory &memory, std::string &error) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t writes = 0;
  std::vector<RunResult> results(launches.size());
  std::vector<std::unique_ptr<Executor>> executors;
  executors.reserve(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchInput &in = launches[i];
    executors.push_back(std::make_unique<Executor>(
        *in.program, memory, *in.launch, in.label, writes, results[i], error));
    if (failed(executors.back()->prepare(in.args)))
      return failure();
  }
  // Rounds over all launches until every grid has finished. A round with
  // no progress and no memory write leaves every live wave retracing a
  // spin or waiting at a barrier only such waves could release: nothing can
  // ever change what they wait on.
  for (;;) {
    bool live = false;
    for (const auto &executor : executors)
      live |= !executor->finished();
    if (!live)
      break;
    bool progress = false;
    const uint64_t writesBefore = writes;
    for (auto &executor : executors)
      if (!executor->finished() && failed(executor->runRound(progress)))
        return failure();
    if (progress || writes != writesBefore)
      continue;
    std::vector<std::string> spinners, notes;
    for (const auto &executor : executors)
      executor->describeStall(spinners, notes);
    if (spinners.empty()) // not expected: a stalled round has a spinner
      spinners.push_back("no wave can proceed");
    const size_t shown = std::min<size_t>(spinners.size(), 4);
    error = "emulator: deadlock: " + std::to_string(spinners.size()) +
            (spinners.size() == 1 ? " workgroup spins" : " workgroups spin") +
            " and nothing can change what they wait on: ";
    for (size_t i = 0; i < shown; ++i)
      error += (i ? "; " : "") + spinners[i];
    if (spinners.size() > shown)
      error += "; and " + std::to_string(spinners.size() - shown) + " more";
    for (const std::string &note : notes)
      error += "; " + note;
    return failure();
  }

  RunResult total;
  for (RunResult &result : results) {
    RunStats &sum = total.stats;
    const RunStats &one = result.stats;
    sum.workgroups += one.workgroups;
    sum.waves += one.waves;
    sum.waveOps += one.waveOps;
    sum.mfmas += one.mfmas;
    sum.barriers += one.barriers;
    sum.yields += one.yields;
    sum.rawLoadsOutOfRange += one.rawLoadsOutOfRange;
    sum.rawStoresDropped += one.rawStoresDropped;
    sum.ldsDmaOps += one.ldsDmaOps;
    for (size_t k = 0; k < total.findingCounts.size(); ++k)
      total.findingCounts[k] += result.findingCounts[k];
    for (Finding &finding : result.findings)
      total.findings.push_back(std::move(finding));
  }
  total.stats.seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  return total;
}

} // namespace moec::emu::detail
