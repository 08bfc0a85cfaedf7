//===- Emulator.h - wave-accurate CPU execution of kernel IR ----*- C++ -*-===//
///
/// \file
/// Executes one gpu.func of moec's kernel IR (the level the codegen emits,
/// before conversion to ROCDL) on the CPU with gfx950 semantics: a grid of
/// workgroups, waves of 64 lanes in lockstep under an execution mask,
/// per-workgroup LDS, barriers, raw-buffer range checks and scaled MFMA with
/// the lane layouts of moec/target/mfma_layout.h. See docs/emulator.md.
///
/// Three detectors watch every access and report kernel, op location,
/// workgroup, wave and lane: LDS races within a barrier interval, reads of
/// bytes nothing wrote, and out-of-bounds global and LDS accesses.
///
/// Several launches (EP ranks) can run at once in one cooperative scheduler
/// over one GlobalMemory, so kernels that spin on flags other workgroups or
/// other ranks write make progress, and a wait nothing can satisfy is
/// reported as a deadlock instead of hanging.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_EMULATOR_H
#define MOEC_EMULATOR_EMULATOR_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moec::rt {
struct KernelInfo;
struct KernelResources;
} // namespace moec::rt

namespace moec::target {
struct TargetInfo;
} // namespace moec::target

namespace moec::emu {

/// Host buffers the kernel sees as global memory. Each byte carries a shadow
/// bit "written"; a buffer starts poisoned (nothing written) and host writes
/// through write() mark their bytes.
class GlobalMemory {
public:
  GlobalMemory();
  ~GlobalMemory();
  GlobalMemory(const GlobalMemory &) = delete;
  GlobalMemory &operator=(const GlobalMemory &) = delete;

  /// Registers a zero-filled, poisoned buffer of `size` bytes; returns its id.
  unsigned addBuffer(std::string name, size_t size);
  /// Registers `size` bytes at `data`, with their written-shadow at
  /// `written`, as a buffer this GlobalMemory does not own: memory another
  /// process maps too and may read and write while a launch runs (an IPC
  /// allocation). Every access to it is an atomic operation, and a run that
  /// waits on it polls while a peer process (PeerGroup) may still write
  /// (docs/emulator.md, "Ranks in separate processes").
  unsigned addExternalBuffer(std::string name, size_t size, uint8_t *data,
                             uint8_t *written);
  /// Whether buffer `id` was registered by addExternalBuffer.
  bool isExternal(unsigned id) const;
  /// Copies host data into a buffer at `offset` and marks it written.
  void write(unsigned id, size_t offset, const void *data, size_t size);
  /// Marks every byte of the buffer unwritten and fills it with 0xFF, so a
  /// value nothing stored also stands out numerically (NaN in BF16/FP32).
  void poison(unsigned id);

  unsigned bufferCount() const;
  const std::string &name(unsigned id) const;
  size_t size(unsigned id) const;
  uint8_t *data(unsigned id);
  const uint8_t *data(unsigned id) const;
  /// Shadow: 1 where the byte was written since the last poison().
  uint8_t *written(unsigned id);
  const uint8_t *written(unsigned id) const;

private:
  struct Buffer;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

/// The processes that share memory with this one, so that a run waiting on
/// an external buffer can tell a peer that is still working from a
/// deadlock. A *segment* is a page of shared memory (a memfd) holding one
/// slot per member process: its pid, the runs over external buffers it has
/// under way, and a counter it bumps whenever such a run makes progress.
/// A process creates its own segment with the first memory it shares and
/// joins the segment of every process whose memory it maps; a run over
/// external buffers publishes its progress in every segment the process is
/// in and, when it stalls, watches the other members' slots: it keeps
/// polling while some member advances, and fails when none has advanced
/// for `MOEC_EMULATED_PEER_TIMEOUT` seconds (a deadlock; default 30) or
/// when a member's process is gone. A process leaves its slots at exit;
/// a child forked from a member joins its parent's segments (announce()).
class PeerGroup {
public:
  /// This process's segment, created on first use; its descriptor, which
  /// peers open through /proc/<pid>/fd, or -1 with `error` set.
  static int ownSegment(std::string &error);
  /// Maps segment `fd` of process `pid` and takes a slot in it (once per
  /// segment).
  static mlir::LogicalResult joinSegment(int64_t pid, int fd,
                                         std::string &error);
  /// Takes this process's slot in every segment it has mapped (a forked
  /// child thereby joins its parent's segments); runs do it themselves.
  static void announce();
  /// The stall limit: $MOEC_EMULATED_PEER_TIMEOUT seconds (a positive
  /// number), else 30.
  static double timeoutSeconds();
};

/// One kernel argument: a global buffer (for a memref parameter) or an
/// integer scalar.
struct KernelArgValue {
  enum class Kind { Buffer, Scalar };
  Kind kind = Kind::Scalar;
  unsigned buffer = 0;
  int64_t scalar = 0;

  static KernelArgValue makeBuffer(unsigned id) {
    return {Kind::Buffer, id, 0};
  }
  static KernelArgValue makeScalar(int64_t value) {
    return {Kind::Scalar, 0, value};
  }
};

/// Launch geometry and limits of one run.
struct LaunchConfig {
  std::array<int64_t, 3> grid{{1, 1, 1}};
  /// Workgroup size; {0, 0, 0} takes the gpu.func's known_block_size.
  std::array<int64_t, 3> block{{0, 0, 0}};
  /// Workgroups resident at once (scheduled round-robin among themselves);
  /// residentWorkgroupCap() gives the hardware's number for a kernel.
  unsigned maxResidentWorkgroups = 4;
  /// Ops one wave may execute before the run is declared runaway (never
  /// hang); 0 means no limit.
  uint64_t maxStepsPerWave = uint64_t(1) << 32;
  /// Findings kept in detail (all are counted).
  unsigned maxFindings = 32;
  /// Host threads that run workgroups at once (0: every core). Only a run
  /// whose kernels cannot wait on other workgroups runs in parallel, with
  /// results, stats and findings identical for any count (docs/emulator.md).
  unsigned threads = 0;
};

enum class FindingKind { LdsRace, UninitializedRead, OutOfBounds };
const char *toString(FindingKind kind);

/// One detector report.
struct Finding {
  FindingKind kind = FindingKind::OutOfBounds;
  /// The launch's label (KernelLaunch::label, e.g. "rank 1"); may be empty.
  std::string launch;
  std::string kernel;
  /// The op's location as MLIR prints it, and the op name.
  std::string location;
  std::string opName;
  std::array<int64_t, 3> workgroup{{0, 0, 0}};
  int wave = 0;
  int lane = 0;
  /// Which memory and byte offset, and for races the other wave.
  std::string detail;

  /// One line: "[LABEL: ]kind in KERNEL at LOC (op) workgroup (x,y,z) wave w
  /// lane l: detail".
  std::string str() const;
};

struct RunStats {
  uint64_t workgroups = 0;
  uint64_t waves = 0;
  /// Ops executed, counted once per wave (not per lane).
  uint64_t waveOps = 0;
  uint64_t mfmas = 0;
  uint64_t barriers = 0;
  /// Times a wave gave the scheduler back its turn (an scf.while iteration
  /// boundary or rocdl.s.sleep).
  uint64_t yields = 0;
  /// Raw-buffer accesses past the descriptor's range: loads that returned
  /// zero and stores that were dropped (hardware semantics, not findings).
  uint64_t rawLoadsOutOfRange = 0;
  uint64_t rawStoresDropped = 0;
  /// amdgpu.gather_to_lds ops executed, counted once per wave.
  uint64_t ldsDmaOps = 0;

  // Counters for cost models (docs/emulator.md, "Counters"). Accesses are
  // counted per active lane; a load whose address and result are uniform
  // is one access (the hardware's scalar load). Suppressed accesses (a
  // finding, a raw-buffer range miss) move nothing and are not counted.
  // Atomics count as a read and a write.
  /// Bytes moved by global and raw-buffer accesses (incl. the global side
  /// of gather_to_lds).
  uint64_t globalBytesRead = 0;
  uint64_t globalBytesWritten = 0;
  /// Distinct 64-byte lines (of each buffer, from its start) read / written
  /// over a launch; summed over launches.
  uint64_t globalLinesRead = 0;
  uint64_t globalLinesWritten = 0;
  /// Bytes moved by LDS accesses (incl. the LDS side of gather_to_lds).
  uint64_t ldsBytesRead = 0;
  uint64_t ldsBytesWritten = 0;
  /// Extra LDS cycles from bank conflicts under gfx950's banking model
  /// (64 banks of 4 bytes, phases of 64 dwords; docs/emulator.md).
  uint64_t ldsBankConflicts = 0;
  /// Scaled MFMAs issued (per wave; equals `mfmas`).
  uint64_t scaledMfmas = 0;
  /// Every other kernel-IR op executed, per wave (waveOps - scaledMfmas).
  uint64_t otherInstructions = 0;
  double seconds = 0.0;
};

/// Adds every counter of `one` to `sum` (seconds too).
void accumulate(RunStats &sum, const RunStats &one);

/// Stats per kernel name, in the order the names were first added.
using KernelStatsList = std::vector<std::pair<std::string, RunStats>>;
/// Adds `one` to `name`'s entry of `list` (appending it when new).
void addKernelStats(KernelStatsList &list, const std::string &name,
                    const RunStats &one);
/// The counters of `stats` as "name value" pairs on one line (the order
/// of RunStats' counter fields), for `moec run --counters`.
std::string formatCounters(const RunStats &stats);

struct RunResult {
  RunStats stats;
  std::vector<Finding> findings;
  /// Count per FindingKind, including those not kept in `findings`.
  std::array<uint64_t, 3> findingCounts{{0, 0, 0}};
  /// The stats of each launch, in launch order (`stats` is their sum).
  std::vector<RunStats> launchStats;
  uint64_t totalFindings() const {
    return findingCounts[0] + findingCounts[1] + findingCounts[2];
  }
};

/// Checks that the emulator supports every op (and every value type) of
/// `func`; on failure `error` names the first unsupported op and its location.
mlir::LogicalResult checkSupported(mlir::gpu::GPUFuncOp func,
                                   std::string &error);

/// One kernel launch of a multi-launch run: the kernel, its arguments and
/// geometry, and a label that prefixes its findings and errors.
struct KernelLaunch {
  mlir::gpu::GPUFuncOp func;
  std::vector<KernelArgValue> args;
  LaunchConfig launch;
  /// E.g. "rank 1"; empty for a single launch.
  std::string label;
};

/// Runs all `launches` at once in one cooperative scheduler over `memory`:
/// rounds go over the launches in order, each keeping up to its own
/// `launch.maxResidentWorkgroups` workgroups of its own grid resident, and
/// every resident wave runs until a barrier, a yield (an scf.while
/// iteration boundary or rocdl.s.sleep) or its end. A buffer id passed to
/// several launches is memory all of them address (a peer pointer). Hard
/// errors (an unsupported op, a division by zero, a runaway loop, a
/// deadlock, a bad argument binding) fail with a one-line `error` that
/// names the launch's label; detector reports come back as findings (with
/// the label), and the offending access is made harmless (a load returns
/// zero, a store is dropped) so the run continues. Stats and finding counts
/// are summed over the launches.
mlir::FailureOr<RunResult> runKernels(llvm::ArrayRef<KernelLaunch> launches,
                                      GlobalMemory &memory,
                                      std::string &error);

/// Runs `func` over the grid: runKernels() with one unlabelled launch.
mlir::FailureOr<RunResult> runKernel(mlir::gpu::GPUFuncOp func,
                                     GlobalMemory &memory,
                                     llvm::ArrayRef<KernelArgValue> args,
                                     const LaunchConfig &launch,
                                     std::string &error);

/// Workgroups of one kernel that `chip` (a chip or part of moec/target)
/// keeps resident at once: the occupancy model gives the workgroups per CU
/// for the kernel's registers, LDS and `workgroupSize` threads, times the
/// part's CUs (MI350P: 128; a test may pass a copy with fewer). Use it as
/// LaunchConfig::maxResidentWorkgroups to emulate the residency hazard of a
/// kernel that waits on other workgroups. Fails, naming the reason, when
/// the kernel cannot launch at all.
mlir::FailureOr<unsigned>
residentWorkgroupCap(const moec::rt::KernelResources &resources,
                     unsigned workgroupSize,
                     const moec::target::TargetInfo &chip, std::string &error);
/// The same for a manifest kernel (its resources and launch workgroup size).
mlir::FailureOr<unsigned>
residentWorkgroupCap(const moec::rt::KernelInfo &kernel,
                     const moec::target::TargetInfo &chip, std::string &error);

} // namespace moec::emu

#endif // MOEC_EMULATOR_EMULATOR_H
