//===- Executor.h - the emulator's run-time state ---------------*- C++ -*-===//
///
/// \file
/// Internal to the emulator: the run-time values, frames, waves and
/// workgroups of decoded Programs, and the Executor that runs one launch.
/// The Executor's work is split by concern:
///
///   Schedule.cpp      execute(), rounds, runWave, residency, deadlock
///                     detection, argument binding
///   ControlFlow.cpp   scf.if / scf.for / scf.while: entering, back edges,
///                     finishing regions, merging lanes
///   MemoryAccess.cpp  address computation, access(), raw-buffer bounds, the
///                     LDS shadow and the race / uninitialised detectors
///   OpSemantics.cpp   execOp: the semantics of every other op, one member
///                     function per op kind (execIntBinary, execMemLoad, ...)
///
/// A wave executes all 64 lanes of an op at once; every value is uniform
/// (one copy) or per-lane (64 copies). Control flow uses an explicit frame
/// stack, never C++ recursion, so a wave suspends at a barrier or a yield in
/// any nesting and resumes later. Plain C++ apart from the MLIR support
/// types in signatures: no MLIR op is touched here (Program.cpp decoded
/// them).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_LIB_EXECUTOR_H
#define MOEC_EMULATOR_LIB_EXECUTOR_H

#include "Program.h"
#include "moec/target/target_info.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace moec::emu::detail {

/// Whether every chip and part moec knows runs waves of `lanes` lanes.
constexpr bool everyKnownTargetRuns(uint32_t lanes) {
  for (const target::TargetInfo *chip : target::kKnownTargets)
    if (chip->wavefrontSize != lanes)
      return false;
  return true;
}

/// Lanes of a wave: wave64, the width of the emulator's lane masks
/// (uint64_t), which every chip moec knows runs. A wave32 chip needs the
/// masks and this constant to become the kernel's own.
constexpr int kLanes = 64;
static_assert(everyKnownTargetRuns(kLanes),
              "the emulator's lane masks hold one wave64 of every chip");
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
  /// Global: an external buffer (GlobalMemory::addExternalBuffer), which
  /// another process may access concurrently: accesses are atomic.
  bool shared = false;
};

/// Copies `bytes` between emulator values and memory another process
/// accesses concurrently: naturally aligned pieces of up to 8 bytes, each
/// one sequentially consistent atomic load (sharedLoad, from `src`) or
/// store (sharedStore, to `dst`). A 16-byte access is two 8-byte atomics,
/// as the hardware's dwordx4 is not one atomic access either.
inline void sharedLoad(uint8_t *dst, const uint8_t *src, unsigned bytes) {
  unsigned at = 0;
  while (at < bytes) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(src + at);
    const unsigned left = bytes - at;
    if (left >= 8 && address % 8 == 0) {
      const uint64_t v = __atomic_load_n(
          reinterpret_cast<const uint64_t *>(src + at), __ATOMIC_SEQ_CST);
      std::memcpy(dst + at, &v, 8);
      at += 8;
    } else if (left >= 4 && address % 4 == 0) {
      const uint32_t v = __atomic_load_n(
          reinterpret_cast<const uint32_t *>(src + at), __ATOMIC_SEQ_CST);
      std::memcpy(dst + at, &v, 4);
      at += 4;
    } else if (left >= 2 && address % 2 == 0) {
      const uint16_t v = __atomic_load_n(
          reinterpret_cast<const uint16_t *>(src + at), __ATOMIC_SEQ_CST);
      std::memcpy(dst + at, &v, 2);
      at += 2;
    } else {
      dst[at] = __atomic_load_n(src + at, __ATOMIC_SEQ_CST);
      at += 1;
    }
  }
}
inline void sharedStore(uint8_t *dst, const uint8_t *src, unsigned bytes) {
  unsigned at = 0;
  while (at < bytes) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(dst + at);
    const unsigned left = bytes - at;
    if (left >= 8 && address % 8 == 0) {
      uint64_t v;
      std::memcpy(&v, src + at, 8);
      __atomic_store_n(reinterpret_cast<uint64_t *>(dst + at), v,
                       __ATOMIC_SEQ_CST);
      at += 8;
    } else if (left >= 4 && address % 4 == 0) {
      uint32_t v;
      std::memcpy(&v, src + at, 4);
      __atomic_store_n(reinterpret_cast<uint32_t *>(dst + at), v,
                       __ATOMIC_SEQ_CST);
      at += 4;
    } else if (left >= 2 && address % 2 == 0) {
      uint16_t v;
      std::memcpy(&v, src + at, 2);
      __atomic_store_n(reinterpret_cast<uint16_t *>(dst + at), v,
                       __ATOMIC_SEQ_CST);
      at += 2;
    } else {
      __atomic_store_n(dst + at, src[at], __ATOMIC_SEQ_CST);
      at += 1;
    }
  }
}

/// A read-modify-write of the naturally aligned `bytes` (1, 2, 4 or 8) at
/// `at` in memory another process accesses concurrently: `next(old)`
/// computes the new value, applied with a compare-and-swap loop; returns
/// the old value (one atomic step, as the hardware's atomic is).
template <typename Next>
uint64_t sharedReadModifyWrite(uint8_t *at, unsigned bytes, Next next) {
  auto loop = [&](auto *word) {
    using T = std::remove_pointer_t<decltype(word)>;
    T old = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    for (;;) {
      const T value = static_cast<T>(next(uint64_t(old)));
      if (__atomic_compare_exchange_n(word, &old, value, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return uint64_t(old);
    }
  };
  switch (bytes) {
  case 1: return loop(at);
  case 2: return loop(reinterpret_cast<uint16_t *>(at));
  case 4: return loop(reinterpret_cast<uint32_t *>(at));
  default: return loop(reinterpret_cast<uint64_t *>(at));
  }
}

/// Another process of the PeerGroup, as a stalled run sees it.
struct PeerInfo {
  int64_t pid = 0;
  /// Runs over external buffers it has under way.
  uint64_t running = 0;
  /// Its progress counter (summed over the segments it shares with us).
  uint64_t progress = 0;
  bool alive = true;

  bool operator==(const PeerInfo &other) const {
    return pid == other.pid && running == other.running &&
           progress == other.progress && alive == other.alive;
  }
  bool operator!=(const PeerInfo &other) const { return !(*this == other); }
};
/// Whether this process is in a PeerGroup segment (shares memory).
bool peerMember();
/// Counts a run in this process's slots (delta +1 when it starts, -1 when
/// it ends); also bumps the progress counter.
void peerRunning(int delta);
/// Bumps this process's progress counter in every segment it is in.
void peerProgressed();
/// The other members of every segment this process is in, one per pid.
std::vector<PeerInfo> peerStates();

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
  /// shape() for a result whose every lane of `mask` (lane 0 when uniform)
  /// the caller then writes in full: only the other lanes are zeroed, and
  /// the storage is reused (no allocation once it has grown).
  void shapeFor(bool isUniform, unsigned laneBytes, uint64_t mask) {
    uniform = isUniform;
    bytes.resize(size_t(laneBytes) * (isUniform ? 1 : kLanes));
    if (isUniform || mask == kAllLanes)
      return;
    for (int l = 0; l < kLanes; ++l)
      if (!(mask >> l & 1))
        std::memset(bytes.data() + size_t(l) * laneBytes, 0, laneBytes);
  }
  /// Makes a uniform value per-lane in place (every lane a copy of lane 0).
  void spread(unsigned laneBytes) {
    if (!uniform)
      return;
    uniform = false;
    bytes.resize(size_t(laneBytes) * kLanes);
    for (int l = 1; l < kLanes; ++l)
      std::memcpy(bytes.data() + size_t(l) * laneBytes, bytes.data(),
                  laneBytes);
  }
};

/// Element `index` of one lane's bytes, `elemBits` wide (4-bit elements
/// packed, the even one in the low nibble).
inline uint64_t getBits(const uint8_t *laneBytes, unsigned elemBits,
                        unsigned index) {
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

/// Sets element `index` of one lane's bytes (see getBits).
inline void setBits(uint8_t *laneBytes, unsigned elemBits, unsigned index,
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

/// The low `width` bits set.
inline uint64_t widthMask(unsigned width) {
  return width >= 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
}
/// The low `width` bits of `bits` as a signed integer.
inline int64_t signExtend(uint64_t bits, unsigned width) {
  if (width >= 64)
    return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t(1) << (width - 1);
  bits &= widthMask(width);
  return static_cast<int64_t>((bits ^ sign) - sign);
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

/// LDS shadow of every byte of a workgroup's LDS: who wrote and read it in
/// which barrier interval. One array per field, so that the detectors check
/// and update an access's bytes with vector operations. Epochs are stored
/// +1 so that 0 means "never".
struct LdsShadow {
  std::vector<uint32_t> writeEpoch;
  std::vector<uint32_t> readEpoch;
  std::vector<int16_t> writer;
  /// -2: several waves read it in readEpoch.
  std::vector<int16_t> reader;
  std::vector<uint8_t> written;

  void reset(size_t bytes) {
    writeEpoch.assign(bytes, 0);
    readEpoch.assign(bytes, 0);
    writer.assign(bytes, -1);
    reader.assign(bytes, -1);
    written.assign(bytes, 0);
  }
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
  LdsShadow shadow;
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
  mlir::LogicalResult prepare(llvm::ArrayRef<KernelArgValue> args);
  /// Fills free resident slots, then runs every ready wave of every resident
  /// workgroup once (until it stops), releases barriers and retires finished
  /// workgroups. Sets `progress` when anything happened that can let a wave
  /// get further: a workgroup started or finished, a wave ended, a barrier
  /// released, or a wave yielded that is not merely retracing.
  mlir::LogicalResult runRound(bool &progress);
  /// Every workgroup of the grid has finished.
  bool finished() const { return next >= total && resident.empty(); }
  /// An argument binds an external buffer (another process may write it).
  bool bindsExternal() const { return external; }
  /// Deadlock report: one entry per resident workgroup with a retracing
  /// wave, and a note on workgroups never made resident.
  void describeStall(std::vector<std::string> &spinners,
                     std::vector<std::string> &notes) const;
  /// Sets the launch's distinct-line counters from the line bitmaps.
  void finishCounters();
  /// Runs workgroup `linearId` alone to its end (the parallel path: the
  /// kernel cannot wait on another workgroup); false on a hard error.
  bool runWorkgroupAlone(int64_t linearId);
  /// ORs `other`'s line bitmaps into this executor's.
  void mergeLines(const Executor &other);

private:
  mlir::LogicalResult bindArguments(llvm::ArrayRef<KernelArgValue> args);
  std::unique_ptr<Workgroup> makeWorkgroup(int64_t linearId);
  Stop runWave(Workgroup &wg, Wave &wave);
  mlir::LogicalResult execOp(Workgroup &wg, Wave &wave, const POp &p,
                             uint64_t mask);
  // The semantics of each op kind (OpSemantics.cpp), dispatched by execOp.
  mlir::LogicalResult execConstant(Workgroup &wg, Wave &wave, const POp &p,
                                   uint64_t mask);
  mlir::LogicalResult execIntBinary(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask);
  mlir::LogicalResult execCmpI(Workgroup &wg, Wave &wave, const POp &p,
                               uint64_t mask);
  mlir::LogicalResult execIntCast(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execBitcast(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execSelect(Workgroup &wg, Wave &wave, const POp &p,
                                 uint64_t mask);
  mlir::LogicalResult execFloatBinary(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask);
  mlir::LogicalResult execFloatUnary(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask);
  mlir::LogicalResult execInterleave(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask);
  mlir::LogicalResult execFloatCast(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask);
  mlir::LogicalResult execMemLoad(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execMemStore(Workgroup &wg, Wave &wave, const POp &p,
                                   uint64_t mask);
  mlir::LogicalResult execGatherToLds(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask);
  mlir::LogicalResult execAtomicRmw(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask);
  mlir::LogicalResult execShuffle(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execExtract(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execInsert(Workgroup &wg, Wave &wave, const POp &p,
                                 uint64_t mask);
  mlir::LogicalResult execBroadcast(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask);
  mlir::LogicalResult execThreadId(Workgroup &wg, Wave &wave, const POp &p,
                                   uint64_t mask);
  mlir::LogicalResult execGridQuery(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask);
  mlir::LogicalResult execMemView(Workgroup &wg, Wave &wave, const POp &p,
                                  uint64_t mask);
  mlir::LogicalResult execFatRawBufferCast(Workgroup &wg, Wave &wave, const POp &p,
                                           uint64_t mask);
  mlir::LogicalResult execScaledMfma(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask);
  mlir::LogicalResult enterIf(Wave &wave, unsigned opIndex, uint64_t mask);
  mlir::LogicalResult enterFor(Wave &wave, unsigned opIndex, uint64_t mask);
  mlir::LogicalResult enterWhile(Wave &wave, unsigned opIndex, uint64_t mask);
  mlir::LogicalResult finishRegion(Wave &wave, const POp &yield);
  mlir::LogicalResult finishBefore(Wave &wave, const POp &condition);
  void backEdge(Wave &wave, const POp &yield);
  void bindLoopArgs(Wave &wave, Frame &frame);
  /// The wave is retracing and nothing has been written since it started to:
  /// on its own it can never get further.
  bool isIdle(const Wave &wave) const;

  /// "LABEL: " or nothing.
  std::string prefix() const { return label.empty() ? label : label + ": "; }
  mlir::LogicalResult fatal(const POp &p, const std::string &why) {
    error = "emulator: " + prefix() + program.kernelName + " at " +
            describeLocation(p.op) + " (" + describeOpName(p.op) + "): " + why;
    return mlir::failure();
  }
  void report(FindingKind kind, const POp &p, const Workgroup &wg,
              const Wave &wave, int lane, std::string detail);

  /// Resolves one lane's access of `bytes` bytes at element `index` of a
  /// memref; returns null when the access must not happen (raw-buffer range
  /// check, or a finding that suppresses it).
  uint8_t *access(const POp &p, Workgroup &wg, const Wave &wave, int lane,
                  const MemRefDesc &mem, int64_t index, unsigned bytes,
                  bool isWrite, bool atomic = false);
  /// The findings of access(), built out of line (rare).
  [[gnu::cold, gnu::noinline]] void
  reportOutOfBounds(const POp &p, const Workgroup &wg, const Wave &wave,
                    int lane, const MemRefDesc &mem, int64_t offset,
                    unsigned bytes, bool isWrite, bool atomic);
  [[gnu::cold, gnu::noinline]] void
  reportLdsBytes(const POp &p, Workgroup &wg, const Wave &wave, int lane,
                 const MemRefDesc &mem, int64_t offset, unsigned bytes,
                 bool isWrite, bool atomic);
  [[gnu::cold, gnu::noinline]] void
  reportUnwritten(const POp &p, const Workgroup &wg, const Wave &wave,
                  int lane, const MemRefDesc &mem, int64_t offset,
                  unsigned bytes, const uint8_t *shadow);
  /// Re-reads the global buffers' storage into `views`.
  void refreshViews();
  /// Counts one access that moved `bytes` at byte `offset` of global
  /// buffer `buffer` (its bytes and 64-byte lines).
  void countGlobal(unsigned buffer, int64_t offset, unsigned bytes,
                   bool read, bool written);
  /// Adds the extra cycles of one wave's LDS access to ldsBankConflicts:
  /// lanes of `mask` access `bytes` at LDS byte addresses `addresses`.
  void countBankConflicts(const int64_t *addresses, uint64_t mask,
                          unsigned bytes);
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
  /// Finished workgroups whose storage (registers, frames, LDS) the next
  /// ones reuse.
  std::vector<std::unique_ptr<Workgroup>> spare;
  /// Each global buffer's storage (by id), so that an access needs no call
  /// into GlobalMemory; buffers are fixed while a run executes.
  struct BufferView {
    uint8_t *data = nullptr;
    uint8_t *written = nullptr;
    size_t size = 0;
    bool shared = false;
  };
  std::vector<BufferView> views;
  /// Bit per 64-byte line of each global buffer (by id): read, written.
  std::vector<std::vector<uint64_t>> linesRead, linesWritten;
  /// Linear id of the next workgroup to start, and the grid's size.
  int64_t next = 0;
  int64_t total = 0;
  /// See bindsExternal().
  bool external = false;
};

/// Copies the lanes of `mask` from `src` into `dst`, making `dst` per-lane
/// (ControlFlow.cpp).
void mergeLanes(RtValue &dst, const RtValue &src, uint64_t mask,
                unsigned laneBytes);

} // namespace moec::emu::detail

#endif // MOEC_EMULATOR_LIB_EXECUTOR_H
