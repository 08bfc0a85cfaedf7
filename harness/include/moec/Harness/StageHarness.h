//===- StageHarness.h - one stage on the emulator vs the oracle -*- C++ -*-===//
///
/// \file
/// The interface every stage of an unfused layer shares (sort, W13, W2,
/// combine): a StageHarness has the kernel's shape, generates seeded random
/// inputs for what the stage reads and nothing has produced yet, runs the
/// kernel on the emulator with poisoned outputs, and compares its outputs
/// with the reference oracle (moec::ref) on the same inputs
/// (quantisation-faithful) with a stated tolerance.
///
/// Stages talk through LayerData: the tokens every rank serves, and per EP
/// rank the route list, expert weights, the FP8 intermediate and the route
/// rows, emulated and as the all-oracle layer computes them. A stage reads
/// what an earlier stage left there and generates the rest, so a harness
/// runs alone (unit tests) or in a layer (LayerRunner.h).
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_STAGEHARNESS_H
#define MOEC_HARNESS_STAGEHARNESS_H

#include "moec/Emulator/Emulator.h"
#include "moec/Harness/StageKernel.h"
#include "moec/reference/Families.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"
#include "moec/reference/Routing.h"
#include "moec/reference/Stages.h"
#include "moec/reference/Status.h"
#include "moec/reference/Tolerance.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace moec::emu {

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

/// Quantised activation rows [rows, depth] with one E8M0 scale per 1x32
/// block: FP8 E4M3FN codes (depth bytes a row) or, with format Mxfp4, E2M1
/// pairs (depth / 2 bytes a row); per-byte written flags when a kernel
/// produced them (empty: all written).
struct Fp8Rows {
  std::vector<uint8_t> codes, scales;
  std::vector<uint8_t> codesWritten, scalesWritten;
  ref::ActivationFormat format = ref::ActivationFormat::Fp8E4M3;
  /// The oracle's view of these rows ([rows, depth]).
  ref::ActivationRows view(int64_t rows, int64_t depth) const {
    return ref::ActivationRows::quantized(format, codes.data(), scales.data(),
                                          rows, depth);
  }
};

/// One stage's expert weights on one rank, in the device layout: MXFP4
/// [experts, rows, depth / 2] + E8M0 [experts, rows, depth / 32] (one
/// expert fewer with a shared FP8 expert, which is [rows, depth] FP8 +
/// [rows, depth / 32] E8M0).
struct ExpertWeights {
  std::vector<uint8_t> packed, scales;
  /// One flag per MXFP4 expert (empty: all): experts without a flag were
  /// never generated and stay poisoned in the emulator, so a kernel that
  /// reads an expert no tile selects is a finding.
  std::vector<uint8_t> present;
  std::vector<uint8_t> sharedCodes, sharedScales;
  /// A `bias` stage's FP32 bias [local experts, rows] (the shared expert's
  /// row last; W13 in logical gate/up order); empty without one.
  std::vector<float> bias;
};

/// Route rows as W2 writes them and the combine reads them: BF16 [routes,
/// H], or with split-K the FP32 partials [routes, split_k, H]; `written`
/// flags each stored element (rows nobody produced stay poisoned).
struct RouteRows {
  int64_t splitK = 1;
  std::vector<uint16_t> bf16;
  std::vector<float> partials;
  std::vector<uint8_t> written;
};

/// What the stages of one EP rank (experts [rank * L, (rank + 1) * L))
/// read and write. `has*` says whether an earlier stage (or the caller)
/// provided the item; a stage generates what it reads and is missing.
struct RankData {
  int64_t rank = 0;
  /// The route list over the local experts (the sort's output).
  bool hasSorted = false;
  ref::SortedRoutes sorted;
  /// The W13 and W2 weights of the local experts.
  ExpertWeights w13, w2;
  /// W13's output and W2's input, [routes, I]; and the all-oracle layer's.
  bool hasIntermediate = false;
  Fp8Rows intermediate, chainIntermediate;
  /// W2's output (the kernel's, as it left every row), and the all-oracle
  /// layer's [routes, H] rounded as the kernel's output type.
  bool hasRows = false;
  RouteRows rows;
  std::vector<double> chainRows;

  /// Drops the weights (the largest inputs) once the rank's stages ran.
  void releaseWeights();
};

/// The data of one layer: the tokens every rank serves, the ranks', and the
/// layer's output.
struct LayerData {
  /// Tokens [tokens, H] BF16, their routing (global expert ids) and
  /// weights; the tokens quantised per 1x32 with the activation recipe.
  bool hasBatch = false;
  ref::TokenBatch batch;
  int64_t topK = 0;
  /// FHMoE routing (StageShape::sharedLastRoute): the batch is generated
  /// over the routed experts and slots, and every token's last slot names
  /// the shared expert with weight 1, as the runtime's layer does.
  bool sharedLastRoute = false;
  Fp8Rows tokens;
  /// Indexed by rank.
  std::vector<RankData> ranks;
  /// The combine's input: every rank's listed rows, and the all-oracle
  /// layer's (double; BF16-rounded where the kernel rounds).
  bool hasRows = false;
  RouteRows rows;
  std::vector<double> chainRows;
  /// The combine's output [tokens, H] BF16 with written flags, and the
  /// all-oracle layer's output.
  bool hasOutput = false;
  std::vector<uint16_t> outBits;
  std::vector<uint8_t> outWritten;
  std::vector<double> chainOut;

  int64_t numRoutes() const { return batch.tokens * topK; }
  /// The data of `rank`, added (with the ranks before it) when missing.
  RankData &rank(int64_t rank);
};

/// Arrays to write as .npy, each with its file name's role.
using NamedArrays = std::vector<std::pair<std::string, ref::NpyArray>>;

/// One rank's layer inputs and final output, as `moec run --save` writes
/// them for every network.
struct RankLayerIo {
  /// Tokens [tokens, H] BF16, routing (global expert ids) and weights.
  ref::TokenBatch batch;
  /// The tokens quantised to FP8 per 1x32, as the first kernel reads them.
  Fp8Rows tokens;
  /// The layer's output [tokens, H]: the kernels' (BF16) and the
  /// all-oracle layer's.
  std::vector<uint16_t> outBits;
  std::vector<double> oracleOut;
};

/// How to generate what a stage reads.
struct DataOptions {
  uint64_t seed = 1;
  /// Source tokens; routes = tokens * top_k.
  int64_t tokens = 16;
  /// Fraction of routing slots made invalid (-1 or an id >= E).
  double invalidFraction = 0.1;
  /// Route every token to the experts of the rank a stage runs on
  /// (hot-rank routing); otherwise routes go to any rank's experts.
  bool hotRank = false;
  /// Local experts whose weights (of the stage that generates them) are all
  /// zero.
  std::vector<int64_t> zeroExperts;
  /// Tiles appended after the route list with expert -1 and an id past the
  /// local experts (alternately), holding only padding entries: a
  /// fixed-capacity dispatcher leaves such tiles.
  int64_t emptyTiles = 0;
};

//===----------------------------------------------------------------------===//
// Outcome
//===----------------------------------------------------------------------===//

/// A buffer as the kernel left it.
struct BufferSnapshot {
  std::vector<uint8_t> bytes;
  /// Per byte: written since the buffer was poisoned.
  std::vector<uint8_t> written;
};

/// A stage run and its comparison with the oracle.
struct StageOutcome {
  RunResult run;
  /// False when the stage had nothing to launch (no tile, no token).
  bool launched = false;
  /// The kernel's output buffers by argument name ("out", "status", ...).
  std::map<std::string, BufferSnapshot> outputs;
  /// The oracle the outputs were compared with: W13 the activation before
  /// quantisation [routes, I], W2 [routes, H] (rows of unlisted routes
  /// NaN), combine [tokens, H]; and W13's quantised intermediate.
  std::vector<double> oracle;
  std::vector<uint8_t> oracleCodes, oracleScales;

  double relL2 = 0.0;
  /// The relative L2 the stage must stay within.
  double relL2Bound = 0.0;
  /// max over elements of |emu - oracle| / tolerance (<= 1 passes).
  double worstErrorOverTolerance = 0.0;
  int64_t elementsChecked = 0, elementsOverTolerance = 0, nonFinite = 0;
  /// Listed routes with an unwritten output byte; unlisted routes with a
  /// written one (the kernel must leave them untouched); the combine:
  /// output elements nothing wrote.
  int64_t listedRowsUnwritten = 0, unlistedRowsWritten = 0;
  int64_t elementsUnwritten = 0;
  /// Routes of zero-weight experts whose outputs are not exactly zero.
  int64_t zeroExpertNonZero = 0;
  /// W2: elements equal to the oracle rounded once to BF16.
  int64_t elementsEqualRounded = 0;
  /// W13: codes and scales equal to the oracle's.
  int64_t codesEqual = 0, scalesChecked = 0, scalesEqual = 0;
  /// Sort: status[0] (entries used) and status[1] (entries needed).
  int32_t used = 0, needed = 0;
  bool pass = false;
  /// One line: "rel L2 ..., worst err/tol ..., ...".
  std::string summary;
};

//===----------------------------------------------------------------------===//
// The harness
//===----------------------------------------------------------------------===//

/// Relative L2 bounds, each derived (docs/emulator.md, "Tolerances"):
/// W2 and the combine round an FP32 sum once to BF16 (unit roundoff 2^-8);
/// split-K partials are FP32, never rounded to BF16 (far below 2^-12); W13
/// quantises to FP8 E4M3 (unit roundoff 2^-4); the final output against the
/// all-oracle layer is the BF16 output's bound (docs/numerics.md, "The final
/// output").
constexpr double kW2RelL2Bound = 1.0 / 256.0;
constexpr double kW2SplitRelL2Bound = 1.0 / 4096.0;
constexpr double kW13RelL2Bound = 1.0 / 16.0;
/// W13 writing an MXFP4 intermediate: per 1x32 block the scale puts amax at
/// [3.5, 7) scale steps; an unsaturated element errs by at most a quarter
/// step (scale / 4: half of E2M1's 0.5 step below 1, and at most that much
/// relative to amax above), so a block errs by at most sqrt(32) / 4 scale
/// against a norm of at least 3.5 scale (0.40), and a saturated element
/// (scaled magnitude in [6, 7), error below one scale) comes with a norm of
/// at least 6 scale (0.29): 1/2 bounds both.
constexpr double kW13Fp4RelL2Bound = 1.0 / 2.0;
constexpr double kCombineRelL2Bound = 1.0 / 256.0;
constexpr double kLayerRelL2Bound = ref::kLayerOutputRelL2Bound;

/// One stage kernel on the emulator against the oracle.
class StageHarness {
public:
  /// The harness for `kernel`'s stage; it refers to `kernel`, which must
  /// outlive it. Fails, naming the reason, for a stage without a harness, a
  /// kernel argument no harness provides (for example a fused stage's peer
  /// buffers: PeerHarness.h runs those), or a kernel without its shape.
  static std::unique_ptr<StageHarness> create(const BuiltKernel &kernel,
                                              std::string &error);
  virtual ~StageHarness();

  const StageShape &shape() const { return shape_; }
  const BuiltKernel &kernel() const { return kernel_; }

  /// Whether the stage runs once per EP rank over the rank's experts (sort,
  /// W13, W2), or once over every rank's rows (combine).
  virtual bool perRank() const { return true; }

  /// The tolerance the comparison applies, one line (docs/emulator.md).
  virtual const char *tolerance() const = 0;

  /// The kernel arguments (by ABI name) this harness binds.
  virtual std::vector<std::string> arguments() const = 0;

  /// Fills, with seeded random values, every input of this stage on `rank`
  /// that `data` does not hold yet: the tokens and their routing, the
  /// oracle's route list, the weights of the experts some tile selects,
  /// rows for W2 or the combine. Activations get a random power-of-two
  /// factor per 1x32 block, so their E8M0 scales differ block to block;
  /// generated tensors are never all zero (zeroExperts aside).
  virtual ref::Status generate(const DataOptions &options, LayerData &data,
                               int64_t rank) const = 0;

  /// Runs the kernel over the inputs in `data` with poisoned outputs and
  /// stores its outputs there (and in outcome.outputs). Fails with `error`
  /// on a hard emulator error only.
  virtual mlir::LogicalResult run(LayerData &data, int64_t rank,
                                  const LaunchConfig &launch,
                                  StageOutcome &outcome,
                                  std::string &error) const = 0;

  /// Compares the outputs of run() with the oracle on the same inputs and
  /// fills the comparison fields of `outcome` (pass: within tolerance, every
  /// listed row written, unlisted rows untouched, zero-weight experts
  /// exactly zero, no detector finding); extends the all-oracle layer in
  /// `data`.
  virtual void compare(LayerData &data, int64_t rank,
                       const DataOptions &options,
                       StageOutcome &outcome) const = 0;

  /// The stage's outputs and the oracle they were compared with as `.npy`
  /// arrays named after their role, for `--save` (PREFIX + name + ".npy";
  /// the layer's inputs, weights and final output are saveLayer's).
  virtual NamedArrays arrays(const LayerData &data, int64_t rank,
                             const StageOutcome &outcome) const = 0;

  /// generate, run and compare.
  mlir::LogicalResult check(LayerData &data, int64_t rank,
                            const DataOptions &options,
                            const LaunchConfig &launch, StageOutcome &outcome,
                            std::string &error) const;

protected:
  StageHarness(const BuiltKernel &kernel, StageShape shape)
      : kernel_(kernel), shape_(std::move(shape)) {}

  const BuiltKernel &kernel_;
  StageShape shape_;
};

//===----------------------------------------------------------------------===//
// Shared helpers
//===----------------------------------------------------------------------===//

/// One unit in the last place of BF16 at magnitude |x| (8 significant
/// bits); the smallest subnormal step below the normal range.
double ulpBf16(double x);
/// One FP8 E4M3 ulp at magnitude |x| for block scale `scale`: 3 mantissa
/// bits, normal exponents down to -6 (below that the subnormal step 2^-9).
double ulpFp8(double x, double scale);
/// One E2M1 step at magnitude |x| for block scale `scale` (0.5 below 2,
/// 1 in [2, 4), 2 from 4), in the scaled domain.
double ulpFp4(double x, double scale);
/// ulpFp8 or ulpFp4, by `format`.
double ulpOf(ref::ActivationFormat format, double x, double scale);
/// sqrt(errorSquares / referenceSquares), or sqrt(errorSquares) when the
/// reference is zero.
double relativeL2(double errorSquares, double referenceSquares);

/// How far a layer's output is from the oracle's: the relative L2 over the
/// finite elements and how many elements are not finite. A NaN or infinite
/// element is never within a bound (a max over distances would drop a NaN,
/// so it is counted instead); `within` is false whenever one was seen.
struct OutputDistance {
  double relL2 = 0.0;
  int64_t nonFinite = 0;
  /// Merges another rank's distance: the larger relative L2, the sum of
  /// the non-finite elements.
  void merge(const OutputDistance &other);
  bool within(double bound) const { return nonFinite == 0 && relL2 <= bound; }
};
/// The distance of `got` from `want` (the same length).
OutputDistance outputDistance(const std::vector<double> &got,
                              const std::vector<float> &want);

/// The layer's weights, generated on demand from the seed: MXFP4 W13
/// [routed experts, 2I, H] and W2 [routed experts, H, I] with random E8M0
/// scales per block, indexed by global expert id, and FHMoE's shared FP8
/// expert. An expert's weights do not depend on which others are generated.
class LayerWeights {
public:
  LayerWeights(uint64_t seed, const StageShape &shape);
  ~LayerWeights();
  const ref::WeightSource &w13() const { return *w13_; }
  const ref::WeightSource &w2() const { return *w2_; }
  /// The shared expert: W13 [2I, H] and W2 [H, I], FP8 codes + E8M0.
  void sharedW13(std::vector<uint8_t> &codes,
                 std::vector<uint8_t> &scales) const;
  void sharedW2(std::vector<uint8_t> &codes,
                std::vector<uint8_t> &scales) const;
  /// Rank `rank`'s W13 or W2 weights in device layout: its MXFP4 experts,
  /// only those flagged in `present` generated (the others zero and absent
  /// for the emulator), and the shared expert.
  void rankW13(int64_t rank, const std::vector<uint8_t> &present,
               ExpertWeights &out) const;
  void rankW2(int64_t rank, const std::vector<uint8_t> &present,
              ExpertWeights &out) const;

private:
  void rankSlice(const ref::WeightSource &source, int64_t rank,
                 const std::vector<uint8_t> &present, ExpertWeights &out) const;

  uint64_t seed_;
  StageShape shape_;
  std::unique_ptr<ref::WeightSource> w13_, w2_;
};

/// Seeded tokens and routing over the layer's experts, each token's BF16
/// values times a random power of two per 1x32 block (so its E8M0 scales
/// vary); `stream` separates ranks and launches.
ref::TokenBatch generateTokens(uint64_t seed, uint64_t stream, int64_t tokens,
                               const StageShape &shape,
                               const ref::RoutingOptions &routing);

/// The tokens quantised per 1x32 with the activation recipe, as the
/// dispatch hands them to W13, in `format` (FP8 or MXFP4).
void quantizeTokens(const ref::TokenBatch &batch, int64_t hidden,
                    Fp8Rows &tokens,
                    ref::ActivationFormat format = ref::ActivationFormat::Fp8E4M3);

/// The oracle's view of a route list: tiles without a valid expert (which
/// must hold only padding) dropped. Fails when such a tile lists a route.
ref::Status oracleRoutes(const ref::SortedRoutes &sorted, int64_t tileM,
                         int64_t localExperts, ref::SortedRoutes &view);

/// `values` as an .npy array of `shape`; the dtype follows the element type
/// (uint8, uint16 for BF16 bits, int32, float, double).
template <typename T>
ref::NpyArray npyOf(std::vector<int64_t> shape, const std::vector<T> &values) {
  ref::NpyDtype dtype = ref::NpyDtype::UInt8;
  if constexpr (std::is_same_v<T, uint16_t>)
    dtype = ref::NpyDtype::UInt16;
  else if constexpr (std::is_same_v<T, int32_t>)
    dtype = ref::NpyDtype::Int32;
  else if constexpr (std::is_same_v<T, float>)
    dtype = ref::NpyDtype::Float32;
  else if constexpr (std::is_same_v<T, double>)
    dtype = ref::NpyDtype::Float64;
  else
    static_assert(std::is_same_v<T, uint8_t>, "no .npy dtype for this type");
  return ref::NpyArray::fromVector(dtype, std::move(shape), values);
}

/// Writes `arrays` as DIR/PREFIX + name + ".npy".
ref::Status saveArrays(const std::string &dir, const std::string &prefix,
                       const NamedArrays &arrays);

} // namespace moec::emu

#endif // MOEC_HARNESS_STAGEHARNESS_H
