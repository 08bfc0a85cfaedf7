// RUN: moe-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{problem.hidden must be positive, got 0}}
moe.w2 @w problem(#moe.problem<hidden = 0, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{problem.hidden (5000) must be a multiple of the 32-element MX block}}
moe.w2 @w problem(#moe.problem<hidden = 5000, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{problem.intermediate (580) must be a multiple of the 32-element MX block}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 580, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{problem.experts (384) must be divisible by problem.ep (5)}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 5, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{problem.top_k (9) exceeds problem.experts (8)}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 8, top_k = 9, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{tile.m must be one of 16, 32, 64, 128, got 48}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 48, n = 128>)

// -----
// expected-error @+1 {{tile.n must be a multiple of 32 from 32 to 512, got 80}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 80>)

// -----
// expected-error @+1 {{tile.n must be a multiple of 32 from 32 to 512, got 544}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 544>)

// -----
// expected-error @+1 {{tile.k must be a positive multiple of 128, got 192}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, k = 192>)

// -----
// expected-error @+1 {{tile.waves must be one of 1, 2, 4, 8, got 3}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, waves = 3>)

// -----
// expected-error @+1 {{tile.m (16) must be a multiple of the MFMA M (32) of tile.mfma}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, mfma = m32n32k64>)

// -----
// expected-error @+1 {{tile.n (64) split over tile.waves (8) must give each wave a multiple of the MFMA N (16) columns}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 64, waves = 8>)

// -----
// expected-error @+1 {{needs 512 accumulator registers per lane; at most 448 fit}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 128, n = 512, waves = 2>)

// -----
// A16W4 (BF16 activations) is lowered for routed experts only.
// expected-error @+1 {{BF16 activations (A16W4) do not apply to peer or shared_fp8_expert stages}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 385, top_k = 7, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>) {shared_fp8_expert}

// -----
// The activation is an activation format: FP8, MXFP4 or BF16.
// expected-error @+1 {{problem.activation must be an activation format (f8E4M3FN, f4E2M1FN or bf16), got 'f16'}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f16, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// The fused MegaMoE stages move FP8 rows.
// expected-error @+1 {{peer needs FP8 activations (f8E4M3FN); MXFP4 (f4E2M1FN) is for the two-stage kernels}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f4E2M1FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer needs FP8 activations (f8E4M3FN); MXFP4 (f4E2M1FN) is for the two-stage kernels}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f4E2M1FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{problem.weight must be f4E2M1FN for W2, got 'f8E4M3FN'}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f8E4M3FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{problem.output must be bf16 for W2, got 'f32'}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = f32>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{tile.n (512) must divide problem.hidden (7040), the N of W2}}
moe.w2 @w problem(#moe.problem<hidden = 7040, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 512>)

// -----
// A K tail (I mod tile.k) must be whole granules of 128 K: 576 = 2 x 256 + 64.
// expected-error @+1 {{tile.k (256) leaves a K tail of 64 in problem.intermediate (576), the K of W2: the tail (I mod tile.k) must be a multiple of 128 (whole E8M0 scale words and MFMAs), or tile.k divide I}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 576, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, k = 256>)

// -----
// expected-error @+1 {{tile.k (512) must not exceed problem.intermediate (384), the K of W2}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 384, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, k = 512>)

// -----
// A tail of 128 K counts as a K step: 640 = 2 x 256 + 128 is 3 steps.
// expected-error @+1 {{split_k (4) leaves a K slice empty: W2 has 3 K steps of tile.k (256)}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 640, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, k = 256>) {split_k = 4 : i64}

// -----
// expected-error @+1 {{tile (m 128, n 512, k 1024) stages 393216 bytes of LDS; gfx950 has 163840}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2048, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 128, n = 512, k = 1024, waves = 8>)

// -----
// expected-error @+1 {{problem.output must be f8E4M3FN or f4E2M1FN for W13 (the quantised intermediate), got 'bf16'}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>)

// -----
// A16W4's intermediate is BF16: no requantisation after BF16 activations.
// expected-error @+1 {{problem.output must be bf16 for W13 with BF16 activations (A16W4's intermediate), got 'f8E4M3FN'}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>)

// -----
// The BF16 A tile takes twice the LDS of an FP8 one (m x k x 2 bytes).
// expected-error @+1 {{tile (m 128, n 256, k 512) stages 196608 bytes of LDS; gfx950 has 163840}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2048, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 128, n = 256, k = 512, waves = 8>)

// -----
// expected-error @+1 {{problem.weight must be f4E2M1FN for W13, got 'bf16'}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = bf16, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>)

// -----
// expected-error @+1 {{tile.n (512) must divide problem.intermediate (2304), the N of W13}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 512>)

// -----
// expected-error @+1 {{tile.k (384) must divide problem.hidden (5120), the K of W13}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128, k = 384>)

// -----
// expected-error @+1 {{gate_up_interleave (49) must be 0 or divide problem.intermediate (2304)}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>) {gate_up_interleave = 49 : i64}

// -----
// expected-error @+1 {{swiglu_limit must be >= 0 (0 disables the clamp)}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>) {swiglu_limit = -1.0 : f32}

// -----
// expected-error @+1 {{gpt_oss_swiglu needs swiglu_limit > 0 (GPT-OSS and AITER clamp at 7)}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>) {gpt_oss_swiglu}

// -----
// expected-error @+1 {{situ_v2 and gpt_oss_swiglu are two activations; give one}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>) {situ_v2, gpt_oss_swiglu, swiglu_limit = 7.0 : f32}

// -----
// expected-error @+1 {{situ_v2 needs situ_beta > 0 and situ_linear_beta > 0, got 0 and 25}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 128>) {situ_v2, situ_beta = 0.0 : f32}

// -----
// expected-error @+1 {{needs 512 gate and up accumulator registers per lane; at most 448 fit}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 4, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 128, n = 256, waves = 2>)

// -----
// expected-error @+1 {{tile (m 128, n 256, k 512) needs 196608 bytes of LDS; gfx950 has 163840}}
moe.w13 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 128, n = 256, k = 512, waves = 8>)

// -----
// expected-error @+1 {{combine_tile.waves must be one of 1, 2, 4, 8, 16, got 3}}
moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<waves = 3>)

// -----
// expected-error @+1 {{combine_tile.blocks must be >= 0 (0: one workgroup per `waves` tokens), got -1}}
moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = -1>)

// -----
// expected-error @+1 {{problem.output must be bf16 for combine, got 'f32'}}
moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = f32>) tile(#moe.combine_tile<>)

// -----
// expected-error @+1 {{combine_tile.blocks (9000) exceeds the resident workgroups of gfx950}}
moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = 9000>)

// -----
// expected-error @+1 {{attribute 'm_tile' failed to satisfy constraint: 64-bit signless integer attribute whose value is one of {16, 32, 64, 128}}}
moe.sort @s problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) {m_tile = 48 : i64}

// -----
// expected-error @+1 {{problem.experts / problem.ep (40960 local experts) needs 328708 bytes of LDS for the counts; gfx950 has 163840}}
moe.sort @s problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 40960, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) {m_tile = 32 : i64, waves = 4 : i64}

// -----
// expected-error @+1 {{shared_fp8_expert needs problem.ep = 1 (FHMoE is tensor parallel), got 5}}
moe.w2 @w problem(#moe.problem<hidden = 7168, intermediate = 512, experts = 385, top_k = 7, ep = 5, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 256>) {shared_fp8_expert}

// -----
// expected-error @+1 {{shared_fp8_expert needs problem.experts >= 2 (routed experts plus the shared one)}}
moe.w13 @w problem(#moe.problem<hidden = 7168, intermediate = 512, experts = 1, top_k = 1, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 64>) {shared_fp8_expert}

// -----
// The FP8 shared expert doubles the B tile: 128 x 512 FP8 + 512 x 512 bytes.
// expected-error @+1 {{tile (m 128, n 512, k 512) stages 327680 bytes of LDS; gfx950 has 163840}}
moe.w2 @w problem(#moe.problem<hidden = 7168, intermediate = 1024, experts = 385, top_k = 7, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 128, n = 512, k = 512, waves = 8>) {shared_fp8_expert}

// -----
// expected-error @+1 {{tile.waves_per_eu must be 0 (no hint) to 8, got 9}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, waves_per_eu = 9>)

// -----
// expected-error @+1 {{tile.a_swizzle needs tile.k / 16 to be a power of two, got tile.k = 384}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, k = 384, a_swizzle = true>)

// -----
// expected-error @+1 {{tile.async_a cannot be combined with tile.a_swizzle: the LDS DMA writes a wave's 16-byte chunks contiguously in lane order}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, a_swizzle = true, async_a = true>)

// -----
// expected-error @+1 {{split_k (4) leaves a K slice empty: W2 has 5 K steps of tile.k (128)}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 640, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, k = 128>) {split_k = 4 : i64}

// -----
// expected-error @+1 {{tile.persist_strided needs tile.persist_cu > 0}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, persist_strided = true>)

// -----
// expected-error @+1 {{tile.xcd_swizzle cannot be combined with tile.persist_cu}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, persist_cu = 64, xcd_swizzle = true>)

// -----
// expected-error @+1 {{tile.persist_cu must be 0 (not persistent) to 256, got 300}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, persist_cu = 300>)

// -----
// expected-error @+1 {{bf16_lds needs tile.orientation = b_major}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>) {bf16_lds}

// -----
// expected-error @+1 {{bf16_lds stages the BF16 output; split_k (2) writes FP32 partials}}
moe.w2 @w problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128, orientation = b_major>) {bf16_lds, split_k = 2 : i64}

// -----
// expected-error @+1 {{peer.capacity must be positive, got 0}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 0, max_tokens = 16>}

// -----
// expected-error @+1 {{peer.dispatch_cus must be in [1, workgroups - 1] (8 - 1), got 8}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 8, dispatch_cus = 8>}

// -----
// expected-error @+1 {{peer.capacity (40) must be a multiple of tile.m (16)}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 40, max_tokens = 16>}

// -----
// expected-error @+1 {{tile.persist_cu and tile.xcd_swizzle do not apply with peer}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, xcd_swizzle = true>) {peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer: split_k, bf16_lds and shared_fp8_expert do not apply to the fused stage 2}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 512, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {split_k = 2 : i64, peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer: gate_up_interleave and shared_fp8_expert do not apply to the fused stage 1}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {gate_up_interleave = 16 : i64, peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer: bias does not apply to the fused stage 1}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {bias, peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer: bias does not apply to the fused stage 2}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 512, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {bias, peer = #moe.peer<capacity = 32, max_tokens = 16>}

// -----
// expected-error @+1 {{peer_rows are BF16 rows from the fused stage 2; split_k (2) does not apply}}
moe.combine @c problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<waves = 4>) {split_k = 2 : i64, peer_rows}

// -----
// expected-error @+1 {{tile.group_m must be one of 0, 2, 4, 8, 16, got 3}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, group_m = 3>)

// -----
// expected-error @+1 {{tile.group_m cannot be combined with tile.persist_cu}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, group_m = 4, persist_cu = 8>)

// -----
// expected-error @+1 {{tile.residency_cap must be 0 (no cap) or positive, got -1}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, residency_cap = -1>)

// -----
// expected-error @+1 {{sort_block_m (48) must be 0 or a multiple of tile.m (32)}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 32, n = 128>) {sort_block_m = 48 : i64}

// -----
// expected-error @+1 {{tile.persist_skew must be 0, or positive with tile.persist_cu > 0, got 2}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, persist_skew = 2>)

// -----
// expected-error @+1 {{peer.work_shards must be in [0, 8] (0: static assignment), got 9}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {peer = #moe.peer<capacity = 32, max_tokens = 16, work_shards = 9>}

// -----
// expected-error @+1 {{peer.plan_cus must be in [1, dispatch_cus] and 1 unless transport = compact, got 2}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16, plan_cus = 2>}

// -----
// expected-error @+1 {{peer.chunk_routes must be one of 1, 2, 4, 8, 16, got 3}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16, chunk_routes = 3>}

// -----
// expected-error @+1 {{peer.dispatch = only: every workgroup dispatches, so dispatch_cus (2) must equal workgroups (8)}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16, workgroups = 8, dispatch_cus = 2, dispatch = only>}

// -----
// Stage 1's producer knobs have no use in stage 2.
// expected-error @+1 {{peer.dispatch_cus, plan_cus and chunk_routes apply to stage 1 (moe.w13) only}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {peer = #moe.peer<capacity = 32, max_tokens = 16, dispatch_cus = 4>}

// -----
// expected-error @+1 {{'moe.quant' op problem.activation must be bf16 for quant (the layer's input hidden states), got 'f8E4M3FN'}}
moe.quant @q problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>)

// -----
// expected-error @+1 {{'moe.quant' op problem.output must be f8E4M3FN or f4E2M1FN for quant (the token rows moe.w13 reads), got 'bf16'}}
moe.quant @q problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = bf16>)

// -----
// expected-error @+1 {{attribute 'waves' failed to satisfy constraint: 64-bit signless integer attribute whose value is one of {1, 2, 4, 8, 16}}}
moe.quant @q problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = f8E4M3FN>) {waves = 3 : i64}

// -----
// H that is not whole 32-element blocks is the problem's own rule.
// expected-error @+1 {{problem.hidden (5000) must be a multiple of the 32-element MX block}}
moe.quant @q problem(#moe.problem<hidden = 5000, intermediate = 2304, experts = 384, top_k = 6, activation = bf16, weight = f4E2M1FN, output = f8E4M3FN>)

// -----

// expected-error @+1 {{shared_last_route needs problem.ep = 1 (FHMoE is tensor parallel), got 2}}
moe.sort @sort_shared_ep problem(#moe.problem<hidden = 512, intermediate = 256, experts = 10, top_k = 3, ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>) {m_tile = 32 : i64, shared_last_route}

// -----

// expected-error @+1 {{shared_last_route needs problem.experts >= 2 and problem.top_k >= 2 (routed experts and slots plus the shared one), got 9 and 1}}
moe.combine @combine_shared_k1 problem(#moe.problem<hidden = 512, intermediate = 256, experts = 9, top_k = 1, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<blocks = 0, waves = 4>) {shared_last_route}

// -----
// expected-error @+1 {{tile.k_waves must be from 1 to 8, got 9}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 32, n = 64, k_waves = 9>)

// -----
// expected-error @+1 {{tile.k_waves (2) applies to moe.w13 only}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128, k_waves = 2>)

// -----
// expected-error @+1 {{peer.payload must be bf16 or fp8, got fp4}}
moe.w2 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = bf16>) tile(#moe.tile<m = 16, n = 128>) {peer = #moe.peer<capacity = 32, max_tokens = 16, payload = fp4>}

// -----
// expected-error @+1 {{peer.payload applies to stage 2 (moe.w2) only}}
moe.w13 @w problem(#moe.problem<hidden = 512, intermediate = 256, experts = 8, top_k = 2, ep = 2, activation = f8E4M3FN, weight = f4E2M1FN, output = f8E4M3FN>) tile(#moe.tile<m = 16, n = 64>) {peer = #moe.peer<capacity = 32, max_tokens = 16, payload = fp8>}

// -----
// expected-error @+1 {{fp8_peer_rows needs peer_rows}}
moe.combine @c problem(#moe.problem<hidden = 5120, intermediate = 2304, experts = 384, top_k = 6, ep = 2, activation = bf16, weight = f4E2M1FN, output = bf16>) tile(#moe.combine_tile<waves = 4>) {fp8_peer_rows}
