//===- MoeAttrs.td - moe dialect attributes ----------------*- tablegen -*-===//

#ifndef MOEC_DIALECT_MOE_MOEATTRS_TD
#define MOEC_DIALECT_MOE_MOEATTRS_TD

include "moec/Dialect/Moe/MoeBase.td"

def Moe_MfmaShape : I32EnumAttr<"MfmaShape", "scaled MFMA instruction shape", [
    I32EnumAttrCase<"m16n16k128", 0>,
    I32EnumAttrCase<"m32n32k64", 1>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_MfmaShapeAttr : EnumAttr<Moe_Dialect, Moe_MfmaShape, "mfma_shape">;

def Moe_MfmaOrientation : I32EnumAttr<"MfmaOrientation",
    "which GEMM operand feeds the MFMA A source", [
    I32EnumAttrCase<"a_major", 0>,
    I32EnumAttrCase<"b_major", 1>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_MfmaOrientationAttr
    : EnumAttr<Moe_Dialect, Moe_MfmaOrientation, "mfma_orientation">;

def Moe_CachePolicy : I32EnumAttr<"CachePolicy",
    "cache policy of weight (B) loads", [
    I32EnumAttrCase<"cached", 0>,
    I32EnumAttrCase<"nt", 1>,
    I32EnumAttrCase<"sc0", 2>,
    I32EnumAttrCase<"sc1", 3>,
    I32EnumAttrCase<"sc0_sc1", 4>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}
def Moe_CachePolicyAttr : EnumAttr<Moe_Dialect, Moe_CachePolicy, "cache_policy">;

def Moe_PeerDispatch : I32EnumAttr<"PeerDispatch",
    "which part of stage 1 a kernel runs", [
    I32EnumAttrCase<"fused", 0>,
    I32EnumAttrCase<"only", 1>,
    I32EnumAttrCase<"none", 2>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

def Moe_PeerKind : I32EnumAttr<"PeerKind",
    "where a route's receive row comes from", [
    I32EnumAttrCase<"fixed_slot", 0>,
    I32EnumAttrCase<"compact", 1>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

// The element formats of a GEMM stage's A operand and of the quantised
// activations between stages. The problem attribute carries them as element
// types (f8E4M3FN, f4E2M1FN, bf16); ProblemAttr::getActivationFormat and
// getOutputFormat give them as this enum, and its verifier admits no other
// activation type.
def Moe_ActivationFormat : I32EnumAttr<"ActivationFormat",
    "element format of quantised activations", [
    // FP8 E4M3FN, one E8M0 scale per 1x32 (A8W4; the default).
    I32EnumAttrCase<"fp8", 0>,
    // MXFP4: E2M1 pairs, one E8M0 scale per 1x32 (A4W4).
    I32EnumAttrCase<"fp4", 1>,
    // BF16, unscaled (A16W4; the layer input before moe.quant).
    I32EnumAttrCase<"bf16", 2>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

// The values are abi::Stage's (abi/include/moec/abi/stage.h), in pipeline
// order, and the spellings the stage ops' mnemonics; MoeDialect.cpp
// static_asserts the values, the compiler test [stage] the names.
def Moe_Stage : I32EnumAttr<"Stage", "a kernel stage of a MoE layer", [
    I32EnumAttrCase<"quant", 0>,
    I32EnumAttrCase<"sort", 1>,
    I32EnumAttrCase<"w13", 2>,
    I32EnumAttrCase<"w2", 3>,
    I32EnumAttrCase<"combine", 4>
  ]> {
  let cppNamespace = "::moec::moe";
  let genSpecializedAttr = 0;
}

def Moe_ProblemAttr : Moe_Attr<"Problem", "problem"> {
  let summary = "shape and data types of one MoE layer";
  let description = [{
    The layer a kernel is built for. `hidden` is the model dimension H,
    `intermediate` the (TP-local, padded) expert intermediate dimension I,
    `experts` the total routed expert count, `top_k` the routes per token and
    `ep` the expert-parallel group size; each rank owns `experts / ep`
    consecutive experts. `activation`, `weight` and `output` are the element
    types of the GEMM A operand, the B operand and the result.

    `activation` is an activation format: `f8E4M3FN` (FP8 with one E8M0
    scale per 1x32, A8W4), `f4E2M1FN` (MXFP4 with one E8M0 scale per 1x32,
    A4W4) or `bf16`; so is `output` where it is quantised activations (the
    intermediate `moe.w13` writes and `moe.w2` reads, the rows `moe.quant`
    writes). A kernel symbol names a format only through the type tokens it
    always had (`moe1_afp8_wfp4_fp8`, `moe1_afp4_wfp4_fp4`, ...), so every
    FP8 kernel keeps its symbol.

    ```mlir
    #moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6,
                 ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>
    ```
  }];
  let parameters = (ins
    "int64_t":$hidden,
    "int64_t":$intermediate,
    "int64_t":$experts,
    "int64_t":$top_k,
    DefaultValuedParameter<"int64_t", "1">:$ep,
    "::mlir::Type":$activation,
    "::mlir::Type":$weight,
    "::mlir::Type":$output
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Experts owned by one rank of the expert-parallel group.
    int64_t getLocalExperts() const { return getExperts() / getEp(); }
    /// The format of `activation` (always one: the verifier checks it).
    ActivationFormat getActivationFormat() const;
    /// The format of `output`, if it is one.
    std::optional<ActivationFormat> getOutputFormat() const;
  }];
}

def Moe_TileAttr : Moe_Attr<"Tile", "tile"> {
  let summary = "tile configuration of one GEMM stage";
  let description = [{
    The tuning knobs of a GEMM stage. `m`, `n`, `k` are the workgroup tile
    (rows of the sorted route list: 16, 32, 64 or 128; output columns: a
    multiple of 32 from 32 to 512, whole 1x32 quantisation blocks; reduction
    step: a multiple of 128); `waves` is the number of 64-lane waves per
    workgroup, which split the N tile evenly. `mfma` picks the scaled MFMA instruction, `orientation` which
    operand feeds its A source (`b_major` puts the weights there, so each lane
    ends up owning consecutive output columns), and `b_cache` the cache policy
    of weight loads (`nt` marks them non-temporal: weights are streamed once
    per tile and should not evict activations; `sc0`, `sc1` and `sc0_sc1`
    set those gfx950 cache-coherence bits on every weight load instead:
    SC0 keeps the line out of the CU's L1, SC1 out of the L2, both stream it
    through).

    `waves_per_eu` (0: no hint) asks the register allocator to fit that many
    waves per SIMD (`amdgpu-waves-per-eu`), trading registers for
    occupancy. `xcd_swizzle` renumbers workgroups so that the hardware's
    round-robin over the 8 XCDs puts consecutive tiles of one M tile (which
    read the same activation rows) on the same XCD and its L2.
    `a_swizzle` XORs the 16-byte chunk index of each A row in LDS with the
    row number, so the 16 rows an MFMA fragment load touches hit different
    LDS banks.

    `group_m` G > 0 (spatial partitioning) orders the tiles in groups of G
    M tiles: consecutive workgroups walk down the G M tiles of a group
    before moving to the next N tile, so a group's activation rows and the
    weight columns in use stay in L2 together. With `xcd_swizzle` the group
    order applies to the XCD-renumbered id (first the renumbering, then the
    groups: AITER's `_xcd{G}` schedule). Not with `persist_cu`.

    `b_direct` loads each wave's weight fragments from global memory
    straight into registers, 16 bytes per lane per MFMA, instead of staging
    the B tile in LDS: the waves split N, so no two waves read the same
    weight row and LDS holds only the A tile (and the epilogue's staging),
    which lifts the LDS cap on occupancy. A K step's fragments are all
    requested before the barrier, so their latency overlaps it. Not with
    `b_prefetch` (already register loads).

    `residency_cap` C > 0 pads the kernel's LDS to at least
    ldsBytesPerCu / (C + 1) + 1 bytes (rounded up to a dword), so that at
    most C workgroups fit on a CU at once whatever the registers allow; a
    kernel that already needs more LDS is unchanged. This is how AITER's
    FlyDSL FP8 x MXFP4 kernels spend their `_w{C}` name part.

    `persist_cu` P > 0 makes the kernel persistent: the grid has P rows of
    workgroups (instead of one per M tile) and each loops over M tiles,
    either a contiguous run of ceil(tiles / P) (`persist_strided = false`)
    or every P-th tile (`persist_strided = true`, which spreads the
    experts' tiles evenly when their sizes differ).
    `persist_skew` S > 0 rotates where each persistent workgroup starts in
    its own list of tiles: workgroup y begins at position (y * S) mod its
    tile count and wraps around, so the workgroups do not all start on the
    same experts' weights at once. It changes the order of the tiles, not
    which tiles a workgroup computes.

    `b_prefetch` pipelines the weights: the next K step's B tile is loaded
    into registers right after the barrier, so its global latency overlaps
    this step's MFMAs, and is written to LDS at the top of the next step.
    `scale_prefetch` requests every E8M0 scale byte of the K step before the
    barrier instead of next to each MFMA, so their global-memory latency
    overlaps the wait.

    `async_a` copies the A tile of each K step straight from global memory
    into LDS (`amdgpu.gather_to_lds`, gfx950's 16-byte LDS DMA
    `buffer_load_dwordx4 ... lds`) instead of through registers: no VGPRs
    hold the A chunks and no `ds_write` is issued. A wave's 64 lanes fill 64
    consecutive 16-byte chunks of the tile in lane order (the hardware adds
    lane * 16 to one LDS base), so the XOR chunk swizzle of `a_swizzle`
    cannot apply. The copies are waited for (`s_waitcnt vmcnt(0)`) after
    the B tile's copy and before the barrier that precedes the fragment
    loads; `scale_prefetch`'s scale loads are issued after that wait, so
    they still overlap the barrier. `b_prefetch` combines with it
    unchanged (the prefetched B registers go to LDS as before).

    `k_waves` W > 1 (1 to 8; slice-K inside the workgroup, AITER's `_kw{W}`
    and opus's `pair_kw{W}`) adds W
    groups of `waves` waves: the reduction dimension is cut into W
    contiguous ranges, each walked by one group with its own A and B tiles
    in LDS, and the groups' FP32 partial sums are added in LDS, in
    increasing group order, before the epilogue (group 0 holds the sum and
    runs the activation). The workgroup has `waves * k_waves` waves;
    `waves` still splits the N tile.

    ```mlir
    #moe.tile<m = 32, n = 128, k = 256, waves = 4, mfma = m16n16k128,
              orientation = a_major, b_cache = nt>
    ```
  }];
  let parameters = (ins
    "int64_t":$m,
    "int64_t":$n,
    DefaultValuedParameter<"int64_t", "256">:$k,
    DefaultValuedParameter<"int64_t", "4">:$waves,
    DefaultValuedParameter<"::moec::moe::MfmaShape",
                           "::moec::moe::MfmaShape::m16n16k128">:$mfma,
    DefaultValuedParameter<"::moec::moe::MfmaOrientation",
                           "::moec::moe::MfmaOrientation::a_major">:$orientation,
    DefaultValuedParameter<"::moec::moe::CachePolicy",
                           "::moec::moe::CachePolicy::cached">:$b_cache,
    DefaultValuedParameter<"int64_t", "0">:$waves_per_eu,
    DefaultValuedParameter<"bool", "false">:$xcd_swizzle,
    DefaultValuedParameter<"bool", "false">:$a_swizzle,
    DefaultValuedParameter<"int64_t", "0">:$persist_cu,
    DefaultValuedParameter<"bool", "false">:$persist_strided,
    DefaultValuedParameter<"bool", "false">:$b_prefetch,
    DefaultValuedParameter<"bool", "false">:$scale_prefetch,
    DefaultValuedParameter<"int64_t", "0">:$group_m,
    DefaultValuedParameter<"bool", "false">:$async_a,
    DefaultValuedParameter<"int64_t", "0">:$persist_skew,
    DefaultValuedParameter<"int64_t", "0">:$residency_cap,
    DefaultValuedParameter<"bool", "false">:$b_direct,
    DefaultValuedParameter<"int64_t", "1">:$k_waves
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// 16-byte chunks in one A row of the LDS tile (k FP8 bytes).
    int64_t getAChunksPerRow() const { return getK() / 16; }
    /// MFMA tile rows and columns (16 or 32) and reduction depth (128 or 64).
    int64_t getMfmaM() const;
    int64_t getMfmaK() const;
    /// Output columns each wave owns.
    int64_t getWaveN() const { return getN() / getWaves(); }
    /// `ldsBytes` grown to the floor that residency_cap asks for on a chip
    /// with `ldsBytesPerCu` bytes of LDS per CU (unchanged without a cap).
    int64_t padLdsForResidency(int64_t ldsBytes, int64_t ldsBytesPerCu) const;
  }];
}

def Moe_CombineTileAttr : Moe_Attr<"CombineTile", "combine_tile"> {
  let summary = "launch geometry of the weighted combine";
  let description = [{
    `waves` 64-lane waves per workgroup, each reducing one token row at a
    time; `blocks` workgroups that stride over the tokens (a persistent
    grid), or 0 for one workgroup per `waves` tokens.

    ```mlir
    #moe.combine_tile<blocks = 256, waves = 4>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "0">:$blocks,
    DefaultValuedParameter<"int64_t", "4">:$waves
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Moe_PeerTransportAttr : Moe_Attr<"PeerTransport", "peer"> {
  let summary = "expert-parallel peer transport of a fused MegaMoE stage";
  let description = [{
    Makes `moe.w13` the fused stage 1 of MegaMoE (peer dispatch + W13 +
    SwiGLU + FP8 quantisation) and `moe.w2` the fused stage 2 (W2, routing
    weight, BF16 rows stored into the source ranks' combine buffers).

    `transport = fixed_slot`: every local expert owns `capacity` receive rows on
    every rank and a route takes the next row of its expert with an atomic
    on the destination. `transport = compact`: `capacity` receive rows per rank
    in all; a planner workgroup per source counts its routes per
    destination expert and publishes the counts into every destination's
    table, and each producer then places its rows at the expert's base
    (an exclusive scan of the experts' totals) plus the counts of lower
    source ranks, so each expert's rows are contiguous and sources sit in
    rank order. Either way a route that finds no row is counted in the
    destination's overflow word (reported, never silently dropped: the
    layer must be treated as failed).

    `max_tokens` bounds the tokens of one rank per launch (the workspace
    capacity of the tuning key). `workgroups` is the persistent grid of the
    stage; roles go by arrival order (a ticket from an atomic counter), not
    by block id, so the workgroups that others wait on are always resident.
    In stage 1 the first `dispatch_cus` arrivals copy routes to their
    destinations (with compact, the first of them plans), then every
    workgroup computes W13 tiles. docs/families.md gives the buffers, the
    control words and the launch protocol.

    `work_shards` S = 0 hands out the GEMM work items statically (item
    role, role + workgroups, ...). S in 1..8 makes a dynamic queue: the
    items are cut into S shards, each with an atomic counter; a workgroup
    drains the shard of its role mod S first, then the others in turn, so
    workgroups that drew cheap items take more of them.

    `dispatch` splits stage 1 into two kernels for engines that schedule
    them separately: `only` is the dispatch kernel (every one of its
    `workgroups` is a producer, so `dispatch_cus` must equal `workgroups`;
    it computes nothing), `none` is the W13 kernel behind it (no producers;
    it waits for the signals of a dispatch kernel with `dispatch_cus`
    workgroups of the same wave count). `fused` (the default) does both.

    `plan_cus` P (compact only): the first P producers each count a slice
    of the routes and add their counts into the destinations' tables, so
    the planning of a large batch is spread over P CUs. `chunk_routes` C:
    each producer wave copies C consecutive routes (consecutive token rows)
    before moving on by the producers' stride.

    `payload` is the format of the rows fused stage 2 stores into the
    source ranks' combine buffers: `bf16` (the default) or `fp8` (FP8
    E4M3FN with one E8M0 scale per 1x32 block, quantised after the routing
    weight is applied: about half the bytes over the peer links, one more
    rounding). It must be the default on `moe.w13`.

    ```mlir
    #moe.peer<capacity = 4096, max_tokens = 1024, workgroups = 256,
              dispatch_cus = 32>
    #moe.peer<transport = compact, capacity = 196608, max_tokens = 8192>
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"::moec::moe::PeerKind",
                           "::moec::moe::PeerKind::fixed_slot">:$transport,
    "int64_t":$capacity,
    "int64_t":$max_tokens,
    DefaultValuedParameter<"int64_t", "256">:$workgroups,
    DefaultValuedParameter<"int64_t", "16">:$dispatch_cus,
    DefaultValuedParameter<"int64_t", "0">:$work_shards,
    DefaultValuedParameter<"int64_t", "1">:$plan_cus,
    DefaultValuedParameter<"int64_t", "1">:$chunk_routes,
    DefaultValuedParameter<"::moec::moe::PeerDispatch",
                           "::moec::moe::PeerDispatch::fused">:$dispatch,
    DefaultValuedParameter<"::moec::moe::ActivationFormat",
                           "::moec::moe::ActivationFormat::bf16">:$payload
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Receive rows of one rank: local experts x capacity (fixed slot) or
    /// capacity (compact).
    int64_t getReceiveRows(int64_t localExperts) const {
      return getTransport() == PeerKind::fixed_slot ? localExperts * getCapacity()
                                               : getCapacity();
    }
    bool isCompact() const { return getTransport() == PeerKind::compact; }
  }];
}

#endif // MOEC_DIALECT_MOE_MOEATTRS_TD
