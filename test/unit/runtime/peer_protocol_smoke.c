/* The peer protocol header is valid C99 (built with -pedantic -Werror) and
 * gives an engine the sizes and word indices it needs. Expected values are
 * worked out by hand from docs/families.md: fixed words 0..15, two banks of
 * L counts, the compact table and cursors (2 x 2 banks of ep x L), then
 * 2 banks x 2 stages x 8 queue counters. */
#include "moec/abi/peer_protocol.h"

#include <stdio.h>

static int failures = 0;

static void expect(const char *what, int64_t got, int64_t want) {
  if (got != want) {
    printf("%s: got %lld, want %lld\n", what, (long long)got, (long long)want);
    ++failures;
  }
}

int main(void) {
  /* Flash EP4: 96 local experts, 4 ranks. */
  expect("control words", moec_peer_control_words(96, 4),
         16 + 2 * 96 + 4 * 4 * 96 + 32);
  expect("control bytes", moec_peer_control_bytes(96, 4),
         4 * (16 + 2 * 96 + 4 * 4 * 96 + 32));
  expect("recv_meta bytes", moec_peer_recv_meta_bytes(96 * 4096),
         96 * 4096 * 2 * 4);
  expect("overflow word", MOEC_PEER_OVERFLOW, 2);
  expect("count bank of epoch 3", moec_peer_count_bank(3, 96), 16 + 96);
  /* Source counts follow the two count banks; cursors follow their two
   * banks; queues follow the cursors. */
  expect("source count word", moec_peer_source_count_word(1, 2, 5, 96, 4),
         16 + 2 * 96 + (4 + 2) * 96 + 5);
  expect("cursor word", moec_peer_cursor_word(0, 3, 7, 96, 4),
         16 + 2 * 96 + 2 * 4 * 96 + 3 * 96 + 7);
  expect("queue word", moec_peer_queue_word(1, 1, 4, 96, 4),
         16 + 2 * 96 + 4 * 4 * 96 + (2 + 1) * 8 + 4);
  expect("last queue word is the last word",
         moec_peer_queue_word(1, 1, MOEC_PEER_MAX_WORK_SHARDS - 1, 96, 4),
         moec_peer_control_words(96, 4) - 1);
  {
    /* The symmetric buffer of Pro EP8, compact 16384 (the largest shipped
     * class: 599,040 receive rows of H 7168, 48 local experts, top-6),
     * region by region, each rounded up to 256 bytes by hand: control
     * 4 x (16 + 96 + 4 x 8 x 48 + 32) = 6,720 -> 6,912; combine rows
     * 16384 x 6 x 7168 x 2 = 1,409,286,144 (a multiple of 256); metadata
     * 599,040 x 8 = 4,792,320 (= 18,720 x 256); scales 599,040 x 224 =
     * 134,184,960 (= 524,160 x 256); receive rows 599,040 x 7168. */
    moec_peer_buffer_layout pro =
        moec_peer_buffer_layout_of(48, 8, 599040, 7168, 6, 16384);
    expect("pro control", pro.control, 0);
    expect("pro combine rows", pro.combine_rows, 6912);
    expect("pro recv_meta", pro.recv_meta, 6912 + 1409286144LL);
    expect("pro recv_scale", pro.recv_scale, 6912 + 1409286144LL + 4792320);
    expect("pro recv_a", pro.recv_a,
           6912 + 1409286144LL + 4792320 + 134184960LL);
    expect("pro bytes", pro.bytes,
           6912 + 1409286144LL + 4792320 + 134184960LL + 599040LL * 7168);
    /* Every region starts below 2^31 (the kernels' 32-bit index), though
     * the buffer is past 4 GB. */
    expect("pro recv_a below 2^31", pro.recv_a < 2147483647LL, 1);
    expect("pro combine offset from the expert counts alone",
           moec_peer_combine_rows_offset(48, 8), pro.combine_rows);
  }
  {
    /* A small odd shape: every region rounded up. Control 4 x (16 + 4 + 4
     * x 2 x 2 + 32) = 272 -> 512; combine 3 x 2 x 64 x 2 = 768; metadata
     * 10 x 8 = 80 -> 256; scales 10 x 2 = 20 -> 256; rows 640 -> 768. */
    moec_peer_buffer_layout small = moec_peer_buffer_layout_of(2, 2, 10, 64, 2, 3);
    expect("small combine rows", small.combine_rows, 512);
    expect("small recv_meta", small.recv_meta, 512 + 768);
    expect("small recv_scale", small.recv_scale, 512 + 768 + 256);
    expect("small recv_a", small.recv_a, 512 + 768 + 256 + 256);
    expect("small bytes", small.bytes, 512 + 768 + 256 + 256 + 768);
  }
  {
    /* FP8 payload rows: H codes + H/32 scales, rounded up to 16 bytes by
     * hand: 7168 + 224 = 7,392 (= 462 x 16); 5120 + 160 = 5,280; 64 + 2
     * = 66 -> 80. Each fits the BF16 row slot of 2 x H bytes. The bytes
     * sent per route: 7,392 instead of 14,336. */
    expect("fp8 row 7168", moec_peer_fp8_row_bytes(7168), 7392);
    expect("fp8 row 5120", moec_peer_fp8_row_bytes(5120), 5280);
    expect("fp8 row 64", moec_peer_fp8_row_bytes(64), 80);
    expect("fp8 row fits the slot", moec_peer_fp8_row_bytes(64) <= 2 * 64, 1);
    expect("payload bytes fp8", moec_peer_payload_bytes(7168, 1), 7392);
    expect("payload bytes bf16", moec_peer_payload_bytes(7168, 0), 14336);
  }
  if (failures == 0)
    printf("peer protocol: ok\n");
  return failures == 0 ? 0 : 1;
}
