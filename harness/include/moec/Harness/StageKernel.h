//===- StageKernel.h - stage kernels rebuilt from their specs ---*- C++ -*-===//
///
/// \file
/// Rebuilds a stage kernel's IR from its StageSpec (as tuning tables and
/// bundle manifests describe kernels), shrinks specs to small problems with
/// the same knobs, reads spec fields in either spelling of their values, and
/// gives the problem and knobs a stage harness needs (StageShape), read from
/// the built op's own attributes.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_STAGEKERNEL_H
#define MOEC_HARNESS_STAGEKERNEL_H

#include "moec/Compiler/StageBuilder.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace moec::emu {

//===----------------------------------------------------------------------===//
// Spec fields
//===----------------------------------------------------------------------===//

// Values may be spelled as the tuning tables once did (`16x16x128`, `1`,
// `0`) or as the moe dialect does (`m16n16k128`, `true`, `false`); these
// read both.

/// Whether `spec` has field `name`.
bool specHas(const StageSpec &spec, llvm::StringRef name);
/// The text of field `name`, or `fallback` when it is absent.
std::string specText(const StageSpec &spec, llvm::StringRef name,
                     llvm::StringRef fallback = "");
/// An integer field (`10`, `10 : i64`); absent or not an integer: `fallback`.
int64_t specInteger(const StageSpec &spec, llvm::StringRef name,
                    int64_t fallback);
/// A number field (`10`, `1.000000e+01`); absent or not a number: `fallback`.
double specNumber(const StageSpec &spec, llvm::StringRef name, double fallback);
/// A flag: `true` / `1` or `false` / `0`; absent or neither: `fallback`.
bool specFlag(const StageSpec &spec, llvm::StringRef name,
              bool fallback = false);
/// Whether the stage carries a peer transport: a fused MegaMoE stage (a
/// receive `capacity`, or `transport` set to anything but `none`).
bool specIsFused(const StageSpec &spec);

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

/// Loads every dialect the kernel IR uses into `context`.
void prepareContext(mlir::MLIRContext &context);

/// A stage kernel: rebuilt from its spec, or as a bundle stores it
/// (BundleKernels.h).
struct BuiltKernel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// The one gpu.func of the module (owned by `module`).
  mlir::Operation *func = nullptr;
  abi::Stage stage = abi::Stage::Quant;
  StageDescription description;
};

/// buildStageOp + lowerToKernelIR in a fresh module of `context`.
mlir::LogicalResult buildKernelIR(mlir::MLIRContext &context,
                                  const StageSpec &spec, BuiltKernel &kernel,
                                  std::string &error);

//===----------------------------------------------------------------------===//
// Small problems
//===----------------------------------------------------------------------===//

/// The kernels of one config at a small problem with the same knobs, for
/// fast emulation; the stages still chain: hidden and intermediate become
/// 2 * the largest max(n, k) over the kernels (divisible by every tile; at
/// least k x k_waves of a W13 with tile.k_waves), 4 local experts per rank at the same EP, top_k capped at 4, and
/// shrinkPeerFields. A W2 K tail (I mod tile.k at the real I) is kept: I
/// becomes that size + the tail when every kernel's verifier accepts it
/// (else the tail is dropped). Fields that are missing or not integers are
/// left for buildStageOp to report.
void smallConfigSpecs(std::vector<StageSpec> &specs);

/// smallConfigSpecs over a whole table: per problem, every kernel of the
/// problem shrinks to one small shape (so every configuration of a
/// selection table still shares its problem), and the peer fields shrink as
/// shrinkPeerFields says. Selection tables and configurations are kept.
/// `moec compile --small` builds the bundle the emulated device and `moec
/// selftest --small` run.
void smallTable(TuningTable &table);

/// How a table is compiled at the small shape (`moec compile --small`, the
/// selftest's rebuild): rewritten by smallTable, and spills pass. A bundle
/// at the small shape runs on the emulated device, which executes kernel
/// IR, never the code object; and a tile that uses all 512 registers at
/// its real shape can spill under a shorter K loop (one shipped W13 tile:
/// 56, 18, 8 or 0 VGPRs at H = 512, 1024, 2048 or 3072), which says nothing
/// of the shipped kernel. The resource gate holds for the real shape.
CompileOptions smallShapeCompileOptions();

/// smallConfigSpecs for one kernel.
StageSpec smallStageSpec(const StageSpec &spec);

/// The peer-transport part of smallConfigSpecs: for a fused stage, 16
/// tokens per rank, a capacity holding all of them in whole M tiles, at most
/// 6 workgroups and 2 producers (a dispatch-only kernel: 2 workgroups, all
/// producers). Others unchanged.
void shrinkPeerFields(StageSpec &spec);

/// For a fused stage at its real problem: max_tokens `tokens` per rank and
/// the capacity that never overflows for them (fixed slot: every rank's
/// tokens in whole 128-row tiles; compact: every route of every rank). The
/// table's capacity (local experts x capacity x H bytes per rank) need not
/// fit in host memory, and only this constant differs.
void fitPeerCapacity(StageSpec &spec, int64_t tokens);

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

/// The problem and the knobs of one stage kernel that a harness needs.
struct StageShape {
  abi::Stage stage = abi::Stage::Quant;
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  int64_t localExperts = 0;
  /// Tile: M rows (the sorted list's tile), N columns, K of one MFMA
  /// instruction (64 or 128), waves per workgroup.
  int64_t tileM = 0, tileN = 0, mfmaK = 128, waves = 4;
  /// W2 with sort_block_m: the kernel's M tiles per block of the sorted
  /// list (tileM is then the block, sort_block_m; the grid has this many
  /// M tiles per block).
  int64_t tilesPerSortBlock = 1;
  /// W2: split-K slices; > 1 writes FP32 partials [routes, split_k, H].
  int64_t splitK = 1;
  /// tile.persist_cu: > 0 launches that many workgroup rows, each looping
  /// over M tiles, instead of one row per M tile.
  int64_t persistCu = 0;
  /// W13: gate/up row interleave (0: gate rows then up rows) and the
  /// SwiGLU clamp (0: plain SiLU).
  int64_t interleave = 0;
  double swigluLimit = 0.0;
  /// W13: GPT-OSS's SwiGLU (gpt_oss_swiglu) instead of SiLU.
  bool gptOssSwiglu = false;
  /// W13: SiTUv2 (situ_v2) with its betas (the ODS defaults when absent).
  bool situV2 = false;
  double situBeta = 4.0, situLinearBeta = 25.0;
  /// FHMoE: the last local expert is a shared expert with FP8 E4M3 weights
  /// (arguments b_shared, b_shared_scale); b holds the other experts.
  bool sharedFp8 = false;
  /// FHMoE routes (sort and combine with `shared_last_route`, W13 and W2
  /// with `shared_fp8_expert`): the last of a token's top_k slots is the
  /// shared expert's, the others valid only below its id.
  bool sharedLastRoute = false;
  /// W13 / W2 with `bias`: a per-expert FP32 bias (argument `bias`, [local
  /// experts, 2I] in logical gate/up order, or [local experts, H]).
  bool bias = false;
  /// Fused MegaMoE stages (`#moe.peer`): the transport, the per-rank token
  /// limit, receive capacity and persistent workgroups; a dispatch-only
  /// stage 1; a combine that reads the peer rows.
  bool fused = false, compact = false, dispatchOnly = false, peerRows = false;
  /// The combine rows are FP8 1x32 blocks: a fused stage's `#moe.peer`
  /// payload = fp8 (stage 2 sends them), a combine's fp8_peer_rows.
  bool fp8PeerRows = false;
  int64_t capacity = 0, maxTokens = 0, workgroups = 0;
  /// Formats of the quantised token rows (quant's output, W13's A) and of
  /// the intermediate (W13's output, W2's A): FP8 (A8W4) or MXFP4 (A4W4),
  /// from the problem's activation and output types. A stage sets the ones
  /// it reads or writes; the others keep FP8.
  ref::ActivationFormat tokenFormat = ref::ActivationFormat::Fp8E4M3;
  ref::ActivationFormat midFormat = ref::ActivationFormat::Fp8E4M3;

  /// Local experts with MXFP4 weights (the shared expert is FP8).
  int64_t mxfp4Experts() const { return localExperts - (sharedFp8 ? 1 : 0); }
  /// MXFP4 experts of the whole layer (a shared expert is one of `experts`).
  int64_t routedExperts() const { return experts - (sharedFp8 ? 1 : 0); }
};

/// Reads a StageShape from the attributes of the op `kernel` was built from
/// (StageDescription::opAttributes, defaults filled in by the dialect).
ref::Status parseStageShape(const BuiltKernel &kernel, StageShape &shape);

} // namespace moec::emu

#endif // MOEC_HARNESS_STAGEKERNEL_H
