// PR 126132: a VALU (or a load) writing a VGPR an XDL MFMA writes needs
// 5/8/12/20 wait states on gfx950 for 2/4/8/16 passes. SrcC is the constant
// 0, so no MFMA reads v0 (no WAR rule). PASSES picks the MFMA; LOAD 1
// overwrites with a buffer load instead of v_mov.
.include "kernel.inc"
KBEGIN
.if PASSES == 2
  v_mfma_f32_4x4x4_16b_bf16 v[0:3], v[4:5], v[6:7], 0
.elseif PASSES == 4
  v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], 0
.elseif PASSES == 8
  v_mfma_f32_32x32x16_bf16 v[0:15], v[16:19], v[20:23], 0
.else
  v_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], 0, v32, v33
.endif
  PAD WAITS
.if LOAD
  buffer_load_dword v0, v40, s[4:7], 0 offen
  s_waitcnt vmcnt(0)
.else
  v_mov_b32 v0, 0
.endif
KEND
