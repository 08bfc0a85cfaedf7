// PRs 197267 / 203770: a store of more than 8 bytes reads its data late; a
// VALU must not overwrite the data VGPRs within 2 wait states (literal or no
// soffset, global stores) or 1 (buffer store with an SGPR soffset).
// CASE 0: buffer_store_dwordx4 soffset 0, then WAITS, then v_mov v1;
// CASE 1: the same with soffset s8 (needs 1);
// CASE 2: global_store_dwordx4 (needs 2);
// CASE 3: buffer_store_dwordx2 (8 bytes: no hazard);
// CASE 4: a branch to two arms that each overwrite v1; the taken arm pads
//         TAKEN wait states, the fall-through arm FALL;
// CASE 5: a join: the branch target overwrites v1, reached by the taken
//         branch and by the fall-through that pads FALL; PRE pads before
//         the branch (both paths);
// CASE 6: a loop whose back edge carries the store to the VALU at its top;
//         the latch pads WAITS before the branch.
.include "kernel.inc"
KBEGIN
.if CASE == 0
  buffer_store_dwordx4 v[0:3], v4, s[4:7], 0 offen
  PAD WAITS
  v_mov_b32 v1, 0
.elseif CASE == 1
  buffer_store_dwordx4 v[0:3], v4, s[4:7], s8 offen
  PAD WAITS
  v_mov_b32 v1, 0
.elseif CASE == 2
  global_store_dwordx4 v[4:5], v[0:3], off
  PAD WAITS
  v_mov_b32 v1, 0
.elseif CASE == 3
  buffer_store_dwordx2 v[0:1], v4, s[4:7], 0 offen
  v_mov_b32 v1, 0
.elseif CASE == 4
  s_cmp_eq_u32 s0, 0
  buffer_store_dwordx4 v[0:3], v4, s[4:7], 0 offen
  s_cbranch_scc0 .Ltaken
  PAD FALL
  v_mov_b32 v1, 0
  s_branch .Lout
.Ltaken:
  PAD TAKEN
  v_mov_b32 v1, 1
.Lout:
.elseif CASE == 5
  s_cmp_eq_u32 s0, 0
  buffer_store_dwordx4 v[0:3], v4, s[4:7], 0 offen
  PAD PRE
  s_cbranch_scc0 .Ljoin
  PAD FALL
.Ljoin:
  v_mov_b32 v1, 0
.else
  s_mov_b32 s0, 4
.Ltop:
  v_mov_b32 v1, s0
  s_sub_u32 s0, s0, 1
  s_cmp_lg_u32 s0, 0
  buffer_store_dwordx4 v[0:3], v4, s[4:7], 0 offen
  PAD WAITS
  s_cbranch_scc1 .Ltop
.endif
KEND
