//===- weights_bench.cpp - weight preparation throughput --------*- C++ -*-===//
//
// Times moec_prepare_expert_weights on the Flash EP4 expert slice of one
// layer (96 experts: W13 [4608, 2560] + W2 [5120, 1152] bytes of E2M1 pairs,
// with their E8M0 scales [4608, 160] and [5120, 72]) from the checkpoint
// layout and from AITER's a8w4 and CK 16x16 preparations, with 1 and 2
// threads. GB/s counts the bytes written (weights and scales, 10^9 bytes
// per GB); the same number of bytes is read. The output buffers are
// touched once before the timing. The input bytes are random: the
// transforms are permutations, whose speed does not depend on the values.
// Usage:
//   moec-weights-bench [repetitions]   (default 3; the best is reported)
//
//===----------------------------------------------------------------------===//
#include "moec/moec_runtime.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

moec_tensor_t tensor(const void *data, int64_t a, int64_t b, int64_t c) {
  moec_tensor_t t{};
  t.data = data;
  t.ndim = 3;
  t.shape[0] = a;
  t.shape[1] = b;
  t.shape[2] = c;
  t.dtype = "uint8";
  return t;
}

void fillRandom(std::vector<uint8_t> &bytes, uint64_t seed, bool scales) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t v = x;
    for (size_t j = 0; j < 8 && i + j < bytes.size(); ++j, v >>= 8)
      bytes[i + j] = scales ? uint8_t(110 + (v & 15)) : uint8_t(v);
  }
}

} // namespace

int main(int argc, char **argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 3;
  const int64_t E = 96, H = 5120, I = 2304;
  moec_weight_layout_t layout{uint32_t(H), uint32_t(I), uint32_t(E), 0, 0};
  moec_weight_sizes_t sizes{};
  if (moec_weight_sizes(&layout, &sizes) != MOEC_STATUS_OK) {
    std::fprintf(stderr, "%s\n", moec_last_error_message());
    return 1;
  }
  // One input serves every source: the AITER scale shapes equal the
  // checkpoint's here (H/32 = 160 and I/32 = 72 are multiples of 8).
  std::vector<uint8_t> w13(sizes.w13), w13s(sizes.w13_scale), w2(sizes.w2),
      w2s(sizes.w2_scale);
  fillRandom(w13, 1, false);
  fillRandom(w13s, 2, true);
  fillRandom(w2, 3, false);
  fillRandom(w2s, 4, true);
  std::vector<uint8_t> o13(sizes.w13, 1), o13s(sizes.w13_scale, 1),
      o2(sizes.w2, 1), o2s(sizes.w2_scale, 1);
  const double bytes =
      double(sizes.w13 + sizes.w13_scale + sizes.w2 + sizes.w2_scale);
  std::printf("Flash EP4 expert slice: %lld experts, %.3f GB of weights and "
              "scales\n",
              (long long)E, bytes / 1e9);

  struct Source {
    const char *name;
    moec_weight_source_t source;
    uint32_t interleave;
  };
  const Source sources[] = {
      {"checkpoint (G 0)", MOEC_WEIGHT_SOURCE_CHECKPOINT, 0},
      {"checkpoint -> G 16", MOEC_WEIGHT_SOURCE_CHECKPOINT, 16},
      {"aiter a8w4 (G 0)", MOEC_WEIGHT_SOURCE_AITER, 0},
      {"aiter preshuffle 16x16", MOEC_WEIGHT_SOURCE_AITER_PRESHUFFLE_16X16, 0},
  };
  const moec_tensor_t t13 = tensor(w13.data(), E, 2 * I, H / 2),
                      t13s = tensor(w13s.data(), E, 2 * I, H / 32),
                      t2 = tensor(w2.data(), E, H, I / 2),
                      t2s = tensor(w2s.data(), E, H, I / 32);
  for (const Source &source : sources) {
    for (uint32_t threads : {1u, 2u}) {
      moec_weight_layout_t l = layout;
      l.gate_up_interleave = source.interleave;
      double best = 1e30;
      for (int r = 0; r < repetitions; ++r) {
        auto start = std::chrono::steady_clock::now();
        if (moec_prepare_expert_weights(&l, source.source, &t13, &t13s, &t2, &t2s,
                                        o13.data(), o13s.data(), o2.data(),
                                        o2s.data(), threads) != MOEC_STATUS_OK) {
          std::fprintf(stderr, "%s\n", moec_last_error_message());
          return 1;
        }
        double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
        best = seconds < best ? seconds : best;
      }
      std::printf("%-24s threads %u: %.3f s, %.2f GB/s\n", source.name, threads,
                  best, bytes / best / 1e9);
    }
  }
  return 0;
}
