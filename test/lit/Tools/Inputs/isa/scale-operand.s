// A scaled MFMA reads its A and B scale VGPRs (MC operands 6 and 7) like
// SrcA/SrcB. CASE 0: a VALU writes the A scale v32 WAITS before it
// (valu-write-mfma-read, 2); CASE 1: the B scale v33; CASE 2: a 4-pass XDL
// MFMA writes v[32:35] and the scaled MFMA reads v32 as its A scale
// (xdl-write-srcab, 8).
.include "kernel.inc"
KBEGIN
  s_mov_b32 s0, 0
.if CASE == 0
  v_mov_b32 v32, 0x7f
.elseif CASE == 1
  v_mov_b32 v33, 0x7f
.else
  v_mfma_f32_16x16x32_bf16 v[32:35], v[36:39], v[40:43], 0
.endif
  PAD WAITS
  v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[16:23], v[24:31], v[0:3], v32, v33
KEND
