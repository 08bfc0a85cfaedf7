//===- TableCompiler.h - tuning table -> compiled kernels -> bundle -*- C++ -*-===//
///
/// \file
/// Compiles every unique kernel of a tuning table, gates its resources, and
/// builds the bundle manifest.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_COMPILER_TABLECOMPILER_H
#define MOEC_COMPILER_TABLECOMPILER_H

#include "moec/Codegen/KernelAbi.h"
#include "moec/Compiler/TuningTable.h"
#include "moec/abi/stage.h"
#include "moec/manifest.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class Operation;
} // namespace mlir

namespace moec {

struct CompileTarget;

/// One unique kernel of a table, compiled.
struct CompiledKernel {
  /// The table kernels that resolved to this binary (deduplicated).
  std::vector<std::string> tableNames;
  /// ELF symbol: a readable name that encodes the problem and every knob.
  std::string symbol;
  /// symbol plus the first 8 hex digits of the content hash, so a name never
  /// refers to two different binaries.
  std::string name;
  abi::Stage stage = abi::Stage::Quant;
  /// The stage op's attributes as the dialect prints them
  /// (StageDescription::attributes).
  std::vector<std::pair<std::string, std::string>> attributes;
  KernelAbi abi;
  rt::KernelResources resources;
  std::vector<uint8_t> hsaco;
  /// The kernel's gpu.module after moe-lower-to-kernel (the IR the code
  /// object was compiled from), as MLIR bytecode with locations stripped.
  std::vector<uint8_t> kernelIr;
  /// XXH64 of the HSACO, 16 hex digits.
  std::string contentHash;
  SourceLine where;
  /// The hazards the ISA gate repaired (CompileOptions::verifyIsa).
  std::vector<rt::IsaRepairInfo> isaRepairs;
};

/// Where one kernel's compile time went: wall seconds on the thread that
/// compiled it (with several jobs the kernels share the cores, so a
/// kernel's time includes waiting for them).
struct KernelCompileTime {
  std::string symbol;
  abi::Stage stage = abi::Stage::Quant;
  bool fromCache = false;
  /// Serialising its kernel IR (which the cache key hashes).
  double irSeconds = 0;
  /// The cache key, lookup and, after code generation, store.
  double cacheSeconds = 0;
  /// LLVM AMDGPU code generation and the lld link; 0 from the cache.
  double codegenSeconds = 0;
  /// Reading the code object's resources back and the resource gate.
  double resourceSeconds = 0;
  double totalSeconds = 0;
};

struct CompiledTable {
  /// The chip or part the kernels were compiled for (CompileOptions::target
  /// or the module's default); the manifest records it.
  const CompileTarget *target = nullptr;
  std::vector<CompiledKernel> kernels;
  /// Table kernel name -> index into kernels.
  std::map<std::string, size_t> kernelIndex;
  /// Kernels whose code object came from the compile cache, and cache
  /// entries found corrupted (and rebuilt).
  size_t kernelsFromCache = 0;
  uint64_t corruptCacheEntries = 0;
  /// Per selection of the table, in order: the smallest max_tokens of the
  /// fused kernels its rows reach (the table's capacity), 0 with none.
  std::vector<uint32_t> selectionMaxTokens;
  /// Per kernel, why it failed (empty: compiled and passed the gate); the
  /// resources of a kernel that compiled are filled in even when the gate
  /// refused it, so `moec tune` can record every candidate's.
  std::vector<std::string> kernelErrors;
  /// Per kernel, in kernel order: where its compile time went.
  std::vector<KernelCompileTime> kernelTimes;
  /// Building and verifying the stage ops and lowering them to kernel IR,
  /// done once for the whole table before the kernels compile.
  double frontEndSeconds = 0;
  /// Threads that compiled kernels.
  unsigned jobs = 0;
};

/// The launch counts a fused stage's handshakes are built from: its waves,
/// persistent grid, dispatch CUs, planning CUs and work shards
/// (docs/families.md, "Launch protocol"). The control words add these up
/// over every forward of a layer, so every fused kernel of one stage that a
/// selection reaches must have the same `counts` (checkSelections; moec
/// tune chooses within one such group).
struct FusedHandshake {
  std::string stage;  ///< "moe.w13 dispatch=fused"; empty: not fused
  std::string counts; ///< "waves=4 workgroups=256 dispatch_cus=32 ..."
};
FusedHandshake fusedHandshakeOf(mlir::Operation *op);

/// The checks across a table's kernels, on their built ops (table kernel
/// name -> op): a fused stage moves rows the way its selection key says and
/// holds the key's workspace; a split stage 1 pairs a dispatch=only kernel
/// with a dispatch=none W13 kernel that waits for exactly its signals. On
/// failure `error` names the table line. checkSelections also gives each
/// selection's capacity (CompiledTable::selectionMaxTokens).
bool checkSelections(const TuningTable &table,
                     const std::map<std::string, mlir::Operation *> &ops,
                     std::vector<uint32_t> &selectionMaxTokens,
                     std::string &error);
bool checkSplitDispatch(const TuningTable &table,
                        const std::map<std::string, mlir::Operation *> &ops,
                        std::string &error);
/// A config's fused stage 2 and its peer-rows combine agree on the combine
/// rows' format: payload=fp8 exactly with fp8_peer_rows.
bool checkPeerPayload(const TuningTable &table,
                      const std::map<std::string, mlir::Operation *> &ops,
                      std::string &error);

/// XXH64 of `size` bytes as 16 hex digits: content hashes and fingerprints.
std::string hashHex(const void *data, size_t size);

/// Exit-status classes of a compile (docs/cli.md).
enum class CompileStatus { Ok = 0, CheckFailed = 1, BadInput = 2 };

struct CompileOptions {
  /// The chip or part to compile for (`moec compile --target`): it becomes
  /// the module's `moe.target`, so the verifiers check its limits and the
  /// codegen uses its facts, and the manifest records it. nullptr: the chip
  /// a module without `moe.target` is compiled for (MoeTarget.h).
  const CompileTarget *target = nullptr;
  /// Accept kernels that spill registers (the resource gate otherwise fails).
  bool allowSpills = false;
  /// The ISA gate: every code object through the ISA verifier (waits,
  /// hazards, resources, kernel ABI; docs/isa-verification.md); a kernel
  /// with a finding fails the compile. `moec compile --no-isa-gate` turns
  /// it off.
  bool verifyIsa = true;
  /// Applied by compileTableToBundle to the table as read, before anything
  /// is compiled (`moec compile --small` shrinks every problem with it).
  std::function<void(TuningTable &)> rewriteTable;
  /// Threads compiling kernels; 0: every core. The bundle does not depend
  /// on it.
  unsigned jobs = 0;
  /// The compile cache (CompileCache.h); empty: none.
  std::string cacheDirectory;
  uint64_t cacheMaxBytes = uint64_t(2) << 30;
  /// Called after each kernel (done, total, symbol), one call at a time.
  std::function<void(size_t, size_t, const std::string &)> progress;
};

/// Builds, verifies, lowers and compiles every kernel of `table`, then gates
/// its resources: no spills (unless allowed), no scratch, LDS within the
/// chip. On failure `error` is one line naming the file, line and field or
/// kernel.
CompileStatus compileTable(const TuningTable &table,
                           const CompileOptions &options,
                           CompiledTable &compiled, std::string &error);

/// What a bundle holds: the manifest (the runtime's model) and its objects,
/// the code objects in kernel order followed by the kernels' IR.
struct BundleContents {
  rt::Manifest manifest;
  std::vector<std::vector<uint8_t>> objects;
};

/// The bundle of a compiled table; the table's text is hashed into the
/// provenance of the sources.
BundleContents buildBundleContents(const TuningTable &table,
                                   const CompiledTable &compiled);

/// The tuning table a bundle was compiled from, rebuilt from its manifest:
/// one problem per distinct #moe.problem, each kernel with the knobs of its
/// attributes, the configurations and selection tables as recorded. Its
/// `text` is the manifest (hashed into the provenance of a bundle built
/// from it).
TuningTable tableOfManifest(const rt::Manifest &manifest,
                            const std::string &path);

/// Whether the directory of `bundlePath` can take the bundle; otherwise
/// `error` names it and why (checked before anything is compiled).
bool checkBundleWritable(const std::string &bundlePath, std::string &error);

/// What compileTableToBundle did.
struct CompileSummary {
  size_t tableKernels = 0;
  size_t uniqueKernels = 0;
  size_t kernelsFromCache = 0;
  uint64_t corruptCacheEntries = 0;
  uint64_t bundleBytes = 0;
  /// CompiledTable::kernelTimes, frontEndSeconds and jobs of the compile.
  std::vector<KernelCompileTime> kernelTimes;
  double frontEndSeconds = 0;
  unsigned jobs = 0;
  /// Kernels that spill or use scratch, with their resources: empty unless
  /// CompileOptions::allowSpills let them through.
  std::vector<std::pair<std::string, rt::KernelResources>> spillingKernels;
};

/// Reads the tuning table at `tablePath`, compiles it and writes the bundle
/// atomically to `bundlePath` (nothing is written on failure): the whole of
/// `moec compile`. `error` is one line naming the file, line and field or
/// kernel.
CompileStatus compileTableToBundle(const std::string &tablePath,
                                   const std::string &bundlePath,
                                   const CompileOptions &options,
                                   CompileSummary &summary, std::string &error);

} // namespace moec

#endif // MOEC_COMPILER_TABLECOMPILER_H
