/*===- peer_protocol.h - control words of the fused MegaMoE kernels -------===*
 *
 * The peer transport of `#moe.peer` (flash-fused configs) as data: the i32
 * words of a rank's control buffer, the packing of a receive row's
 * metadata, and the sizes an engine allocates. The code generator emits
 * its kernels from these definitions and the emulator's harness reads them,
 * so kernels, harness and engine agree by construction. The protocol
 * itself is told in docs/families.md; docs/runtime-api.md says what an
 * engine does with it.
 *
 * Valid C99 and C++17, header-only, no dependency. C++ code gets the same
 * definitions in namespace moec::peer as well.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOEC_ABI_PEER_PROTOCOL_H
#define MOEC_ABI_PEER_PROTOCOL_H

#include <stdint.h>

/* Word indices of a rank's control buffer (int32 words). The engine zeroes
 * the buffer once at allocation; the kernels never need it reset again:
 * tickets and signals only grow (compared modulo 2^32), and the banks of
 * counts, cursors and queues alternate with the launch's epoch, which the
 * kernels count themselves (MOEC_PEER_EPOCH). */
enum moec_peer_control_word {
  /* Arrival tickets of stage 1 workgroups (role = ticket % workgroups). */
  MOEC_PEER_STAGE1_TICKET = 0,
  /* +1 from every producer wave of every source rank per launch. */
  MOEC_PEER_DISPATCH_DONE = 1,
  /* +1 per route that found its expert's receive rows full. Sticky: the
   * engine reads it after the layer, treats nonzero as a failed layer and
   * clears it. */
  MOEC_PEER_OVERFLOW = 2,
  /* Arrival tickets of stage 2 waves at their end. */
  MOEC_PEER_STAGE2_TICKET = 3,
  /* +1 from every destination rank's stage 2 per launch. */
  MOEC_PEER_COMBINE_READY = 4,
  /* Compact: +1 from every planner wave of every source rank per launch,
   * once its row counts are in this rank's source-count table. */
  MOEC_PEER_COUNTS_READY = 5,
  /* The launch epoch, kept by the kernels themselves (no kernel argument,
   * so a captured graph replays correctly): the number of launches whose
   * stage 1 workgroups have all arrived. Every stage 1 workgroup (and every
   * workgroup of a `dispatch = only` kernel) reads it before it arrives and
   * works in epoch = word + 1; the last arrival of a launch advances it.
   * Stage 2 and the combine run after stage 1 on the stream and work in
   * epoch = word. */
  MOEC_PEER_EPOCH = 6,
  /* Stage 1 arrivals of the launch in flight: +1 per workgroup after it
   * has read MOEC_PEER_EPOCH; the last arrival (G, plus D with a separate
   * dispatch kernel) takes the count back to 0 and advances the epoch. */
  MOEC_PEER_STAGE1_ARRIVALS = 7,
  /* Fixed slot: two banks of per-local-expert receive counts, bank =
   * epoch & 1. Then (both transports) the compact source-count table and
   * source cursors, then the work-queue counters (see the functions
   * below). */
  MOEC_PEER_EXPERT_COUNTS = 16
};

/* Most work-queue shards of a stage (`#moe.peer` work_shards). */
#define MOEC_PEER_MAX_WORK_SHARDS 8

/* i32 words per receive row in `recv_meta`: the routing weight's FP32
 * bits, then the source route + 1, where the source route of route
 * `token * top_k + k` of rank r is r * max_tokens * top_k + that route
 * (0: no route, which is also what an out-of-range row reads). */
#define MOEC_PEER_META_WORDS 2

/* Words of a control buffer for `local_experts` experts per rank and `ep`
 * ranks (both transports use the same size): the fixed words, the count
 * banks, the compact table and cursors, and the work-queue counters. */
static inline int64_t moec_peer_control_words(int64_t local_experts,
                                              int64_t ep) {
  return MOEC_PEER_EXPERT_COUNTS + 2 * local_experts + 4 * ep * local_experts +
         2 * 2 * MOEC_PEER_MAX_WORK_SHARDS;
}

/* Bytes of one rank's control buffer (zero it once, at allocation). */
static inline int64_t moec_peer_control_bytes(int64_t local_experts,
                                              int64_t ep) {
  return 4 * moec_peer_control_words(local_experts, ep);
}

/* Bytes of one rank's `recv_meta` buffer for `receive_rows` rows (local
 * experts x capacity with the fixed-slot transport, capacity with
 * compact). */
static inline int64_t moec_peer_recv_meta_bytes(int64_t receive_rows) {
  return 4 * MOEC_PEER_META_WORDS * receive_rows;
}

/* The symmetric buffer of a rank: ONE allocation per rank (every rank's
 * at the same layout), whose base address every rank passes to the fused
 * kernels. The regions lie at these byte offsets from the base, each
 * MOEC_PEER_REGION_ALIGNMENT-aligned, in this order:
 *
 *   control       i32 [moec_peer_control_words]           offset 0
 *   combine_rows  [max_tokens x top_k] row slots of 2 x hidden bytes
 *   recv_meta     i32 [receive_rows, MOEC_PEER_META_WORDS]
 *   recv_scale    E8M0 [receive_rows, hidden / 32]
 *   recv_a        FP8 [receive_rows, hidden]              last, the largest
 *
 * Control and combine rows come first so that their offsets depend only on
 * the expert counts (the peer-rows combine knows no capacity), and the
 * receive rows last so that every region starts below 2^31 bytes even
 * when the receive rows alone pass 4 GB.
 *
 * The combine rows hold what the fused stage 2 sends back to the source
 * rank, route `token * top_k + k` in row slot `token * top_k + k`, with
 * the stage's `#moe.peer` payload:
 *   bf16  BF16 [hidden] at byte 2 * hidden * route (the weighted row);
 *   fp8   at byte moec_peer_fp8_row_bytes(hidden) * route: the weighted
 *         row as FP8 E4M3 [hidden], then its E8M0 scales [hidden / 32],
 *         one per 1x32 block (moec's activation rule, docs/numerics.md),
 *         zero padding to a 16-byte multiple.
 * The region is sized for BF16 rows whatever the payload: stage 1, which
 * knows no payload, must find the receive regions at the same offsets. */
#define MOEC_PEER_REGION_ALIGNMENT 256

/* Bytes of one combine row with the FP8 payload: `hidden` FP8 codes and
 * `hidden / 32` E8M0 scales, rounded up to 16 bytes so that every row
 * starts 16-byte aligned. At most 2 x hidden (the BF16 row) for every
 * hidden >= 32. */
static inline int64_t moec_peer_fp8_row_bytes(int64_t hidden) {
  return (hidden + hidden / 32 + 15) / 16 * 16;
}

/* Bytes one route's combine row carries over the peer link: 2 x hidden
 * (bf16 payload) or hidden + hidden / 32 (fp8 payload, padding unsent). */
static inline int64_t moec_peer_payload_bytes(int64_t hidden, int fp8) {
  return fp8 ? hidden + hidden / 32 : 2 * hidden;
}

typedef struct moec_peer_buffer_layout {
  int64_t control, combine_rows, recv_meta, recv_scale, recv_a;
  /* Bytes of the whole buffer (the end of recv_a, aligned). */
  int64_t bytes;
} moec_peer_buffer_layout;

/* `bytes` rounded up to MOEC_PEER_REGION_ALIGNMENT. */
static inline int64_t moec_peer_align(int64_t bytes) {
  return (bytes + MOEC_PEER_REGION_ALIGNMENT - 1) /
         MOEC_PEER_REGION_ALIGNMENT * MOEC_PEER_REGION_ALIGNMENT;
}

/* Byte offset of the combine rows: fixed by the expert counts alone. */
static inline int64_t moec_peer_combine_rows_offset(int64_t local_experts,
                                                    int64_t ep) {
  return moec_peer_align(4 * moec_peer_control_words(local_experts, ep));
}

/* The layout of a rank's symmetric buffer for `receive_rows` receive rows
 * (local experts x capacity with the fixed-slot transport, capacity with
 * compact) of `hidden` FP8 bytes, and `max_tokens` x `top_k` combine rows. */
static inline moec_peer_buffer_layout
moec_peer_buffer_layout_of(int64_t local_experts, int64_t ep,
                           int64_t receive_rows, int64_t hidden, int64_t top_k,
                           int64_t max_tokens) {
  moec_peer_buffer_layout layout;
  layout.control = 0;
  layout.combine_rows = moec_peer_combine_rows_offset(local_experts, ep);
  layout.recv_meta =
      layout.combine_rows + moec_peer_align(max_tokens * top_k * hidden * 2);
  layout.recv_scale =
      layout.recv_meta + moec_peer_align(4 * MOEC_PEER_META_WORDS * receive_rows);
  layout.recv_a = layout.recv_scale + moec_peer_align(receive_rows * hidden / 32);
  layout.bytes = layout.recv_a + moec_peer_align(receive_rows * hidden);
  return layout;
}

/* With work shards: the next item of `shard` of stage `stage` (0: stage 1,
 * 1: stage 2) in launch `epoch` (two banks of [2][MAX_WORK_SHARDS]). */
static inline int64_t moec_peer_queue_word(int64_t epoch, int64_t stage,
                                           int64_t shard, int64_t local_experts,
                                           int64_t ep) {
  return MOEC_PEER_EXPERT_COUNTS + 2 * local_experts + 4 * ep * local_experts +
         ((epoch & 1) * 2 + stage) * MOEC_PEER_MAX_WORK_SHARDS + shard;
}

/* Compact, on a destination: the rows source rank `source` sends to local
 * expert `expert` in launch `epoch` (two banks of [ep][local_experts]). */
static inline int64_t moec_peer_source_count_word(int64_t epoch, int64_t source,
                                                  int64_t expert,
                                                  int64_t local_experts,
                                                  int64_t ep) {
  return MOEC_PEER_EXPERT_COUNTS + 2 * local_experts +
         ((epoch & 1) * ep + source) * local_experts + expert;
}

/* Compact, on a source: the next row it writes for (destination, expert)
 * in launch `epoch` (two banks of [ep][local_experts]). */
static inline int64_t moec_peer_cursor_word(int64_t epoch, int64_t destination,
                                            int64_t expert,
                                            int64_t local_experts, int64_t ep) {
  return MOEC_PEER_EXPERT_COUNTS + 2 * local_experts + 2 * ep * local_experts +
         ((epoch & 1) * ep + destination) * local_experts + expert;
}

/* Fixed slot: the first count word of the bank launch `epoch` uses. */
static inline int64_t moec_peer_count_bank(int64_t epoch,
                                           int64_t local_experts) {
  return MOEC_PEER_EXPERT_COUNTS + (epoch & 1) * local_experts;
}

#ifdef __cplusplus
namespace moec::peer {

/// Word indices of a rank's control buffer (moec_peer_control_word).
enum ControlWord : int64_t {
  kStage1Ticket = MOEC_PEER_STAGE1_TICKET,
  kDispatchDone = MOEC_PEER_DISPATCH_DONE,
  kOverflow = MOEC_PEER_OVERFLOW,
  kStage2Ticket = MOEC_PEER_STAGE2_TICKET,
  kCombineReady = MOEC_PEER_COMBINE_READY,
  kCountsReady = MOEC_PEER_COUNTS_READY,
  kEpoch = MOEC_PEER_EPOCH,
  kStage1Arrivals = MOEC_PEER_STAGE1_ARRIVALS,
  kExpertCounts = MOEC_PEER_EXPERT_COUNTS,
};

/// Most work-queue shards of a stage.
constexpr int64_t kMaxWorkShards = MOEC_PEER_MAX_WORK_SHARDS;
/// i32 words per receive row in `recv_meta`.
constexpr int64_t kMetaWords = MOEC_PEER_META_WORDS;

/// moec_peer_control_words.
inline int64_t controlWords(int64_t localExperts, int64_t ep) {
  return moec_peer_control_words(localExperts, ep);
}
/// The regions of a rank's symmetric buffer (moec_peer_buffer_layout).
using BufferLayout = moec_peer_buffer_layout;
/// Alignment of every region of the symmetric buffer.
constexpr int64_t kRegionAlignment = MOEC_PEER_REGION_ALIGNMENT;
/// moec_peer_buffer_layout_of.
inline BufferLayout bufferLayout(int64_t localExperts, int64_t ep,
                                 int64_t receiveRows, int64_t hidden,
                                 int64_t topK, int64_t maxTokens) {
  return moec_peer_buffer_layout_of(localExperts, ep, receiveRows, hidden, topK,
                                    maxTokens);
}
/// moec_peer_fp8_row_bytes.
inline int64_t fp8RowBytes(int64_t hidden) {
  return moec_peer_fp8_row_bytes(hidden);
}
/// moec_peer_combine_rows_offset.
inline int64_t combineRowsOffset(int64_t localExperts, int64_t ep) {
  return moec_peer_combine_rows_offset(localExperts, ep);
}
/// moec_peer_queue_word.
inline int64_t queueWord(int64_t epoch, int64_t stage, int64_t shard,
                         int64_t localExperts, int64_t ep) {
  return moec_peer_queue_word(epoch, stage, shard, localExperts, ep);
}
/// moec_peer_source_count_word.
inline int64_t sourceCountWord(int64_t epoch, int64_t source, int64_t expert,
                               int64_t localExperts, int64_t ep) {
  return moec_peer_source_count_word(epoch, source, expert, localExperts, ep);
}
/// moec_peer_cursor_word.
inline int64_t cursorWord(int64_t epoch, int64_t destination, int64_t expert,
                          int64_t localExperts, int64_t ep) {
  return moec_peer_cursor_word(epoch, destination, expert, localExperts, ep);
}
/// moec_peer_count_bank.
inline int64_t countBank(int64_t epoch, int64_t localExperts) {
  return moec_peer_count_bank(epoch, localExperts);
}

} // namespace moec::peer
#endif

#endif /* MOEC_ABI_PEER_PROTOCOL_H */
