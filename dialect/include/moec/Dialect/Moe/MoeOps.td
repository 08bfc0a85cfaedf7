//===- MoeOps.td - moe dialect operations ------------------*- tablegen -*-===//

#ifndef MOEC_DIALECT_MOE_MOEOPS_TD
#define MOEC_DIALECT_MOE_MOEOPS_TD

include "moec/Dialect/Moe/MoeAttrs.td"
include "mlir/IR/SymbolInterfaces.td"

def Moe_W2Op : Moe_Op<"w2", [Symbol]> {
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
    Moe_TileAttr:$tile
  );
  let assemblyFormat = [{
    $sym_name `problem` `(` qualified($problem) `)`
    `tile` `(` qualified($tile) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Bytes of LDS the kernel stages per K step (A tile plus B tile).
    int64_t getLdsBytes();
  }];
}

#endif // MOEC_DIALECT_MOE_MOEOPS_TD
