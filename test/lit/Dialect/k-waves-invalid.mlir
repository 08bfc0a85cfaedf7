// The rules of tile.k_waves on moe.w13 (AITER's _kw{n}), one error each.
// RUN: moe-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{tile.k_waves must be from 1 to 8, got 0}}
moe.w13 @w problem(#moe.problem<hidden = 1536, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 32, waves = 2, k_waves = 0>)

// -----
// Seven groups (opus's 'pair_kw7') of 2 waves each: 2048 is eight K steps
// of 256, not a multiple of 7 x 256.
// expected-error @+1 {{'moe.w13' op problem.hidden (2048) must be a multiple of tile.k_waves (7) x tile.k (256)}}
moe.w13 @w problem(#moe.problem<hidden = 2048, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 32, waves = 2, k_waves = 7>)

// -----
// Each group must reduce whole K steps: 768 / (2 x 256) is not whole.
// expected-error @+1 {{'moe.w13' op problem.hidden (768) must be a multiple of tile.k_waves (2) x tile.k (256): each wave group reduces H / k_waves in whole K steps}}
moe.w13 @w problem(#moe.problem<hidden = 768, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 32, waves = 2, k_waves = 2>)

// -----
// LDS: 2 groups x (A 128 x 256 + B 2 x 256 rows x 128 bytes) = 196608, and
// the exchange: FP32 128 x 256 tile + 1 group x 2 x 128 x 256 FP32 =
// 393216 bytes; k_waves = 1 would need 131072.
// expected-error @+1 {{'moe.w13' op tile (m 128, n 256, k 256, k_waves 2) needs 393216 bytes of LDS; gfx950 has 163840}}
moe.w13 @w problem(#moe.problem<hidden = 1024, intermediate = 512, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 128, n = 256, waves = 8, mfma = m32n32k64, k_waves = 2>)

// -----
// 8 waves x 4 groups = 2048 lanes.
// expected-error @+1 {{tile.waves x tile.k_waves (8 x 4) gives 2048 lanes per workgroup; gfx950 allows 1024}}
moe.w13 @w problem(#moe.problem<hidden = 1024, intermediate = 256, experts = 8, top_k = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = f4E2M1FN>) tile(#moe.tile<m = 16, n = 128, waves = 8, k_waves = 4>)

// -----
// expected-error @+1 {{peer: tile.k_waves (2) does not apply to the fused stage 1}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64, k_waves = 2>) {peer = #moe.peer<capacity = 32, max_tokens = 16>}
