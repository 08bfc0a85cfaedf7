// Minimal cases of rules and counting details the ISA checks must get
// right, one kernel per CASE; the isa-*.test naming this file says what
// must be found and why.
// With --defsym PAD=N, cases 0, 1 and 5 have s_nop N (N + 1 wait states)
// between producer and consumer.
.include "kernel.inc"
.macro PADDING
.ifdef PAD
  s_nop PAD
.endif
.endm
KBEGIN
.if CASE == 0
  v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[8:15], v[16:23], a[0:3], v24, v25
  PADDING
  v_mfma_scale_f32_16x16x128_f8f6f4 a[0:3], v[8:11], v[16:19], a[0:3], v24, v25 cbsz:4 blgp:4
.elseif CASE == 1
  v_mfma_f32_4x4x4_16b_bf16 a[0:3], v[4:5], v[6:7], a[0:3]
  PADDING
  v_mfma_f32_4x4x4_16b_bf16 a[0:3], v[8:9], v[10:11], a[0:3]
.elseif CASE == 2
  v_mov_b32 v32, 0x7f
  s_nop 16
  v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[16:23], v[24:31], v[0:3], v32, v33
.elseif CASE == 3
.Ltop:
  v_add_f32 v40, v0, v1
  v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], v[0:15]
  s_cbranch_scc1 .Ltop
.elseif CASE == 4
  buffer_load_dword v1, v0, s[4:7], 0 offen
  v_add_f32 v2, v1, v1
.else
  v_dot2_f32_f16 v3, v0, v1, v2
  PADDING
  v_add_f32 v4, v3, v3
.endif
KEND
