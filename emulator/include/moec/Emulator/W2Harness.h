//===- W2Harness.h - the W2 stage on the emulator vs the oracle -*- C++ -*-===//
///
/// \file
/// Rebuilds a stage kernel's IR from its flat fields (as tuning tables and
/// bundle manifests hold them), generates seeded device-layout inputs with
/// the reference generator, runs the W2 kernel on the emulator with poisoned
/// outputs, and compares the result with the reference W2 stage
/// (quantisation-faithful: the same FP8 and MXFP4 inputs). Shared by the
/// unit tests and `moec run`.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_EMULATOR_W2HARNESS_H
#define MOEC_EMULATOR_W2HARNESS_H

#include "moec/Compiler/StageBuilder.h"
#include "moec/Emulator/Emulator.h"
#include "moec/reference/Routing.h"
#include "moec/reference/Status.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace moec::emu {

/// Loads every dialect the kernel IR uses into `context`.
void prepareContext(mlir::MLIRContext &context);

/// A stage kernel rebuilt from its fields.
struct BuiltKernel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// The one gpu.func of the module (owned by `module`).
  mlir::Operation *func = nullptr;
  StageDescription description;
};

/// buildStageOp + lowerToKernelIR in a fresh module of `context`.
mlir::LogicalResult buildKernelIR(mlir::MLIRContext &context,
                                  const StageSpec &spec, BuiltKernel &kernel,
                                  std::string &error);

/// The same stage and knobs at a small problem, for fast emulation: hidden
/// and intermediate become 2 * max(n, k) (divisible by both tile sizes), 4
/// local experts per rank at the same EP, top_k capped at 4, and
/// shrinkPeerFields. Fields that are
/// missing or not integers are left for buildStageOp to report.
StageSpec smallStageSpec(const StageSpec &spec);

/// Registers MXFP4 weights [experts, ...] and their scales in `memory` as
/// buffers "b" and "b_scale". With `present` (one flag per expert) only the
/// flagged experts are copied in and marked written; the others stay
/// poisoned, so a kernel reading them is a finding. Returns the two ids.
std::pair<unsigned, unsigned>
addExpertWeights(GlobalMemory &memory, const std::vector<uint8_t> &packed,
                 const std::vector<uint8_t> &scales,
                 const std::vector<uint8_t> &present);

/// smallStageSpec for the kernels of one config, which must still chain:
/// one hidden and intermediate size for all, 2 * the largest max(n, k).
void smallConfigSpecs(std::vector<StageSpec> &specs);

/// The peer-transport part of smallStageSpec: for a fused stage
/// (`transport` set), 16 tokens per rank, a capacity holding all of them in
/// whole M tiles, at most 6 workgroups and 2 producers (a dispatch-only
/// kernel: 2 workgroups, all producers). Others unchanged.
void shrinkPeerFields(StageSpec &spec);

/// The problem and the knobs of a W2 kernel that the harness needs.
struct W2Shape {
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  int64_t localExperts = 0;
  int64_t tileM = 0, tileN = 0;
  /// K of one MFMA instruction (64 or 128).
  int64_t mfmaK = 0;
  /// Split-K slices: > 1 writes FP32 partials [routes, split_k, H] (grid z).
  int64_t splitK = 1;
  /// tile.persist_cu: > 0 launches that many workgroup rows (grid y), each
  /// looping over M tiles, instead of one row per M tile.
  int64_t persistCu = 0;
  /// FHMoE: the last local expert is a shared expert with FP8 E4M3 weights
  /// (arguments b_shared, b_shared_scale); b holds the other experts.
  bool sharedFp8 = false;
};

/// Whether the W2/W13 harnesses can drive this kernel: an error names what
/// they do not provide yet (e.g. the FHMoE shared FP8 expert's arguments).
ref::Status checkHarnessSupports(const StageDescription &description);

/// Reads a W2Shape from a StageDescription's fields.
ref::Status parseW2Shape(const StageDescription &description, W2Shape &shape);

/// How to generate one W2 batch.
struct W2DataOptions {
  uint64_t seed = 1;
  /// Source tokens of this rank; routes = tokens * top_k.
  int64_t tokens = 16;
  /// Fraction of routing slots made invalid (-1 or an id >= E).
  double invalidFraction = 0.1;
  /// Route every token to this rank's experts (hot-rank routing); otherwise
  /// routes to other ranks' experts are invalid here.
  bool hotRank = false;
  /// Local experts whose W2 weights are all zero.
  std::vector<int64_t> zeroExperts;
  /// Tiles appended after the builder's list with expert -1 and an id past
  /// the local experts (alternately), holding only padding entries: a
  /// fixed-capacity dispatcher leaves such tiles.
  int64_t emptyTiles = 0;
};

/// One W2 batch in the device layout the kernel reads.
struct W2Data {
  int64_t tokens = 0, numRoutes = 0;
  std::vector<int32_t> topkIds;
  /// [numRoutes, I] FP8 E4M3FN + [numRoutes, I/32] E8M0.
  std::vector<uint8_t> aCodes, aScales;
  /// Optional written flags per byte of aCodes / aScales (empty: all
  /// written), for A produced by an emulated W13.
  std::vector<uint8_t> aWritten, aScalesWritten;
  /// [localExperts, H, I/2] packed E2M1 + [localExperts, H, I/32] E8M0
  /// (localExperts - 1 experts with a shared FP8 expert).
  std::vector<uint8_t> bPacked, bScales;
  /// The shared expert: [H, I] FP8 E4M3 + [H, I/32] E8M0 (sharedFp8 only).
  std::vector<uint8_t> sharedCodes, sharedScales;
  /// Optional, one flag per MXFP4 expert of bPacked: experts without a flag
  /// were never generated and stay poisoned in the emulator, so a kernel
  /// that reads an expert no tile selects is a finding.
  std::vector<uint8_t> bExpertsPresent;
  ref::SortedRoutes sorted;
};

ref::Status generateW2Data(const W2Shape &shape, const W2DataOptions &options,
                           W2Data &data);

/// The emulator's output and its comparison with the oracle.
struct W2Outcome {
  RunResult run;
  bool launched = false;
  /// [numRoutes, H] BF16 bits as the kernel left them, and the written
  /// shadow per element (both bytes written).
  std::vector<uint16_t> outBits;
  std::vector<uint8_t> outWritten;
  /// Split-K: the FP32 partials [numRoutes, splitK, H] and their written
  /// flags (outBits is then empty and outWritten covers all partials).
  std::vector<float> partials;
  std::vector<uint8_t> partialsWritten;
  /// The oracle: [numRoutes, H] FP32 (rows of unlisted routes NaN).
  std::vector<float> oracle;

  // Comparison over the rows of listed routes.
  double relL2 = 0.0;
  /// max over elements of |emu - oracle| / tolerance (<= 1 passes).
  double worstErrorOverTolerance = 0.0;
  int64_t elementsChecked = 0;
  int64_t elementsOverTolerance = 0;
  /// Elements equal to the oracle rounded once to BF16.
  int64_t elementsEqualRounded = 0;
  int64_t nonFinite = 0;
  /// Listed routes with an unwritten output byte; unlisted routes with a
  /// written one (the kernel must leave them untouched).
  int64_t listedRowsUnwritten = 0;
  int64_t unlistedRowsWritten = 0;
  /// Routes of zero-weight experts whose outputs are not exactly zero.
  int64_t zeroExpertNonZero = 0;
  bool pass = false;
  /// One line: "rel L2 ..., worst err/tol ..., ...".
  std::string summary;
};

/// Relative L2 bound of the W2 comparison: one BF16 rounding (unit
/// roundoff 2^-8) of an FP32 sum that carries far smaller error.
constexpr double kW2RelL2Bound = 1.0 / 256.0;
/// With split-K the output is FP32 partials, never rounded to BF16: only
/// FP32 accumulation error remains, far below 2^-12.
constexpr double kW2SplitRelL2Bound = 1.0 / 4096.0;

/// Runs the W2 kernel `func` (a gpu.func built for `shape`) on `data` with
/// poisoned outputs, then compares with the oracle (compareW2).
mlir::LogicalResult runW2(mlir::Operation *func, const W2Shape &shape,
                          const W2Data &data, const LaunchConfig &launch,
                          W2Outcome &outcome, std::string &error);

/// Fills the comparison fields of `outcome` (tolerances: docs/emulator.md):
/// per element |emu - ref| <= ulp_bf16(max(|ref|, |emu|)) + (I / mfmaK + 1)
/// * 2^-24 * sum_k |a_k b_k|, relL2 <= kW2RelL2Bound, every listed row fully
/// written, unlisted rows untouched, zero-weight experts exactly zero, no
/// detector finding.
void compareW2(const W2Shape &shape, const W2Data &data,
               const W2DataOptions &options, W2Outcome &outcome);

/// Writes the inputs, weights and output of one W2 run as .npy files named
/// PREFIX{a_codes,a_scales,b_packed,b_scales,topk_ids,sorted_route_ids,
/// tile_experts,out_bf16,oracle_f32}.npy in `dir` (docs/emulator.md).
ref::Status saveW2Arrays(const std::string &dir, const std::string &prefix,
                         const W2Shape &shape, const W2Data &data,
                         const W2Outcome &outcome);

} // namespace moec::emu

#endif // MOEC_EMULATOR_W2HARNESS_H
