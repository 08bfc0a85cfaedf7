//===- KnobDecisions.cpp - what the tuner, cost model and AITER do per knob ===//
///
/// \file
/// Every row was filled from the code it describes: Tuner.cpp (SearchSpace,
/// tiledKernel, kKnobChoices, kClassChoices, searchable, isGemm, shapeOf),
/// CostModel.cpp (countTile, tileGrid, predictStage),
/// harness/lib/EmulatedTileCounter.cpp (oneTileSpec: the knobs the counted
/// tile drops) and AiterCsv.cpp (parseAiterKernelName, rowSupport,
/// buildAiterTable). The cost-model reasons that say "small tune" were
/// checked on `moec tune` runs at H 512, I 256, 8 experts, top-2, EP2
/// (unfused, fused compact, and split-K templates), comparing each
/// refinement's counts, resources and predicted times with its parent's.
/// Change a row when the code it describes changes.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/KnobDecisions.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include <algorithm>
#include <iterator>

namespace moec {
namespace {

using T = TunerDecision;
using C = CostDecision;
using A = AiterDecision;

// Reasons shared by several rows.

// Tuner.
constexpr const char kShapeFixed[] =
    "the layer's shape: the spec's problem line";
constexpr const char kTypeFixed[] =
    "implied by the stage (StageBuilder.cpp stageTypes), not written in tables";
constexpr const char kSelectionFixed[] =
    "the selection's transport and workspace, written in the template's fused "
    "kernels";
constexpr const char kLaunchNotSearched[] =
    "the tuner tiles and refines only W13, W2, the sort's m_tile and the "
    "unfused combine; the model prices this kernel as one launch, so it "
    "could not rank it";
constexpr const char kW2Pinned[] =
    "moe.w2's verifier pins it to the ODS default: the producer knobs apply "
    "to stage 1 (moe.w13) only";
constexpr const char kGridM[] =
    "SearchSpace::tileM (16, 32, 64, 128), with the sort's m_tile";
constexpr const char kGridWaves[] = "SearchSpace::waves (2, 4, 8), W13 and W2 alike";
constexpr const char kGridMfma[] =
    "set with the grid's tile M (tiledKernel): m32n32k64 for tile M 128, else "
    "m16n16k128; not an axis of its own";
constexpr const char kGridBDirect[] =
    "SearchSpace::bDirect (false, true), W13 and W2 alike";
constexpr const char kKNotSearched[] =
    "not in SearchSpace or kKnobChoices: the template's K step is kept (it "
    "must divide the reduction, e.g. flash_tp4's W2 k=128 for I = 640); the "
    "code gives no other reason";
constexpr const char kRefinedBoth[] =
    "kKnobChoices, on W13 and W2 (unfused and fused)";
constexpr const char kPersistSkewNotSearched[] =
    "docs/tuning.md 'Not searched', no reason given; it only acts with "
    "persist_cu > 0, which only W2's unfused refinement sets";
constexpr const char kResidencyNotSearched[] =
    "docs/tuning.md 'Not searched', no reason given; it exists to reproduce "
    "AITER's _w{n} (MoeAttrs.td)";
constexpr const char kWorkgroupsWide[] =
    "kClassChoices: workgroups 256 or 512 on every fused kernel (a fused "
    "selection's kernels must share it)";
constexpr const char kWorkShardsWide[] =
    "kClassChoices: work_shards 2 or 8 on every fused kernel, compact "
    "transport only";
constexpr const char kSharedFp8Fixed[] =
    "the FHMoE model's shared expert with FP8 weights: a property of the "
    "weights";
constexpr const char kSharedLastRouteFixed[] =
    "set from the table's family (fhmoe) by stageSpecOf: the last route of "
    "every token is the shared expert's";
constexpr const char kBiasFixed[] =
    "whether the model has per-expert biases: a property of the weights";

// Cost model.
constexpr const char kLaunchShape[] =
    "the model prices this kernel as one launch (launchOverheadUs) whatever "
    "the shape";
constexpr const char kLaunchKnob[] =
    "one launch (launchOverheadUs) to the model whatever its value";
constexpr const char kTypeCost[] =
    "implied by the stage: the model and the tile counter take its FP8 x "
    "MXFP4 types";
constexpr const char kExperts[] =
    "tileGrid: active experts and rows per expert under balanced routing";
constexpr const char kTopK[] = "tileGrid: routed rows = M x ep x top_k";
constexpr const char kEp[] =
    "tileGrid: routes over the ranks and the experts of one rank";
constexpr const char kTileM[] =
    "tile M: M tiles and padding (tileGrid), the counted tile's bytes and "
    "MFMAs, occupancy";
constexpr const char kTileN[] =
    "tile N: N tiles (tileGrid), the counted tile's bytes and MFMAs, "
    "occupancy";
constexpr const char kTileK[] =
    "through the counted tile (per-K-step instructions, LDS traffic) and the "
    "kernel's LDS (occupancy); not in GemmStageShape, so the analytic "
    "fallback ignores it";
constexpr const char kWaves[] =
    "busy SIMDs per CU (predictStage), the counted tile's LDS reads and "
    "instructions, occupancy";
constexpr const char kMfma[] =
    "MFMA cycles (32 or 64) and MFMA count in predictStage and the counted "
    "tile";
constexpr const char kOrientation[] =
    "the counted tile's bank conflicts and instructions, and registers "
    "(occupancy); seen on a small tune";
constexpr const char kBCache[] =
    "cache bits only: counted tile and resources unchanged (small tune), and "
    "the model has no cache term";
constexpr const char kWavesPerEu[] =
    "only through the compiled kernel's VGPRs: occupancy, and the spill gate; "
    "the counted tile is unchanged";
constexpr const char kXcd[] =
    "its purpose, L2 locality per XCD, is outside the model (no L2/XCD term); "
    "the counted tile only gains the renumbering's few instructions";
constexpr const char kASwizzle[] =
    "the counted tile's LDS bank conflicts (one LDS cycle each): the one "
    "refinement that wins in the shipped tables";
constexpr const char kPersist[] =
    "dropped from the counted tile (oneTileSpec) and the tile grid assumes "
    "one workgroup per tile; only its registers reach the model (occupancy)";
constexpr const char kPrefetch[] =
    "its purpose, overlapping global latency, is outside the model (no "
    "latency term: the stage takes its largest throughput term); only its "
    "registers and instructions move the prediction";
constexpr const char kGroupM[] =
    "its purpose, L2 reuse across tiles, is outside the model; the counted "
    "tile only gains the reordering's instructions";
constexpr const char kAsyncA[] =
    "fewer instructions in the counted tile (no ds_write of A) and fewer "
    "VGPRs (occupancy)";
constexpr const char kResidency[] =
    "pads the compiled kernel's LDS, capping workgroups per CU in the "
    "occupancy estimate (dropped from the counted tile)";
constexpr const char kBDirect[] =
    "GemmStageShape::bDirect and the counted tile: no B through LDS (LDS "
    "bytes, bank conflicts); the kernel's LDS (occupancy)";
constexpr const char kFixedInTile[] =
    "fixed by the model; its work is in the counted tile, the same for every "
    "candidate of the class";
constexpr const char kSharedFp8Cost[] =
    "fixed (FHMoE); dropped from the counted tile, whose shared-expert tiles "
    "count as MXFP4; the kernel's LDS still reaches occupancy";
constexpr const char kPeerFixedCost[] =
    "fixed by the selection; dropped from the counted tile and not in the "
    "tile grid";
constexpr const char kWorkgroupsCost[] =
    "dropped from the counted tile, not in the tile grid: a group predicts as "
    "its original (small tune); the gate rejects grids over the resident "
    "budget";
constexpr const char kProducerCost[] =
    "dropped from the counted tile (oneTileSpec): predicted as its original "
    "(small tune); only registers could differ";
constexpr const char kW2PinnedCost[] =
    "pinned to the ODS default by moe.w2's verifier: nothing to rank";

// AITER.
constexpr const char kEpAiter[] =
    "AITER's tuned CSVs are single-GPU: every problem gets ep=1";
constexpr const char kPeerAiter[] =
    "AITER's tuned CSVs have no expert parallelism: no kernel gets a peer "
    "transport";
constexpr const char kLaunchWaves[] =
    "moec writes waves=4 (the ODS default) for every row: AITER's CSV names "
    "no such kernel";
constexpr const char kWeightType[] =
    "checked: q_dtype_w torch.float4_e2m1fn_x2 (other rows refused); the type "
    "is the stage's";
constexpr const char kTokenType[] =
    "checked: dtype torch.bfloat16 (other rows refused); the type is the "
    "stage's";
constexpr const char kFp8Type[] =
    "checked: q_dtype_a torch.float8_e4m3fn (other rows refused); the type is "
    "the stage's";
constexpr const char kNoPart[] = "no AITER name part or column; the ODS default";
constexpr const char kMfmaAiter[] =
    "FlyDSL names carry no MFMA shape: the ODS default m16n16k128";
constexpr const char kOrientationAiter[] =
    "every FlyDSL name: b_major (FlyDSL's operand order; no name part)";
constexpr const char kXcdAiter[] =
    "_xcd{n}: xcd_swizzle=true (FlyDSL renumbers over the 8 XCDs)";
constexpr const char kGroupMAiter[] =
    "_xcd{n}: group_m = n (2, 4, 8 or 16; others refused)";
constexpr const char kSharedFp8Aiter[] =
    "the FHMoE columns (shared_expert_id = expert - 1, no padding, "
    "GateMode.INTERLEAVE)";
constexpr const char kSharedLastRouteAiter[] =
    "no kernel knob: an FHMoE row's problem gets family=fhmoe, which "
    "stageSpecOf turns into shared_last_route";
constexpr const char kBiasAiter[] =
    "the CSV does not say whether a model has biases: --aiter-bias "
    "(AiterCompileOptions::bias) sets it on every row";
constexpr const char kSplitKAiter[] =
    "rows with ksplit != 0 are refused (not mapped to a moec knob)";

constexpr KnobDecision kDecisions[] = {
    // moe.combine
    {"combine", "hidden", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "model_dim (one combine per H, E, top-k)"},
    {"combine", "intermediate", T::Fixed, kShapeFixed, C::NotApplicable,
     kLaunchShape, A::Mapped,
     "inter_dim of the first row with its H, E, top-k (the combine does not "
     "read I)"},
    {"combine", "experts", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "expert"},
    {"combine", "top_k", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "topk"},
    {"combine", "ep", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::NotMapped, kEpAiter},
    {"combine", "activation", T::Fixed, kTypeFixed, C::NotApplicable,
     kTypeCost, A::Mapped, kTokenType},
    {"combine", "weight", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kWeightType},
    {"combine", "output", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kTokenType},
    {"combine", "blocks", T::Refined,
     "kKnobChoices: blocks=256, unfused combine only (not with peer_rows)",
     C::Tie,
     "the combine's grid: one launch to the model either way (docs/tuning.md)",
     A::NotMapped, "left at 0: AITER's CSV names no combine kernel"},
    {"combine", "waves", T::Refined,
     "kKnobChoices: waves=8, unfused combine only (not with peer_rows)", C::Tie,
     kLaunchKnob, A::NotMapped, kLaunchWaves},
    {"combine", "split_k", T::NotSearched,
     "pairs the combine with W2's split_k; docs/tuning.md 'Not searched'",
     C::Tie, kLaunchKnob, A::NotMapped, kSplitKAiter},
    {"combine", "peer_rows", T::Fixed,
     "set by the fused template: its combine sums the fused stage 2's rows",
     C::NotApplicable, "fixed by the template; the combine is one launch either "
                       "way",
     A::NotMapped, kPeerAiter},
    {"combine", "shared_last_route", T::Fixed, kSharedLastRouteFixed,
     C::NotApplicable, "a validity rule on the route ids; no cost",
     A::NotMapped, kSharedLastRouteAiter},
    {"combine", "fp8_peer_rows", T::Fixed,
     "set by the fused template with its stage 2's payload = fp8 (moec "
     "compile refuses a config where the two disagree)",
     C::NotApplicable, "fixed by the template; the combine is one launch either "
                       "way",
     A::NotMapped, kPeerAiter},

    // moe.quant
    {"quant", "hidden", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "model_dim (one quant per H, E, top-k)"},
    {"quant", "intermediate", T::Fixed, kShapeFixed, C::NotApplicable,
     kLaunchShape, A::Mapped,
     "inter_dim of the first row with its H, E, top-k (the quant does not "
     "read I)"},
    {"quant", "experts", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "expert"},
    {"quant", "top_k", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "topk"},
    {"quant", "ep", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::NotMapped, kEpAiter},
    {"quant", "activation", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kTokenType},
    {"quant", "weight", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kWeightType},
    {"quant", "output", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kFp8Type},
    {"quant", "waves", T::NotSearched, kLaunchNotSearched, C::Tie, kLaunchKnob,
     A::NotMapped, kLaunchWaves},

    // moe.sort
    {"sort", "hidden", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "model_dim of the first row with its E, top-k (the sort reads "
                "neither H nor I)"},
    {"sort", "intermediate", T::Fixed, kShapeFixed, C::NotApplicable,
     kLaunchShape, A::Mapped,
     "inter_dim of the first row with its E, top-k (the sort reads neither H "
     "nor I)"},
    {"sort", "experts", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "expert"},
    {"sort", "top_k", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::Mapped, "topk"},
    {"sort", "ep", T::Fixed, kShapeFixed, C::NotApplicable, kLaunchShape,
     A::NotMapped, kEpAiter},
    {"sort", "activation", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kTokenType},
    {"sort", "weight", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kWeightType},
    {"sort", "output", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kTokenType},
    {"sort", "m_tile", T::Grid,
     "set to the grid's tile M (tiledKernel), SearchSpace::tileM", C::Tie,
     "the sort is one launch to the model; the grid's tile M reaches the "
     "prediction through W13 and W2",
     A::Mapped, "block_m"},
    {"sort", "waves", T::NotSearched, kLaunchNotSearched, C::Tie, kLaunchKnob,
     A::NotMapped, kLaunchWaves},
    {"sort", "shared_last_route", T::Fixed, kSharedLastRouteFixed,
     C::NotApplicable, "a validity rule on the route ids; no cost",
     A::NotMapped, kSharedLastRouteAiter},

    // moe.w2
    {"w2", "hidden", T::Fixed, kShapeFixed, C::Modeled,
     "N tiles (tileGrid: H / tile N)", A::Mapped, "model_dim"},
    {"w2", "intermediate", T::Fixed, kShapeFixed, C::Modeled,
     "W2's K: the counted tile runs at the real K", A::Mapped, "inter_dim"},
    {"w2", "experts", T::Fixed, kShapeFixed, C::Modeled, kExperts, A::Mapped,
     "expert"},
    {"w2", "top_k", T::Fixed, kShapeFixed, C::Modeled, kTopK, A::Mapped, "topk"},
    {"w2", "ep", T::Fixed, kShapeFixed, C::Modeled, kEp, A::NotMapped, kEpAiter},
    {"w2", "activation", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kFp8Type},
    {"w2", "weight", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kWeightType},
    {"w2", "output", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, "checked: the name's _bf16 part (others refused)"},
    {"w2", "m", T::Grid, kGridM, C::Modeled, kTileM, A::Mapped,
     "t{M} of kernelName2 (its sort block, _sbm or M, must equal block_m)"},
    {"w2", "n", T::Grid, "SearchSpace::w2N (128, 256)", C::Modeled, kTileN,
     A::Mapped, "t{M}x{N} of kernelName2"},
    {"w2", "k", T::NotSearched, kKNotSearched, C::Modeled, kTileK, A::Mapped,
     "t{M}x{N}x{K} of kernelName2"},
    {"w2", "waves", T::Grid, kGridWaves, C::Modeled, kWaves, A::Mapped,
     "every flydsl_moe2_ name: 4 (FlyDSL stage 2's num_waves)"},
    {"w2", "mfma", T::Grid, kGridMfma, C::Modeled, kMfma, A::NotMapped,
     kMfmaAiter},
    {"w2", "orientation", T::Refined, kRefinedBoth, C::Modeled, kOrientation,
     A::Mapped, kOrientationAiter},
    {"w2", "b_cache", T::Refined, kRefinedBoth, C::Tie, kBCache, A::Mapped,
     "_bnt2: nt; no _bnt part: cached (other values refused)"},
    {"w2", "waves_per_eu", T::Refined, kRefinedBoth, C::Modeled, kWavesPerEu,
     A::NotMapped, "stage-2 names have no _w{n} part: left at 0"},
    {"w2", "xcd_swizzle", T::Refined, kRefinedBoth, C::Tie, kXcd, A::Mapped,
     kXcdAiter},
    {"w2", "a_swizzle", T::Refined, kRefinedBoth, C::Modeled, kASwizzle,
     A::NotMapped, kNoPart},
    {"w2", "persist_cu", T::Refined,
     "kKnobChoices: persist_cu=256 with persist_strided=true, unfused W2 only "
     "(not with workgroups)",
     C::Tie, kPersist, A::NotMapped,
     "_persist is parsed and only noted: AITER ignores it for FP8 "
     "activations, one workgroup per tile"},
    {"w2", "persist_strided", T::Refined,
     "kKnobChoices: set true together with W2's persist_cu=256 (unfused)",
     C::Tie, kPersist, A::NotMapped, kNoPart},
    {"w2", "b_prefetch", T::Refined, kRefinedBoth, C::Tie, kPrefetch,
     A::NotMapped, kNoPart},
    {"w2", "scale_prefetch", T::Refined, kRefinedBoth, C::Tie, kPrefetch,
     A::NotMapped, kNoPart},
    {"w2", "group_m", T::Refined, kRefinedBoth, C::Tie, kGroupM, A::Mapped,
     kGroupMAiter},
    {"w2", "async_a", T::Refined, kRefinedBoth, C::Modeled, kAsyncA,
     A::NotMapped, "no name part; production variants such as "
                   "_persist_async_w4_cumul3 are refused"},
    {"w2", "persist_skew", T::NotSearched, kPersistSkewNotSearched, C::Tie,
     kPersist, A::NotMapped, kNoPart},
    {"w2", "residency_cap", T::NotSearched, kResidencyNotSearched, C::Modeled,
     kResidency, A::NotMapped, "stage-2 names have no _w{n} part"},
    {"w2", "b_direct", T::Grid, kGridBDirect, C::Modeled, kBDirect,
     A::NotMapped, kNoPart},
    {"w2", "shared_fp8_expert", T::Fixed, kSharedFp8Fixed, C::NotApplicable,
     kSharedFp8Cost, A::Mapped, kSharedFp8Aiter},
    {"w2", "split_k", T::NotSearched,
     "pairs W2 with its combine, which must carry the same split_k: a "
     "one-stage refinement cannot change both; docs/tuning.md 'Not searched'",
     C::Tie,
     "no split-K term: tileGrid ignores grid z, and the counted one-tile run "
     "launches split_k workgroups and is refused (analytic fallback ignores "
     "it; small tune)",
     A::NotMapped,
     "ksplit must be 0 (other rows refused); stage-2 names have no split-K "
     "part"},
    {"w2", "bf16_lds", T::Refined,
     "kKnobChoices: bf16_lds=true on W2 (the fused W2 refuses it)", C::Tie,
     "its purpose, whole 16-byte row stores, is invisible (global bytes are "
     "counted as distinct lines); the counted tile only gains the staging's "
     "LDS traffic and instructions (small tune)",
     A::NotMapped, "no name part (_atomic/_reduce is only noted)"},
    {"w2", "sort_block_m", T::NotSearched,
     "not in the grid or kKnobChoices; the grid sorts in blocks of the tile M "
     "(sort m_tile = tile M), which 0 means; larger blocks are AITER's _sbm",
     C::Tie,
     "tileGrid pads each expert's rows to tile M, not to the sort block; "
     "whether the counted tile changes was not checked",
     A::Mapped, "_sbm{S} of kernelName2, when S differs from tile M"},
    {"w2", "bias", T::Fixed, kBiasFixed, C::NotApplicable, kFixedInTile,
     A::NotMapped, kBiasAiter},
    {"w2", "transport", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w2", "capacity", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w2", "max_tokens", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w2", "workgroups", T::SelectionWide, kWorkgroupsWide, C::Tie,
     kWorkgroupsCost, A::NotMapped, kPeerAiter},
    {"w2", "dispatch_cus", T::Fixed, kW2Pinned, C::NotApplicable, kW2PinnedCost,
     A::NotMapped, kPeerAiter},
    {"w2", "work_shards", T::SelectionWide, kWorkShardsWide, C::Tie,
     kProducerCost, A::NotMapped, kPeerAiter},
    {"w2", "plan_cus", T::Fixed, kW2Pinned, C::NotApplicable, kW2PinnedCost,
     A::NotMapped, kPeerAiter},
    {"w2", "chunk_routes", T::Fixed, kW2Pinned, C::NotApplicable, kW2PinnedCost,
     A::NotMapped, kPeerAiter},
    {"w2", "dispatch", T::Fixed, kW2Pinned, C::NotApplicable, kW2PinnedCost,
     A::NotMapped, kPeerAiter},
    {"w2", "k_waves", T::Fixed,
     "moe.w2's verifier pins it to 1: slice-K inside the workgroup is a "
     "stage-1 knob (AITER registers _kw for stage 1 only)",
     C::NotApplicable, "pinned to 1 by the dialect", A::NotMapped,
     "AITER's stage-2 names carry no _kw"},
    {"w2", "payload", T::NotSearched,
     "the template's payload is kept: it changes the numerics (one more FP8 "
     "rounding), so it is a choice of the table's author, not of the tuner",
     C::Tie,
     "the model does not price the peer links' bytes (H + H/32 instead of "
     "2H a row); only the FP8 epilogue's registers move the prediction, "
     "through the kernel's occupancy",
     A::NotMapped, kPeerAiter},

    // moe.w13
    {"w13", "k_waves", T::NotSearched,
     "not in SearchSpace or kKnobChoices: the template's value is kept",
     C::Tie,
     "the model prices tile.waves waves per tile: the extra wave groups and "
     "their LDS reduction are not priced",
     A::Mapped,
     "_kw{n} of kernelName1 (1 without), within get_flydsl_stage1_kernels' "
     "rules (tile m 32, N-waves x n <= 8, 4 N <= K, FP8 activations with 2+ "
     "N-waves); a name outside them is refused by name"},
    {"w13", "payload", T::Fixed,
     "moe.w13's verifier pins it to bf16: the payload is stage 2's",
     C::NotApplicable, "pinned by the dialect", A::NotMapped, kPeerAiter},
    {"w13", "hidden", T::Fixed, kShapeFixed, C::Modeled,
     "W13's K: the counted tile runs at the real K", A::Mapped, "model_dim"},
    {"w13", "intermediate", T::Fixed, kShapeFixed, C::Modeled,
     "N tiles (tileGrid: I / tile N)", A::Mapped, "inter_dim"},
    {"w13", "experts", T::Fixed, kShapeFixed, C::Modeled, kExperts, A::Mapped,
     "expert"},
    {"w13", "top_k", T::Fixed, kShapeFixed, C::Modeled, kTopK, A::Mapped,
     "topk"},
    {"w13", "ep", T::Fixed, kShapeFixed, C::Modeled, kEp, A::NotMapped,
     kEpAiter},
    {"w13", "activation", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kFp8Type},
    {"w13", "weight", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped, kWeightType},
    {"w13", "output", T::Fixed, kTypeFixed, C::NotApplicable, kTypeCost,
     A::Mapped,
     "checked: FP8 1x32 intermediate (_fp4 refused; no _fp8 is noted: AITER "
     "then writes BF16)"},
    {"w13", "m", T::Grid, kGridM, C::Modeled, kTileM, A::Mapped,
     "t{M} of kernelName1 (must equal block_m)"},
    {"w13", "n", T::Grid, "SearchSpace::w13N (64, 128, 256, 512)", C::Modeled,
     kTileN, A::Mapped,
     "t{M}x{N} of kernelName1: N / 2 (with _gui N counts gate and up rows)"},
    {"w13", "k", T::NotSearched, kKNotSearched, C::Modeled, kTileK, A::Mapped,
     "t{M}x{N}x{K} of kernelName1"},
    {"w13", "waves", T::Grid, kGridWaves, C::Modeled, kWaves, A::Mapped,
     "from t{M}x{N} of kernelName1: min(4, N / 32)"},
    {"w13", "mfma", T::Grid, kGridMfma, C::Modeled, kMfma, A::NotMapped,
     kMfmaAiter},
    {"w13", "orientation", T::Refined, kRefinedBoth, C::Modeled, kOrientation,
     A::Mapped, kOrientationAiter},
    {"w13", "b_cache", T::Refined, kRefinedBoth, C::Tie, kBCache, A::Mapped,
     "_bnt{n}: _bnt2 or no part -> nt (b_nt 2 is stage 1's default), _bnt0 "
     "-> cached"},
    {"w13", "waves_per_eu", T::Refined, kRefinedBoth, C::Modeled, kWavesPerEu,
     A::Mapped,
     "_w{n} of an FHMoE row's kernelName1 (FlyDSL's FHMoE stage 1 hands it to "
     "the register allocator); else 0"},
    {"w13", "xcd_swizzle", T::Refined, kRefinedBoth, C::Tie, kXcd, A::Mapped,
     kXcdAiter},
    {"w13", "a_swizzle", T::Refined, kRefinedBoth, C::Modeled, kASwizzle,
     A::NotMapped, kNoPart},
    {"w13", "persist_cu", T::NotSearched,
     "kKnobChoices refines persistence on unfused W2 only; the code gives no "
     "reason for leaving W13 out",
     C::Tie, kPersist, A::NotMapped, "stage-1 names have no persistence part"},
    {"w13", "persist_strided", T::NotSearched,
     "only W2's persist_cu refinement sets it; the code gives no reason for "
     "leaving W13 out",
     C::Tie, kPersist, A::NotMapped, kNoPart},
    {"w13", "b_prefetch", T::Refined, kRefinedBoth, C::Tie, kPrefetch,
     A::NotMapped, kNoPart},
    {"w13", "scale_prefetch", T::Refined, kRefinedBoth, C::Tie, kPrefetch,
     A::NotMapped, kNoPart},
    {"w13", "group_m", T::Refined, kRefinedBoth, C::Tie, kGroupM, A::Mapped,
     kGroupMAiter},
    {"w13", "async_a", T::Refined, kRefinedBoth, C::Modeled, kAsyncA,
     A::NotMapped, kNoPart},
    {"w13", "persist_skew", T::NotSearched, kPersistSkewNotSearched, C::Tie,
     kPersist, A::NotMapped, kNoPart},
    {"w13", "residency_cap", T::NotSearched, kResidencyNotSearched, C::Modeled,
     kResidency, A::Mapped,
     "_w{n} of kernelName1 (1 without): FlyDSL's LDS padding caps residency "
     "at n"},
    {"w13", "b_direct", T::Grid, kGridBDirect, C::Modeled, kBDirect,
     A::NotMapped, kNoPart},
    {"w13", "gate_up_interleave", T::Fixed,
     "the checkpoint's W13 row layout (gate/up blocks)", C::NotApplicable,
     kFixedInTile, A::Mapped, "_gui: 16 (names without _gui are refused)"},
    {"w13", "swiglu_limit", T::Fixed, "the model's activation clamp",
     C::NotApplicable, kFixedInTile, A::Mapped,
     "act_type: Swiglu -> --swiglu-limit or 7 (AITER's default); Silu -> "
     "--swiglu-limit (0: plain SiLU)"},
    {"w13", "gpt_oss_swiglu", T::Fixed, "the model's activation function",
     C::NotApplicable, kFixedInTile, A::Mapped, "act_type ActivationType.Swiglu"},
    {"w13", "situ_v2", T::Fixed, "the model's activation function",
     C::NotApplicable, kFixedInTile, A::Mapped, "act_type ActivationType.Situv2"},
    {"w13", "situ_beta", T::Fixed, "the model's SiTUv2 constants",
     C::NotApplicable, kFixedInTile, A::NotMapped,
     "a runtime argument in AITER (not in the CSV): the ODS default 4, "
     "AITER's DEFAULT_SITUV2_BETA"},
    {"w13", "situ_linear_beta", T::Fixed, "the model's SiTUv2 constants",
     C::NotApplicable, kFixedInTile, A::NotMapped,
     "a runtime argument in AITER (not in the CSV): the ODS default 25, "
     "AITER's DEFAULT_SITUV2_LINEAR_BETA"},
    {"w13", "shared_fp8_expert", T::Fixed, kSharedFp8Fixed, C::NotApplicable,
     kSharedFp8Cost, A::Mapped, kSharedFp8Aiter},
    {"w13", "bias", T::Fixed, kBiasFixed, C::NotApplicable, kFixedInTile,
     A::NotMapped, kBiasAiter},
    {"w13", "transport", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w13", "capacity", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w13", "max_tokens", T::Fixed, kSelectionFixed, C::NotApplicable,
     kPeerFixedCost, A::NotMapped, kPeerAiter},
    {"w13", "workgroups", T::SelectionWide, kWorkgroupsWide, C::Tie,
     kWorkgroupsCost, A::NotMapped, kPeerAiter},
    {"w13", "dispatch_cus", T::SelectionWide,
     "kClassChoices: dispatch_cus 16 or 64 on the fused W13", C::Tie,
     kProducerCost, A::NotMapped, kPeerAiter},
    {"w13", "work_shards", T::SelectionWide, kWorkShardsWide, C::Tie,
     kProducerCost, A::NotMapped, kPeerAiter},
    {"w13", "plan_cus", T::SelectionWide,
     "kClassChoices: plan_cus 8 on the fused W13, compact transport only",
     C::Tie, kProducerCost, A::NotMapped, kPeerAiter},
    {"w13", "chunk_routes", T::Refined,
     "kKnobChoices: chunk_routes=4, fused W13 only (with transport)", C::Tie,
     kProducerCost, A::NotMapped, kPeerAiter},
    {"w13", "dispatch", T::NotSearched,
     "a template with dispatch is not searched (Tuner.cpp searchable): its "
     "dispatch and W13 kernels pair their knobs, so it is ranked as written",
     C::Modeled,
     "dispatch=only costs one launch instead of a GEMM stage (Tuner.cpp "
     "isGemm); fused and none predict the W13 GEMM alone",
     A::NotMapped, kPeerAiter},
};

} // namespace

const KnobDecision *knobDecisionsBegin() { return std::begin(kDecisions); }
const KnobDecision *knobDecisionsEnd() { return std::end(kDecisions); }
size_t knobDecisionCount() { return std::size(kDecisions); }

const KnobDecision *lookupKnobDecision(std::string_view stage,
                                       std::string_view knob) {
  for (const KnobDecision &row : kDecisions)
    if (stage == row.stage && knob == row.knob)
      return &row;
  return nullptr;
}

std::vector<std::string> knobDecisionProblems(const KnobDecision *begin,
                                              const KnobDecision *end) {
  std::vector<std::string> problems;
  auto rowsOf = [&](std::string_view stage, std::string_view knob) {
    return std::count_if(begin, end, [&](const KnobDecision &row) {
      return stage == row.stage && knob == row.knob;
    });
  };
  for (const moe::StageKnobs *s = moe::stageKnobsBegin();
       s != moe::stageKnobsEnd(); ++s)
    for (const moe::KnobInfo &knob : *s) {
      const std::string where = std::string(s->stage) + "." + knob.name;
      const auto rows = rowsOf(s->stage, knob.name);
      if (rows == 0)
        problems.push_back(where + ": no decision row");
      else if (rows > 1)
        problems.push_back(where + ": " + std::to_string(rows) + " rows");
    }
  for (const KnobDecision *row = begin; row != end; ++row) {
    const moe::StageKnobs *stage = moe::lookupStageKnobs(row->stage);
    if (!stage)
      problems.push_back(std::string(row->stage) + "." + row->knob +
                         ": no such stage");
    else if (!stage->find(row->knob))
      problems.push_back(std::string(row->stage) + "." + row->knob +
                         ": no such knob");
  }
  return problems;
}

const char *tunerDecisionName(TunerDecision decision) {
  switch (decision) {
  case TunerDecision::Grid:
    return "Grid";
  case TunerDecision::Refined:
    return "Refined";
  case TunerDecision::SelectionWide:
    return "SelectionWide";
  case TunerDecision::NotSearched:
    return "NotSearched";
  case TunerDecision::Fixed:
    return "Fixed";
  }
  return "?";
}

const char *costDecisionName(CostDecision decision) {
  switch (decision) {
  case CostDecision::Modeled:
    return "Modeled";
  case CostDecision::Tie:
    return "Tie";
  case CostDecision::NotApplicable:
    return "NotApplicable";
  }
  return "?";
}

const char *aiterDecisionName(AiterDecision decision) {
  switch (decision) {
  case AiterDecision::Mapped:
    return "Mapped";
  case AiterDecision::NotMapped:
    return "NotMapped";
  }
  return "?";
}

} // namespace moec
