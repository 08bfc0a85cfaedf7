//===- MoeOps.td - moe dialect operations ------------------*- tablegen -*-===//

#ifndef MOEC_DIALECT_MOE_MOEOPS_TD
#define MOEC_DIALECT_MOE_MOEOPS_TD

include "moec/Dialect/Moe/MoeAttrs.td"
include "moec/Dialect/Moe/MoeInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"

/// An op that declares one kernel stage: a symbol and a StageOpInterface.
class Moe_StageOp<string mnemonic>
    : Moe_Op<mnemonic,
             [Symbol, DeclareOpInterfaceMethods<Moe_StageOpInterface>]>;

def Moe_W2Op : Moe_StageOp<"w2"> {
  let summary = "down-projection (W2) GEMM over expert-sorted routes";
  let description = [{
    Declares one W2 kernel: FP8 E4M3 activations with one E8M0 scale per
    1x32 block times MXFP4 weights (E2M1 values, one E8M0 scale per 32 along
    K), FP32 accumulation, BF16 output.

    Rows are routes (`route = token * top_k + k`) grouped by expert through a
    sorted route list padded to the M tile with the out-of-range route id
    `num_routes`; one expert id per M tile says whose weights the tile uses
    (negative: the tile is empty). The kernel gathers activation rows and
    scatters output rows by route id; padding rows read zeros and their
    stores are dropped (raw-buffer bounds checks), so no branch is needed.

    Kernel arguments, in order: `a` (FP8 [num_routes, I]), `a_scale`
    (E8M0 [num_routes, I/32]), `b` (packed E2M1 [local experts, H, I/2], even
    K in the low nibble), `b_scale` (E8M0 [local experts, H, I/32]),
    `sorted_routes` (i32 [num_sorted]), `tile_experts` (i32
    [num_sorted / m]), `out` (BF16 [num_routes, H]), `num_routes` (i32),
    `num_sorted` (i32). Grid: (H / tile.n, num_sorted / tile.m, 1);
    workgroup: 64 * tile.waves lanes.

    tile.k need not divide I (at most I): the K loop runs the floor(I /
    tile.k) whole steps, then one step of the remainder, the K tail, which
    must be a multiple of 128 (whole words of four E8M0 scales, whole MFMAs
    of either shape; 128 is the smallest tile.k). Its copies read exactly
    the rows' last I mod tile.k elements, into the same LDS tiles; every
    accumulator still adds its MFMAs in increasing K, so the result is the
    one of a tile.k that divides I (I = 384 with tile.k = 256: one step and
    a tail of 128).

    With `shared_fp8_expert` (FHMoE) the last logical expert
    (problem.experts - 1) is a shared expert with native FP8 E4M3 weights
    and E8M0 1x32 scales, passed as two more arguments `b_shared` (FP8
    [H, I]) and `b_shared_scale` (E8M0 [H, I/32]); `b` then holds only the
    routed experts. Its tiles run the same schedule with FP8 B fragments.

    With `split_k` S > 1 the reduction is split over S workgroups (grid z):
    each sums ceil(steps / S) K steps (the last slice fewer; a K tail is a
    step of the last slice) and writes its FP32 partial row to `out`, which is
    then FP32 [num_routes, S, H]; `moe.combine` with the same `split_k` adds
    the S partials of a route in increasing order before weighting, so the
    result does not depend on scheduling (no atomics).

    With `sort_block_m` S > 0 (a multiple of tile.m) the route list is
    padded and labelled in blocks of S rows, as a sort with m_tile S writes
    it: `tile_experts` has num_sorted / S entries and M tile i takes the
    expert of block i * tile.m / S. Several M tiles then share one sort
    block (AITER's `_sbm{S}`). 0: blocks of tile.m.

    With `bf16_lds` the BF16 output tile is staged in LDS (over the GEMM
    tiles) and written back as whole 16-byte row chunks, one
    `buffer_store_dwordx4` per 8 columns, instead of each lane storing the
    scattered pieces its accumulators hold. Needs `b_major` (each lane then
    owns four consecutive columns); not with split_k.

    With `bias` the kernel takes one more argument, `bias` (FP32
    [local experts, H], after all others, the shared expert's row last with
    `shared_fp8_expert`): the expert's row is added to each route's FP32
    result before it is rounded and stored (AITER's FlyDSL bias2; the
    combine applies the routing weight afterwards). With `split_k` only
    slice z = 0 adds it, so the combine's sum of the partials holds it
    once. Not with `peer`.

    With `peer` (#moe.peer, MegaMoE stage 2 of expert parallelism) the rows
    are this rank's receive rows, expert e owning rows [e * capacity,
    (e + 1) * capacity) of which the first count[e] are used; each output
    row is multiplied by its routing weight, rounded to BF16 and stored
    into the combine buffer of the rank the route came from, at row
    `token * top_k + k`. The last workgroup to finish signals every source
    rank. Arguments: `a`, `a_scale` (the stage-1 intermediate over
    receive rows), `b`, `b_scale`, `recv_meta` (i32 [experts * capacity, 2]:
    weight bits and source route + 1), `control` (i32 control words),
    `epoch` (i32), then `problem.ep` combine buffers (BF16
    [max_tokens * top_k, H], one per rank) and `problem.ep` control
    buffers. Grid: (peer.workgroups, 1, 1).

    ```mlir
    moe.w2 @w2_t32x128 problem(#moe.problem<hidden = 5120, intermediate = 2304,
        experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN,
        weight = f4E2M1FN, output = bf16>)
        tile(#moe.tile<m = 32, n = 128, k = 256, waves = 4>)
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Moe_ProblemAttr:$problem,
    Moe_TileAttr:$tile,
    UnitAttr:$shared_fp8_expert,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntIsOneOf<[1, 2, 4, 8]>]>, "1">:$split_k,
    UnitAttr:$bf16_lds,
    DefaultValuedAttr<I64Attr, "0">:$sort_block_m,
    UnitAttr:$bias,
    OptionalAttr<Moe_PeerTransportAttr>:$peer
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)`
    `tile` `(` qualified($tile) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // getLdsBytes() (StageOpInterface): the A and B tiles of a K step (the
    // B tile of FP8 shared-expert rows is twice as large), plus
    // getPeerLdsBytes().
    /// With `peer`: LDS words after the GEMM's for the work list (a count
    /// and a tile prefix per local expert, plus the total) and one word per
    /// wave and per workgroup to broadcast atomics' results; else 0.
    int64_t getPeerLdsBytes();
  }];
}

def Moe_W13Op : Moe_StageOp<"w13"> {
  let summary = "gate/up (W13) GEMM, SwiGLU and FP8 quantisation of the intermediate";
  let description = [{
    Declares one W13 kernel: FP8 E4M3 token rows (1x32 E8M0 scales) times
    the expert's MXFP4 W13 rows, FP32 accumulation, then the gated
    activation and FP8 1x32 quantisation of the intermediate, which is
    written per route in exactly the layout `moe.w2` reads.

    W13 is [local experts, 2I, H]. `gate_up_interleave` G = 0 stores gate
    rows [0, I) then up rows [I, 2I) (the MegaMoE checkpoint layout); G > 0
    stores blocks of G gate rows then G up rows (the TP tables' interleaved
    layout). The activation is `silu(min(g, L)) * clamp(u, -L, L)` with
    L = `swiglu_limit` (DeepSeek V4: 10); L = 0 is plain `silu(g) * u`.
    With `gpt_oss_swiglu` it is GPT-OSS's SwiGLU (AITER's
    `ActivationType.Swiglu`): `g' * sigmoid(1.702 * g') * (u' + 1)` with
    g' = min(g, L), u' = clamp(u, -L, L) and L = `swiglu_limit`, which must
    then be > 0 (AITER's default is 7).
    With `situ_v2` it is Kimi K3's SiTUv2 (AITER's
    `ActivationType.Situv2`): `B * tanh(g' / B) * sigmoid(g') *
    LB * tanh(u' / LB)` with B = `situ_beta`, LB = `situ_linear_beta` (both
    > 0; AITER's tuner and reference use 4 and 25) and the same clamp of
    g' and u' when L > 0 (AITER passes no limit for SiTUv2 unless given).
    Not with `gpt_oss_swiglu`. docs/numerics.md gives the definition and its
    source.
    Each 1x32 block of the intermediate gets the scale
    2^ceil(log2(max(amax, 1e-4) / 448)) with its biased exponent clamped to
    [1, 254], the same rule as the input activations, so it never saturates.

    Rows come from the expert-sorted route list as in `moe.w2`; route r
    reads token row r / top_k, so the sentinel route num_tokens * top_k
    reads zeros and writes nothing.

    Kernel arguments, in order: `a` (FP8 [num_tokens, H]), `a_scale`
    (E8M0 [num_tokens, H/32]), `b` (packed E2M1 [local experts, 2I, H/2]),
    `b_scale` (E8M0 [local experts, 2I, H/32]), `sorted_routes`,
    `tile_experts`, `out` (FP8 [num_tokens * top_k, I]), `out_scale` (E8M0
    [num_tokens * top_k, I/32]), `num_tokens` (i32), `num_sorted` (i32).
    Grid: (I / tile.n, num_sorted / tile.m, 1).

    With `shared_fp8_expert` (FHMoE) the last logical expert is a shared
    expert in native FP8 with E8M0 1x32 scales, passed as `b_shared` (FP8
    [2I, H]) and `b_shared_scale` (E8M0 [2I, H/32]) after the other
    arguments; see `moe.w2`.

    With `bias` the kernel takes one more argument, `bias` (FP32
    [local experts, 2I], after all others, the shared expert's row last with
    `shared_fp8_expert`), in logical order whatever `gate_up_interleave`:
    gate column j at [e, j], up column j at [e, I + j] (AITER's FlyDSL
    bias1). The expert's row is added to the FP32 gate and up accumulators
    before the clamp and the activation. Not with `peer`.

    With `peer` (#moe.peer) the kernel is MegaMoE stage 1: it also
    dispatches this rank's routes to the ranks owning their experts (FP8
    row, scales, routing weight and source route into the destination's
    receive rows), waits until every rank's producers have finished, and
    computes W13 over its own receive rows; the intermediate is indexed by
    receive row. docs/families.md gives the arguments, buffers and the
    launch protocol. Not with `shared_fp8_expert` or `gate_up_interleave`.

    ```mlir
    moe.w13 @w13 problem(#moe.problem<hidden = 5120, intermediate = 2304,
        experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN,
        weight = f4E2M1FN, output = f8E4M3FN>)
        tile(#moe.tile<m = 32, n = 128>) {swiglu_limit = 10.0 : f32}
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Moe_ProblemAttr:$problem,
    Moe_TileAttr:$tile,
    DefaultValuedAttr<I64Attr, "0">:$gate_up_interleave,
    DefaultValuedAttr<F32Attr, "0.0f">:$swiglu_limit,
    UnitAttr:$gpt_oss_swiglu,
    UnitAttr:$situ_v2,
    DefaultValuedAttr<F32Attr, "4.0f">:$situ_beta,
    DefaultValuedAttr<F32Attr, "25.0f">:$situ_linear_beta,
    UnitAttr:$shared_fp8_expert,
    UnitAttr:$bias,
    OptionalAttr<Moe_PeerTransportAttr>:$peer
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)`
    `tile` `(` qualified($tile) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // getLdsBytes() (StageOpInterface): the A and B tiles of a K step,
    // reused afterwards to stage the FP32 activation tile for
    // quantisation, plus getPeerLdsBytes().
    /// With `peer`: the work-list and broadcast words (see moe.w2).
    int64_t getPeerLdsBytes();
  }];
}

def Moe_CombineOp : Moe_StageOp<"combine"> {
  let summary = "weighted sum of each token's top-k routed rows";
  let description = [{
    Declares one combine kernel: `out[t] = sum over k with a valid expert id
    of weight[t, k] * rows[t * top_k + k]`, summed in FP32 in increasing k
    and rounded once to BF16. A route whose expert id is outside
    [0, problem.experts) (for example -1) contributes exactly nothing: its
    row is never read, so stale or poisoned data in its slot cannot leak in,
    and a token without valid routes gets +0.

    Kernel arguments, in order: `rows` (BF16 [num_tokens * top_k, H]),
    `topk_ids` (i32 [num_tokens, top_k]), `topk_weights` (f32
    [num_tokens, top_k]), `out` (BF16 [num_tokens, H]), `num_tokens` (i32).
    Each lane reduces 8 consecutive columns (16-byte loads and stores).
    With `split_k` S > 1, `rows` are the FP32 split-K partials of `moe.w2`,
    [num_tokens * top_k, S, H], summed in increasing order per route.

    With `peer_rows` the rows were written by the peers' fused stage 2
    (`moe.w2` with `peer`): already multiplied by the routing weight, so
    they are summed unweighted, after every workgroup has waited until all
    `problem.ep` ranks have signalled this rank's control word. Two more
    arguments follow: `control` (i32) and `epoch` (i32).
    With `fp8_peer_rows` (needs `peer_rows`; the peers' stage 2 has
    `payload = fp8`) each row is H FP8 E4M3FN bytes followed by H/32 E8M0
    scale bytes, dequantised before the sum.

    With `shared_last_route` (FHMoE) the last of every token's top_k routes
    is the shared expert's: that slot is valid only with the id
    problem.experts - 1, and every other slot only with an id in
    [0, problem.experts - 1). A routed slot naming the shared expert's id
    is invalid (it contributes nothing), so the shared expert is added once
    per token, with the shared slot's weight. Needs problem.top_k >= 2,
    problem.experts >= 2 and problem.ep = 1.

    ```mlir
    moe.combine @combine problem(#moe.problem<hidden = 5120,
        intermediate = 2304, experts = 384, top_k = 6, ep = 4,
        activation = bf16, weight = f4E2M1FN, output = bf16>)
        tile(#moe.combine_tile<blocks = 256, waves = 4>)
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Moe_ProblemAttr:$problem,
    Moe_CombineTileAttr:$tile,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntIsOneOf<[1, 2, 4, 8]>]>, "1">:$split_k,
    UnitAttr:$peer_rows,
    UnitAttr:$fp8_peer_rows,
    UnitAttr:$shared_last_route
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)`
    `tile` `(` qualified($tile) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Moe_SortOp : Moe_StageOp<"sort"> {
  let summary = "group routes by expert into the tile-padded sorted route list";
  let description = [{
    Declares one routing-sort kernel: from `topk_ids` it builds the sorted
    route list the GEMM stages read. For each local expert e in increasing
    order, its valid routes r (`r = token * top_k + k`) in increasing r, then
    the sentinel `num_routes` up to a multiple of `m_tile`; one expert id per
    M tile, and -1 for every tile of the capacity past the used ones (the
    GEMM grid is launched over the whole capacity and those tiles exit at
    once, so no host synchronisation is needed).

    A route is local when `0 <= topk_ids[r] - expert_offset < local
    experts`; others appear nowhere. The order is deterministic (a stable
    counting sort), so two runs give the same list.

    With `shared_last_route` (FHMoE) the last of every token's top_k routes
    is the shared expert's: that slot is valid only with the id
    problem.experts - 1, every other slot only with an id in
    [0, problem.experts - 1); an invalid route appears nowhere. A routed
    slot naming the shared expert's id therefore does not reach it twice.
    Needs problem.top_k >= 2, problem.experts >= 2 and problem.ep = 1.

    `status[0]` receives the used length (`num_sorted`) and `status[1]` the
    length the routes need; when it exceeds `capacity` the list is
    truncated and the caller must treat the layer as failed (overflow is
    reported, never silently dropped).

    Kernel arguments, in order: `topk_ids` (i32 [num_tokens, top_k]),
    `sorted_routes` (i32 [capacity]), `tile_experts` (i32
    [capacity / m_tile]), `status` (i32 [2]), `num_tokens` (i32),
    `expert_offset` (i32), `capacity` (i32, a multiple of m_tile). Grid: one
    workgroup of 64 * `waves` lanes.

    ```mlir
    moe.sort @sort problem(#moe.problem<...>) {m_tile = 32 : i64, waves = 4 : i64}
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Moe_ProblemAttr:$problem,
    ConfinedAttr<I64Attr, [IntIsOneOf<[16, 32, 64, 128]>]>:$m_tile,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntIsOneOf<[1, 2, 4, 8, 16]>]>, "4">:$waves,
    UnitAttr:$shared_last_route
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)` attr-dict
  }];
  let hasVerifier = 1;
}

def Moe_QuantOp : Moe_StageOp<"quant"> {
  let summary = "FP8 1x32 quantisation of the layer's BF16 input tokens";
  let description = [{
    Declares one input-quantisation kernel: the layer's BF16 hidden states
    become the FP8 E4M3 token rows with one E8M0 scale per 1x32 block that
    `moe.w13` (unfused or fused) reads. Each block gets the activation
    recipe's scale 2^ceil(log2(max(amax, 1e-4) / 448)) with its biased
    exponent clamped to [1, 254], computed exactly from the FP32 bits of
    amax (the same code as `moe.w13`'s quantisation of the intermediate),
    and its codes are the values divided by the scale, rounded to nearest
    even; no value exceeds 448, so nothing saturates.

    One lane per 32-element block: one 64-byte load, the amax, 32 codes
    stored as two 16-byte stores and one scale byte. Lanes past the last
    block (the tail of the grid) write nothing, so `num_tokens` = 0 is a
    valid launch that writes nothing.

    Kernel arguments, in order: `x` (BF16 [num_tokens, H]), `out` (FP8
    [num_tokens, H]), `out_scale` (E8M0 [num_tokens, H/32]), `num_tokens`
    (i32). Grid: (max(1, ceil(num_tokens * H / (2048 * waves))), 1, 1);
    workgroup: 64 * `waves` lanes. `problem.activation` must be bf16 and
    `problem.output` f8E4M3FN (the table reader sets both).

    ```mlir
    moe.quant @quant problem(#moe.problem<hidden = 5120,
        intermediate = 2304, experts = 384, top_k = 6, ep = 4,
        activation = bf16, weight = f4E2M1FN, output = f8E4M3FN>)
        {waves = 4 : i64}
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    Moe_ProblemAttr:$problem,
    DefaultValuedAttr<ConfinedAttr<I64Attr, [IntIsOneOf<[1, 2, 4, 8, 16]>]>, "4">:$waves
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)` attr-dict
  }];
  let hasVerifier = 1;
}

#endif // MOEC_DIALECT_MOE_MOEOPS_TD
