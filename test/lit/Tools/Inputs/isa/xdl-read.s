// PR 222040: an XDL MFMA's result read by a VALU needs 5/8/12/20 wait
// states for 2/4/8/16 passes. FMT 0: FP8 A and B (8 VGPRs each), 16 passes;
// FMT 1: FP4 A and B (4 VGPRs), 8 passes; FMT 2: v_mfma_f32_32x32x16_bf16,
// 8 passes. The consumer is at 0x1c: the padding is three s_nops, N + 1 each.
.include "kernel.inc"
KBEGIN
.if FMT == 0
  v_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15], v32, v33
.elseif FMT == 1
  v_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:19], v[24:27], v[0:15], v32, v33 cbsz:4 blgp:4
.else
  v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]
  s_nop 0
.endif
  s_nop N1
  s_nop N2
  s_nop N3
  v_add_f32 v40, v0, v1
KEND
