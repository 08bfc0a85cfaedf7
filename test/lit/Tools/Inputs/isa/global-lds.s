// The global form of the LDS DMA, global_load_lds_dwordx4: no destination
// VGPR, the LDS address in M0, counted in vmcnt. M0PAD s_nops after the
// M0 write; with WAIT, s_waitcnt vmcnt(0) before the barrier that
// publishes the LDS and the ds_read after it.
.include "kernel.inc"
KBEGIN
  s_mov_b32 m0, s10
  PAD M0PAD
  global_load_lds_dwordx4 v[2:3], off
.if WAIT
  s_waitcnt vmcnt(0)
.endif
  s_barrier
  ds_read_b128 v[4:7], v1
  s_waitcnt lgkmcnt(0)
KEND
