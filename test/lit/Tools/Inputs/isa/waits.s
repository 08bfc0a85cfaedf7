// s_waitcnt before every use of a loaded register (vmcnt retires vector
// memory in issue order; scalar loads retire out of order, so only
// lgkmcnt(0) covers one), and before LDS is read or published after an
// LDS DMA (counted in vmcnt) or a ds_write (lgkmcnt).
// CASE 0: a buffer load, then a VALU reads it (WAIT 1: after vmcnt(0));
// CASE 1: two loads, s_waitcnt vmcnt(1), then a VALU reads v[READ] (1: the
//         first load's register, 2: the second's);
// CASE 2: two s_loads, s_waitcnt lgkmcnt(WAIT), a VALU reads the first;
// CASE 3: M0, M0PAD wait states, an LDS DMA, then s_barrier and ds_read,
//         with s_waitcnt vmcnt(0) before the barrier (WAIT 1), between
//         them (WAIT 2) or nowhere (WAIT 0);
// CASE 4: a VALU overwrites a load's register (WAIT 1: after vmcnt(0));
// CASE 5: a ds_write, then s_barrier (WAIT 1: after lgkmcnt(0));
// CASE 6: a load, then a branch around the s_waitcnt vmcnt(0) to the VALU
//         that reads it: one path does not wait (WAIT 1: wait before the
//         branch).
.include "kernel.inc"
KBEGIN
.if CASE == 0
  buffer_load_dword v1, v0, s[4:7], 0 offen
.if WAIT
  s_waitcnt vmcnt(0)
.endif
  v_mov_b32 v2, v1
.elseif CASE == 1
  buffer_load_dword v1, v0, s[4:7], 0 offen
  buffer_load_dword v2, v0, s[4:7], 0 offen offset:64
  s_waitcnt vmcnt(1)
  v_mov_b32 v3, v[READ]
.elseif CASE == 2
  s_load_dword s8, s[0:1], 0x0
  s_load_dword s9, s[0:1], 0x4
  s_waitcnt lgkmcnt(WAIT)
  v_mov_b32 v0, s8
.elseif CASE == 3
  s_mov_b32 m0, s10
  PAD M0PAD
  buffer_load_dword v1, s[4:7], 0 offen lds
.if WAIT == 1
  s_waitcnt vmcnt(0)
.endif
  s_barrier
.if WAIT == 2
  s_waitcnt vmcnt(0)
.endif
  ds_read_b32 v2, v3
  s_waitcnt lgkmcnt(0)
.elseif CASE == 4
  buffer_load_dword v1, v0, s[4:7], 0 offen
.if WAIT
  s_waitcnt vmcnt(0)
.endif
  v_mov_b32 v1, 0
.elseif CASE == 5
  ds_write_b32 v0, v1
.if WAIT
  s_waitcnt lgkmcnt(0)
.endif
  s_barrier
.else
  s_cmp_eq_u32 s0, 0
  buffer_load_dword v1, v0, s[4:7], 0 offen
.if WAIT
  s_waitcnt vmcnt(0)
.endif
  s_cbranch_scc0 .Luse
  s_waitcnt vmcnt(0)
.Luse:
  v_mov_b32 v2, v1
.endif
KEND
