// PR 218363: a different MFMA opcode reading the previous MFMA's result as
// its whole SrcC (same registers) gets no accumulator forwarding and needs
// the overlapped-SrcC wait states (4/6/10/18). The same opcode chains freely.
// CASE 0: 4-pass v_mfma_f32_16x16x32_bf16 then an 8-pass scaled MFMA (6);
// CASE 1: 8-pass scaled MFMA then v_mfma_f32_16x16x32_bf16 (10);
// CASE 2: v_mfma_f32_16x16x32_bf16 twice (forwarding: no wait states);
// CASE 3: 8-pass v_mfma_f32_32x32x16_bf16 on a[0:15], then a 16x16x32 MFMA
//         whose SrcC a[0:3] overlaps it partly (xdl-write-srcc-overlap, 10).
.include "kernel.inc"
KBEGIN
.if CASE == 0
  v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], a[0:3]
  PAD WAITS
  v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[8:15], v[16:23], a[0:3], v24, v25
.elseif CASE == 1
  v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[8:15], v[16:23], a[0:3], v24, v25
  PAD WAITS
  v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], a[0:3]
.elseif CASE == 2
  v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], a[0:3]
  PAD WAITS
  v_mfma_f32_16x16x32_bf16 a[0:3], v[8:11], v[12:15], a[0:3]
.else
  v_mfma_f32_32x32x16_bf16 a[0:15], v[0:3], v[4:7], a[0:15]
  PAD WAITS
  v_mfma_f32_16x16x32_bf16 a[0:3], v[8:11], v[12:15], a[0:3]
.endif
KEND
