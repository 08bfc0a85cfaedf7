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
  if (failures == 0)
    printf("peer protocol: ok\n");
  return failures == 0 ? 0 : 1;
}
