//===- weights_test.cpp - weight preparation -------------------------------===//
//
// The expected layouts are built here from the documents' definitions, never
// from the code under test: the kernels' gate/up row order is the forward
// mapping of docs/families.md (checked against ref::gateRowOf / upRowOf),
// the AITER inputs come from forward shuffles written as AITER's
// view/permute sequences (docs/weight-preparation.md), and the FP8
// conversion is compared with the oracle's ref::quantizeFp8Row.
//
//===----------------------------------------------------------------------===//
#include "moec/moec_runtime.h"
#include "moec/weights.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Quantize.h"
#include "moec/reference/Stages.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace moec::rt;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes randomBytes(size_t count, uint64_t seed, uint8_t low = 0, uint8_t high = 255) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> byte(low, high);
  Bytes bytes(count);
  for (uint8_t &b : bytes)
    b = uint8_t(byte(random));
  return bytes;
}

/// Random E8M0 scales (never 0xFF) and E2M1 pairs (any byte).
Bytes randomScales(size_t count, uint64_t seed) {
  return randomBytes(count, seed, 100, 150);
}

moec_tensor_t tensor(const void *data, std::initializer_list<int64_t> shape,
                     const char *dtype) {
  moec_tensor_t t{};
  t.data = data;
  t.ndim = uint32_t(shape.size());
  size_t i = 0;
  for (int64_t d : shape)
    t.shape[i++] = d;
  t.dtype = dtype;
  return t;
}

/// The forward row map of docs/families.md: logical gate row j is physical
/// (j / G) 2G + j % G and up row j that + G; G = 0: j and I + j.
int64_t gateRow(int64_t I, int64_t G, int64_t j) {
  return G == 0 ? j : (j / G) * 2 * G + j % G;
}
int64_t upRow(int64_t I, int64_t G, int64_t j) {
  return G == 0 ? I + j : gateRow(I, G, j) + G;
}

/// torch's x.view(dims).permute(perm).contiguous() on bytes.
Bytes permuteCopy(const Bytes &src, const std::vector<int64_t> &dims,
                  const std::vector<int> &perm) {
  const size_t n = dims.size();
  std::vector<int64_t> srcStride(n), outDims(n);
  int64_t total = 1;
  for (size_t i = n; i-- > 0;) {
    srcStride[i] = total;
    total *= dims[i];
  }
  REQUIRE(size_t(total) == src.size());
  for (size_t i = 0; i < n; ++i)
    outDims[i] = dims[perm[i]];
  Bytes out(src.size());
  std::vector<int64_t> index(n, 0);
  for (int64_t o = 0; o < total; ++o) {
    int64_t s = 0;
    for (size_t i = 0; i < n; ++i)
      s += index[i] * srcStride[perm[i]];
    out[o] = src[s];
    for (size_t i = n; i-- > 0;) {
      if (++index[i] < outDims[i])
        break;
      index[i] = 0;
    }
  }
  return out;
}

// AITER's shuffles (aiter/ops/shuffle.py at ROCm/aiter e4048607), forward.

/// shuffle_weight(x, layout=(16, 16)) on uint8 [E, N, Kb]: IN = IK = 16,
/// BK = 32, K = 16; view(-1, N/16, 16, Kb/32, 2, 16).permute(0,1,3,4,2,5).
Bytes aiterShuffleWeight16x16(const Bytes &x, int64_t E, int64_t N, int64_t Kb) {
  return permuteCopy(x, {E, N / 16, 16, Kb / 32, 2, 16}, {0, 1, 3, 4, 2, 5});
}

/// shuffle_weight_a16w4(x, 16, gate_up) = shuffle_weight(is_guinterleave):
/// NLane 16, KPack 16, KLane 4, K0 = Kb / 64; gate_up: N = N / 2,
/// view(E, 2, N0, 16, K0, 4, 16).permute(0, 2, 1, 4, 5, 3, 6); else
/// view(E, N0, 16, K0, 4, 16).permute(0, 1, 3, 4, 2, 5).
Bytes aiterShuffleWeightA16w4(const Bytes &x, int64_t E, int64_t N, int64_t Kb,
                              bool gateUp) {
  if (gateUp)
    return permuteCopy(x, {E, 2, N / 2 / 16, 16, Kb / 64, 4, 16},
                       {0, 2, 1, 4, 5, 3, 6});
  return permuteCopy(x, {E, N / 16, 16, Kb / 64, 4, 16}, {0, 1, 3, 4, 2, 5});
}

/// e8m0_shuffle = shuffle_scale(src) without is_guinterleave: src [m, n]
/// copied into torch.empty([roundup(m, 256), roundup(n, 8)]) (the padding
/// is whatever memory held: random here), then
/// view(sm/32, 2, 16, sn/8, 2, 4).permute(0, 3, 5, 2, 4, 1).
Bytes aiterE8m0Shuffle(const Bytes &src, int64_t m, int64_t n, int64_t &sm,
                       int64_t &sn) {
  sm = (m + 255) / 256 * 256;
  sn = (n + 7) / 8 * 8;
  Bytes padded = randomBytes(size_t(sm * sn), 999);
  for (int64_t r = 0; r < m; ++r)
    std::memcpy(&padded[r * sn], &src[r * n], size_t(n));
  return permuteCopy(padded, {sm / 32, 2, 16, sn / 8, 2, 4}, {0, 3, 5, 2, 4, 1});
}

/// shuffle_scale(src, E, is_guinterleave=True, gate_up): src [E n, k]; k
/// padded to a multiple of 8 with 0x7F; K1 = k / 8, N1 = n / 32; gate_up:
/// view(E, 2, N1, 16, K1, 2, 4).permute(0, 2, 4, 6, 3, 5, 1); else
/// view(E, N1, 2, 16, K1, 2, 4).permute(0, 1, 4, 6, 3, 5, 2).
Bytes aiterShuffleScaleA16w4(const Bytes &src, int64_t E, int64_t n, int64_t k,
                             bool gateUp, int64_t &kPadded) {
  kPadded = (k + 7) / 8 * 8;
  Bytes padded(size_t(E * n * kPadded), 0x7F);
  for (int64_t r = 0; r < E * n; ++r)
    std::memcpy(&padded[r * kPadded], &src[r * k], size_t(k));
  if (gateUp)
    return permuteCopy(padded, {E, 2, n / 32, 16, kPadded / 8, 2, 4},
                       {0, 2, 4, 6, 3, 5, 1});
  return permuteCopy(padded, {E, n / 32, 2, 16, kPadded / 8, 2, 4},
                     {0, 1, 4, 6, 3, 5, 2});
}

/// Checkpoint-layout MXFP4 experts, seeded.
struct Checkpoint {
  int64_t E, H, I; ///< I: the checkpoint's (unpadded) intermediate
  Bytes w13, w13Scale, w2, w2Scale;
  Checkpoint(int64_t e, int64_t h, int64_t i, uint64_t seed)
      : E(e), H(h), I(i), w13(randomBytes(size_t(e * 2 * i * h / 2), seed)),
        w13Scale(randomScales(size_t(e * 2 * i * h / 32), seed + 1)),
        w2(randomBytes(size_t(e * h * i / 2), seed + 2)),
        w2Scale(randomScales(size_t(e * h * i / 32), seed + 3)) {}
};

struct Prepared {
  Bytes w13, w13Scale, w2, w2Scale;
  explicit Prepared(const moec_weight_layout_t &layout) {
    moec_weight_sizes_t sizes{};
    REQUIRE(moec_weight_sizes(&layout, &sizes) == MOEC_STATUS_OK);
    // Filled with a marker so that unwritten bytes show.
    w13.assign(sizes.w13, 0xA5);
    w13Scale.assign(sizes.w13_scale, 0xA5);
    w2.assign(sizes.w2, 0xA5);
    w2Scale.assign(sizes.w2_scale, 0xA5);
  }
};

/// The kernels' layout built from the definition: padded gate/up rows and
/// W2 columns are zero codes with scale 127 (2^0).
Prepared expectedLayout(const moec_weight_layout_t &layout, const Checkpoint &c) {
  Prepared p(layout);
  const int64_t E = c.E, H = c.H, I = layout.intermediate, Ic = c.I,
                G = layout.gate_up_interleave;
  std::fill(p.w13.begin(), p.w13.end(), 0);
  std::fill(p.w13Scale.begin(), p.w13Scale.end(), 127);
  std::fill(p.w2.begin(), p.w2.end(), 0);
  std::fill(p.w2Scale.begin(), p.w2Scale.end(), 127);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < Ic; ++j)
      for (int half = 0; half < 2; ++half) {
        const int64_t dst = e * 2 * I + (half ? upRow(I, G, j) : gateRow(I, G, j));
        const int64_t src = e * 2 * Ic + half * Ic + j;
        for (int64_t b = 0; b < H / 2; ++b)
          p.w13[dst * H / 2 + b] = c.w13[src * H / 2 + b];
        for (int64_t b = 0; b < H / 32; ++b)
          p.w13Scale[dst * H / 32 + b] = c.w13Scale[src * H / 32 + b];
      }
  for (int64_t r = 0; r < E * H; ++r) {
    for (int64_t b = 0; b < Ic / 2; ++b)
      p.w2[r * I / 2 + b] = c.w2[r * Ic / 2 + b];
    for (int64_t b = 0; b < Ic / 32; ++b)
      p.w2Scale[r * I / 32 + b] = c.w2Scale[r * Ic / 32 + b];
  }
  return p;
}

moec_status_t prepare(const moec_weight_layout_t &layout, moec_weight_source_t source,
                      const moec_tensor_t &w13, const moec_tensor_t &w13Scale,
                      const moec_tensor_t &w2, const moec_tensor_t &w2Scale,
                      Prepared &out, uint32_t threads) {
  return moec_prepare_expert_weights(&layout, source, &w13, &w13Scale, &w2,
                                     &w2Scale, out.w13.data(), out.w13Scale.data(),
                                     out.w2.data(), out.w2Scale.data(), threads);
}

void requireSame(const Prepared &a, const Prepared &b) {
  REQUIRE(a.w13 == b.w13);
  REQUIRE(a.w13Scale == b.w13Scale);
  REQUIRE(a.w2 == b.w2);
  REQUIRE(a.w2Scale == b.w2Scale);
}

} // namespace

TEST_CASE("the forward row map agrees with the oracle's gateRowOf / upRowOf",
          "[weights]") {
  for (int64_t G : {0, 1, 16, 32})
    for (int64_t j = 0; j < 128; ++j) {
      moec::ref::GluConfig glu;
      glu.interleave = G;
      REQUIRE(gateRow(128, G, j) == moec::ref::gateRowOf(glu, 128, j));
      REQUIRE(upRow(128, G, j) == moec::ref::upRowOf(glu, 128, j));
    }
}

TEST_CASE("checkpoint experts land in the kernels' layout, element for element",
          "[weights]") {
  const int64_t E = 3, H = 384;
  struct Case { int64_t I, Ic, G; };
  for (Case k : {Case{256, 256, 0}, Case{256, 256, 16}, Case{256, 256, 32},
                 Case{256, 128, 16}, Case{256, 192, 0}, Case{256, 160, 32}}) {
    CAPTURE(k.I, k.Ic, k.G);
    Checkpoint c(E, H, k.Ic, 11 + uint64_t(k.Ic + k.G));
    moec_weight_layout_t layout{uint32_t(H), uint32_t(k.I), uint32_t(E),
                                uint32_t(k.G), 0};
    Prepared expected = expectedLayout(layout, c);
    for (uint32_t threads : {1u, 2u, 5u}) {
      Prepared got(layout);
      REQUIRE(prepare(layout, MOEC_WEIGHT_SOURCE_CHECKPOINT,
                      tensor(c.w13.data(), {E, 2 * k.Ic, H / 2}, "uint8"),
                      tensor(c.w13Scale.data(), {E, 2 * k.Ic, H / 32}, "float8_e8m0fnu"),
                      tensor(c.w2.data(), {E, H, k.Ic / 2}, "float4_e2m1fn_x2"),
                      tensor(c.w2Scale.data(), {E, H, k.Ic / 32}, "uint8"), got,
                      threads) == MOEC_STATUS_OK);
      requireSame(got, expected);
    }
  }
}

TEST_CASE("padding is exactly zero", "[weights]") {
  // Flash TP4: I' 576 padded to 640, G = 16 (H small here).
  const int64_t E = 2, H = 64, I = 640, Ic = 576, G = 16;
  Checkpoint c(E, H, Ic, 5);
  moec_weight_layout_t layout{uint32_t(H), uint32_t(I), uint32_t(E), uint32_t(G), 0};
  Prepared got(layout);
  REQUIRE(prepare(layout, MOEC_WEIGHT_SOURCE_CHECKPOINT,
                  tensor(c.w13.data(), {E, 2 * Ic, H / 2}, "uint8"),
                  tensor(c.w13Scale.data(), {E, 2 * Ic, H / 32}, "uint8"),
                  tensor(c.w2.data(), {E, H, Ic / 2}, "uint8"),
                  tensor(c.w2Scale.data(), {E, H, Ic / 32}, "uint8"), got,
                  0) == MOEC_STATUS_OK);
  // Decoded value of every padded element: E2M1 code x 2^(scale - 127).
  auto value = [](const Bytes &packed, const Bytes &scales, int64_t row,
                  int64_t k, int64_t depth) {
    uint8_t byte = packed[row * depth / 2 + k / 2];
    uint8_t code = (k % 2) ? byte >> 4 : byte & 0xF;
    return moec::ref::decodeE2M1(code) *
           moec::ref::decodeE8M0(scales[row * depth / 32 + k / 32]);
  };
  int64_t checked = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = Ic; j < I; ++j)
      for (int64_t row : {gateRow(I, G, j), upRow(I, G, j)})
        for (int64_t k = 0; k < H; ++k, ++checked) {
          double v = value(got.w13, got.w13Scale, e * 2 * I + row, k, H);
          REQUIRE(v == 0.0);
          REQUIRE_FALSE(std::signbit(v));
        }
  for (int64_t r = 0; r < E * H; ++r)
    for (int64_t k = Ic; k < I; ++k, ++checked)
      REQUIRE(value(got.w2, got.w2Scale, r, k, I) == 0.0);
  REQUIRE(checked == E * (I - Ic) * 2 * H + E * H * (I - Ic));
  // And the unpadded rows are not all zero (the data is random).
  int64_t nonzero = 0;
  for (int64_t k = 0; k < H; ++k)
    nonzero += value(got.w13, got.w13Scale, gateRow(I, G, 0), k, H) != 0.0;
  REQUIRE(nonzero > 0);
}

TEST_CASE("separate gate and up tensors give the combined result", "[weights]") {
  const int64_t E = 2, H = 128, I = 256, Ic = 224, G = 16;
  Checkpoint c(E, H, Ic, 21);
  Bytes gate, gateScale, up, upScale;
  for (int64_t e = 0; e < E; ++e) {
    auto rows = [&](const Bytes &src, int64_t width, int64_t first, Bytes &dst) {
      dst.insert(dst.end(), src.begin() + (e * 2 * Ic + first) * width,
                 src.begin() + (e * 2 * Ic + first + Ic) * width);
    };
    rows(c.w13, H / 2, 0, gate);
    rows(c.w13, H / 2, Ic, up);
    rows(c.w13Scale, H / 32, 0, gateScale);
    rows(c.w13Scale, H / 32, Ic, upScale);
  }
  moec_weight_layout_t layout{uint32_t(H), uint32_t(I), uint32_t(E), uint32_t(G), 0};
  Prepared got(layout);
  moec_tensor_t g = tensor(gate.data(), {E, Ic, H / 2}, "uint8"),
                gs = tensor(gateScale.data(), {E, Ic, H / 32}, "uint8"),
                u = tensor(up.data(), {E, Ic, H / 2}, "uint8"),
                us = tensor(upScale.data(), {E, Ic, H / 32}, "uint8"),
                w2 = tensor(c.w2.data(), {E, H, Ic / 2}, "uint8"),
                w2s = tensor(c.w2Scale.data(), {E, H, Ic / 32}, "uint8");
  REQUIRE(moec_prepare_expert_weights_gate_up(
              &layout, &g, &gs, &u, &us, &w2, &w2s, got.w13.data(),
              got.w13Scale.data(), got.w2.data(), got.w2Scale.data(), 2) ==
          MOEC_STATUS_OK);
  requireSame(got, expectedLayout(layout, c));
}

TEST_CASE("AITER-prepared experts give the checkpoint path's result", "[weights]") {
  const int64_t E = 3, H = 384;
  struct Case { int64_t I, Ic, G; };
  // Each AITER preparation: the shuffled W13, W13 scale, W2, W2 scale and
  // the shapes the engine holds them in.
  struct Shuffled {
    Bytes w13, w13s, w2, w2s;
    std::vector<int64_t> w13sShape, w2sShape;
  };
  auto run = [&](moec_weight_source_t source,
                 Shuffled (*shuffle)(const Checkpoint &, int64_t)) {
    for (Case k : {Case{256, 256, 16}, Case{256, 128, 0}, Case{384, 256, 32}}) {
      CAPTURE(k.I, k.Ic, k.G);
      Checkpoint c(E, H, k.Ic, 31 + uint64_t(k.Ic));
      moec_weight_layout_t layout{uint32_t(H), uint32_t(k.I), uint32_t(E),
                                  uint32_t(k.G), 0};
      Prepared expected = expectedLayout(layout, c);
      Shuffled s = shuffle(c, E);
      REQUIRE(s.w13 != c.w13); // the shuffles move bytes
      auto shaped = [](const Bytes &b, const std::vector<int64_t> &shape) {
        moec_tensor_t t = tensor(b.data(), {}, "uint8");
        t.ndim = uint32_t(shape.size());
        for (size_t i = 0; i < shape.size(); ++i)
          t.shape[i] = shape[i];
        return t;
      };
      for (uint32_t threads : {1u, 2u}) {
        Prepared got(layout);
        REQUIRE(prepare(layout, source,
                        tensor(s.w13.data(), {E, 2 * k.Ic, H / 2}, "uint8"),
                        shaped(s.w13s, s.w13sShape),
                        tensor(s.w2.data(), {E, H, k.Ic / 2}, "uint8"),
                        shaped(s.w2s, s.w2sShape), got,
                        threads) == MOEC_STATUS_OK);
        requireSame(got, expected);
      }
    }
  };

  SECTION("a8w4: a16w4 shuffles, W13 gate/up interleaved") {
    run(MOEC_WEIGHT_SOURCE_AITER, [](const Checkpoint &c, int64_t E) {
      Shuffled s;
      const int64_t N13 = 2 * c.I, H = c.H;
      int64_t k13 = 0, k2 = 0;
      s.w13 = aiterShuffleWeightA16w4(c.w13, E, N13, H / 2, true);
      s.w13s = aiterShuffleScaleA16w4(c.w13Scale, E, N13, H / 32, true, k13);
      s.w2 = aiterShuffleWeightA16w4(c.w2, E, H, c.I / 2, false);
      s.w2s = aiterShuffleScaleA16w4(c.w2Scale, E, H, c.I / 32, false, k2);
      s.w13sShape = {E * N13, k13};
      s.w2sShape = {E, H, k2};
      return s;
    });
  }
  SECTION("a8w4 with W2 scales through e8m0_shuffle (rows padded to 256)") {
    run(MOEC_WEIGHT_SOURCE_AITER, [](const Checkpoint &c, int64_t E) {
      Shuffled s;
      const int64_t N13 = 2 * c.I, H = c.H;
      int64_t k13 = 0, sm = 0, sn = 0;
      s.w13 = aiterShuffleWeightA16w4(c.w13, E, N13, H / 2, true);
      s.w13s = aiterShuffleScaleA16w4(c.w13Scale, E, N13, H / 32, true, k13);
      s.w2 = aiterShuffleWeightA16w4(c.w2, E, H, c.I / 2, false);
      s.w2s = aiterE8m0Shuffle(c.w2Scale, E * H, c.I / 32, sm, sn);
      REQUIRE(sm > E * H);
      s.w13sShape = {E, N13, k13};
      s.w2sShape = {sm, sn};
      return s;
    });
  }
  SECTION("a16w4: a16w4 shuffles, gate/up not interleaved") {
    run(MOEC_WEIGHT_SOURCE_AITER_A16W4, [](const Checkpoint &c, int64_t E) {
      Shuffled s;
      const int64_t N13 = 2 * c.I, H = c.H;
      int64_t k13 = 0, k2 = 0;
      s.w13 = aiterShuffleWeightA16w4(c.w13, E, N13, H / 2, false);
      s.w13s = aiterShuffleScaleA16w4(c.w13Scale, E, N13, H / 32, false, k13);
      s.w2 = aiterShuffleWeightA16w4(c.w2, E, H, c.I / 2, false);
      s.w2s = aiterShuffleScaleA16w4(c.w2Scale, E, H, c.I / 32, false, k2);
      s.w13sShape = {E * N13, k13};
      s.w2sShape = {E * H, k2};
      return s;
    });
  }
  SECTION("CK preshuffle: shuffle_weight (16, 16) and e8m0_shuffle") {
    run(MOEC_WEIGHT_SOURCE_AITER_PRESHUFFLE_16X16, [](const Checkpoint &c, int64_t E) {
      Shuffled s;
      const int64_t N13 = 2 * c.I, H = c.H;
      int64_t sm13 = 0, sn13 = 0, sm2 = 0, sn2 = 0;
      s.w13 = aiterShuffleWeight16x16(c.w13, E, N13, H / 2);
      s.w13s = aiterE8m0Shuffle(c.w13Scale, E * N13, H / 32, sm13, sn13);
      s.w2 = aiterShuffleWeight16x16(c.w2, E, H, c.I / 2);
      s.w2s = aiterE8m0Shuffle(c.w2Scale, E * H, c.I / 32, sm2, sn2);
      s.w13sShape = {sm13, sn13};
      s.w2sShape = {sm2, sn2};
      return s;
    });
  }
}

TEST_CASE("mismatched tensors are refused naming the tensor and the shape",
          "[weights]") {
  const int64_t E = 2, H = 128, I = 256;
  Checkpoint c(E, H, I, 41);
  moec_weight_layout_t layout{uint32_t(H), uint32_t(I), uint32_t(E), 0, 0};
  Prepared got(layout);
  moec_tensor_t w13 = tensor(c.w13.data(), {E, 2 * I, H / 2}, "uint8"),
                w13s = tensor(c.w13Scale.data(), {E, 2 * I, H / 32}, "uint8"),
                w2 = tensor(c.w2.data(), {E, H, I / 2}, "uint8"),
                w2s = tensor(c.w2Scale.data(), {E, H, I / 32}, "uint8");
  auto refused = [&](const moec_tensor_t &a, const moec_tensor_t &b,
                     const moec_tensor_t &d, const moec_tensor_t &f,
                     moec_weight_source_t source = MOEC_WEIGHT_SOURCE_CHECKPOINT) {
    REQUIRE(prepare(layout, source, a, b, d, f, got, 1) ==
            MOEC_STATUS_INVALID_ARGUMENT);
    std::string message = moec_last_error_message();
    REQUIRE(message.find('\n') == std::string::npos);
    return message;
  };
  SECTION("dtype") {
    moec_tensor_t bad = w13;
    bad.dtype = "bfloat16";
    std::string m = refused(bad, w13s, w2, w2s);
    REQUIRE(m.rfind("w13: expected uint8 [2, 512, 64]", 0) == 0);
    REQUIRE(m.find("got bfloat16 [2, 512, 64]") != std::string::npos);
  }
  SECTION("shape") {
    moec_tensor_t bad = w13s;
    bad.shape[2] = 3;
    std::string m = refused(w13, bad, w2, w2s);
    REQUIRE(m.rfind("w13_scale: expected float8_e8m0fnu or uint8 [2, 512, 4]", 0) == 0);
    bad = w2s;
    bad.ndim = 2;
    REQUIRE(refused(w13, w13s, w2, bad).rfind("w2_scale: expected", 0) == 0);
  }
  SECTION("intermediate above the layout's") {
    Checkpoint big(E, H, 2 * I, 43);
    moec_tensor_t bigW2 = tensor(big.w2.data(), {E, H, I}, "uint8");
    std::string m = refused(w13, w13s, bigW2, w2s);
    REQUIRE(m.rfind("w2: expected uint8 [2, 128, 128]", 0) == 0);
  }
  SECTION("experts") {
    moec_tensor_t bad = w13;
    bad.shape[0] = 3;
    REQUIRE(refused(bad, w13s, w2, w2s).rfind("w13: expected uint8 [2, 512, 64]", 0) == 0);
  }
  SECTION("AITER scales of the checkpoint shape but unpadded columns") {
    // H / 32 = 4 columns: AITER pads them to 8.
    std::string m = refused(w13, w13s, w2, w2s, MOEC_WEIGHT_SOURCE_AITER);
    REQUIRE(m.rfind("w13_scale: expected float8_e8m0fnu or uint8 [2, 512, 8]", 0) == 0);
  }
  SECTION("null data, unknown source, bad layout") {
    moec_tensor_t bad = w2;
    bad.data = nullptr;
    REQUIRE(refused(w13, w13s, bad, w2s) == "w2: null data pointer");
    REQUIRE(prepare(layout, moec_weight_source_t(9), w13, w13s, w2, w2s, got, 1) ==
            MOEC_STATUS_INVALID_ARGUMENT);
    moec_weight_layout_t odd = layout;
    odd.gate_up_interleave = 24;
    moec_weight_sizes_t sizes;
    REQUIRE(moec_weight_sizes(&odd, &sizes) == MOEC_STATUS_INVALID_ARGUMENT);
    REQUIRE(std::string(moec_last_error_message()).find("gate_up_interleave 24") !=
            std::string::npos);
  }
}

TEST_CASE("the runtime's FP8 1x32 quantiser agrees with the oracle's",
          "[weights]") {
  for (int c = 0; c < 256; ++c) {
    double v = moec::ref::decodeFp8E4M3(uint8_t(c));
    if (std::isnan(v))
      REQUIRE(std::isnan(decodeFp8E4M3(uint8_t(c))));
    else
      REQUIRE(decodeFp8E4M3(uint8_t(c)) == v);
  }
  std::mt19937_64 random(7);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> magnitude(-40, 12);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(normal(random), magnitude(random));
    REQUIRE(encodeFp8E4M3(x) == moec::ref::encodeFp8E4M3(x));
  }
  const int64_t k = 32 * 64;
  std::vector<double> row(k);
  for (int trial = 0; trial < 50; ++trial) {
    for (int64_t b = 0; b < k / 32; ++b) {
      int exponent = magnitude(random);
      for (int64_t i = 0; i < 32; ++i)
        row[b * 32 + i] = (b % 17 == 3) ? 0.0 : std::ldexp(normal(random), exponent);
    }
    if (trial == 1)
      row[40] = std::nan("");
    if (trial == 2)
      row[70] = -INFINITY;
    Bytes codes(k), scales(k / 32), refCodes(k), refScales(k / 32);
    quantizeFp8Row1x32(row.data(), k, codes.data(), scales.data());
    moec::ref::quantizeFp8Row(row.data(), k, refCodes.data(), refScales.data());
    REQUIRE(codes == refCodes);
    REQUIRE(scales == refScales);
  }
}

namespace {

/// Random FP8 codes without NaN.
Bytes randomFp8(size_t count, uint64_t seed) {
  Bytes bytes = randomBytes(count, seed);
  for (uint8_t &b : bytes)
    if ((b & 0x7F) == 0x7F)
      b = 0x3A;
  return bytes;
}

/// The oracle's expectation for one FP8 matrix with 128x128 block scales:
/// dequantise (code x scale, exact in double), then ref::quantizeFp8Row.
void oracleConvert(const Bytes &codes, const std::vector<float> &blocks,
                   int64_t rows, int64_t cols, Bytes &outCodes, Bytes &outScales) {
  outCodes.resize(size_t(rows * cols));
  outScales.resize(size_t(rows * cols / 32));
  const int64_t bc = (cols + 127) / 128;
  std::vector<double> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k)
      row[k] = moec::ref::decodeFp8E4M3(codes[r * cols + k]) *
               double(blocks[(r / 128) * bc + k / 128]);
    moec::ref::quantizeFp8Row(row.data(), cols, &outCodes[r * cols],
                              &outScales[r * cols / 32]);
  }
}

} // namespace

TEST_CASE("the FP8 shared expert: 1x32 copied, block scales converted as the "
          "oracle quantises, gate/up order and padding",
          "[weights]") {
  const int64_t H = 320, I = 320, Ic = 288, G = 16; // 2I' = 576: 4.5 blocks of 128
  moec_weight_layout_t layout{uint32_t(H), uint32_t(I), 4, uint32_t(G), 1};
  moec_weight_sizes_t sizes{};
  REQUIRE(moec_weight_sizes(&layout, &sizes) == MOEC_STATUS_OK);
  REQUIRE(sizes.shared_w13 == uint64_t(2 * I * H));
  REQUIRE(sizes.shared_w2_scale == uint64_t(H * I / 32));
  Bytes w13 = randomFp8(size_t(2 * Ic * H), 51), w2 = randomFp8(size_t(H * Ic), 52);
  Bytes out13(sizes.shared_w13), out13s(sizes.shared_w13_scale),
      out2(sizes.shared_w2), out2s(sizes.shared_w2_scale);

  // Expected placement from the definition, given per-source-row codes and
  // scales.
  auto check = [&](const Bytes &codes13, const Bytes &scales13,
                   const Bytes &codes2, const Bytes &scales2) {
    for (int64_t j = 0; j < I; ++j)
      for (int half = 0; half < 2; ++half) {
        const int64_t dst = half ? upRow(I, G, j) : gateRow(I, G, j);
        const int64_t src = half * Ic + j;
        for (int64_t k = 0; k < H; ++k)
          REQUIRE(out13[dst * H + k] == (j < Ic ? codes13[src * H + k] : 0));
        for (int64_t b = 0; b < H / 32; ++b)
          REQUIRE(out13s[dst * H / 32 + b] ==
                  (j < Ic ? scales13[src * H / 32 + b] : 127));
      }
    for (int64_t r = 0; r < H; ++r) {
      for (int64_t k = 0; k < I; ++k)
        REQUIRE(out2[r * I + k] == (k < Ic ? codes2[r * Ic + k] : 0));
      for (int64_t b = 0; b < I / 32; ++b)
        REQUIRE(out2s[r * I / 32 + b] == (b < Ic / 32 ? scales2[r * Ic / 32 + b] : 127));
    }
  };

  SECTION("E8M0 1x32 scales are taken as they are") {
    Bytes s13 = randomScales(size_t(2 * Ic * H / 32), 53),
          s2 = randomScales(size_t(H * Ic / 32), 54);
    moec_tensor_t a = tensor(w13.data(), {2 * Ic, H}, "float8_e4m3fn"),
                  as = tensor(s13.data(), {2 * Ic, H / 32}, "float8_e8m0fnu"),
                  b = tensor(w2.data(), {H, Ic}, "float8_e4m3fn"),
                  bs = tensor(s2.data(), {H, Ic / 32}, "uint8");
    REQUIRE(moec_prepare_shared_expert(&layout, &a, &as, &b, &bs, out13.data(),
                                       out13s.data(), out2.data(), out2s.data(),
                                       2) == MOEC_STATUS_OK);
    check(w13, s13, w2, s2);
  }
  SECTION("FP32 128x128 block scales are converted like the oracle quantises") {
    for (bool powerOfTwo : {false, true}) {
      CAPTURE(powerOfTwo);
      std::mt19937_64 random(powerOfTwo ? 61 : 62);
      std::uniform_real_distribution<float> uniform(1e-4f, 4e-3f);
      std::uniform_int_distribution<int> exponent(-14, -6);
      auto blocks = [&](int64_t rows, int64_t cols) {
        std::vector<float> scales(size_t(((rows + 127) / 128) * ((cols + 127) / 128)));
        for (float &s : scales)
          s = powerOfTwo ? std::ldexp(1.0f, exponent(random)) : uniform(random);
        return scales;
      };
      std::vector<float> b13 = blocks(2 * Ic, H), b2 = blocks(H, Ic);
      Bytes c13, s13, c2, s2;
      oracleConvert(w13, b13, 2 * Ic, H, c13, s13);
      oracleConvert(w2, b2, H, Ic, c2, s2);
      moec_tensor_t a = tensor(w13.data(), {2 * Ic, H}, "float8_e4m3fn"),
                    as = tensor(b13.data(), {5, 3}, "float32"),
                    b = tensor(w2.data(), {H, Ic}, "float8_e4m3fn"),
                    bs = tensor(b2.data(), {3, 3}, "float32");
      moec_conversion_report_t report{};
      REQUIRE(moec_prepare_shared_expert_ex(&layout, &a, &as, nullptr, nullptr, &b,
                                            &bs, out13.data(), out13s.data(),
                                            out2.data(), out2s.data(), 2,
                                            &report) == MOEC_STATUS_OK);
      check(c13, s13, c2, s2);
      REQUIRE(report.converted_elements == uint64_t(2 * Ic * H + H * Ic));
      if (powerOfTwo) {
        // Power-of-two block scales and block maxima above 1e-4: exact.
        REQUIRE(report.non_power_of_two_block_scales == 0);
        REQUIRE(report.inexact_elements == 0);
        REQUIRE(report.max_relative_error == 0.0);
      } else {
        REQUIRE(report.non_power_of_two_block_scales == b13.size() + b2.size());
        REQUIRE(report.inexact_elements > 0);
        // Half an E4M3 ulp at most: 2^-4 of the value, <= 2^-4 of amax.
        REQUIRE(report.max_relative_error <= 1.0 / 16);
      }
    }
  }
  SECTION("separate gate and up tensors, and refusals") {
    Bytes s13 = randomScales(size_t(2 * Ic * H / 32), 55),
          s2 = randomScales(size_t(H * Ic / 32), 56);
    moec_tensor_t g = tensor(w13.data(), {Ic, H}, "float8_e4m3fn"),
                  gs = tensor(s13.data(), {Ic, H / 32}, "uint8"),
                  u = tensor(w13.data() + Ic * H, {Ic, H}, "float8_e4m3fn"),
                  us = tensor(s13.data() + Ic * H / 32, {Ic, H / 32}, "uint8"),
                  b = tensor(w2.data(), {H, Ic}, "float8_e4m3fn"),
                  bs = tensor(s2.data(), {H, Ic / 32}, "uint8");
    REQUIRE(moec_prepare_shared_expert_ex(&layout, &g, &gs, &u, &us, &b, &bs,
                                          out13.data(), out13s.data(), out2.data(),
                                          out2s.data(), 1, nullptr) == MOEC_STATUS_OK);
    check(w13, s13, w2, s2);

    moec_tensor_t bad = b;
    bad.dtype = "uint8";
    REQUIRE(moec_prepare_shared_expert_ex(&layout, &g, &gs, &u, &us, &bad, &bs,
                                          out13.data(), out13s.data(), out2.data(),
                                          out2s.data(), 1, nullptr) ==
            MOEC_STATUS_INVALID_ARGUMENT);
    REQUIRE(std::string(moec_last_error_message())
                .rfind("shared_w2: expected float8_e4m3fn [320, 320]", 0) == 0);
    bad = us;
    bad.dtype = "float32";
    REQUIRE(moec_prepare_shared_expert_ex(&layout, &g, &gs, &u, &bad, &b, &bs,
                                          out13.data(), out13s.data(), out2.data(),
                                          out2s.data(), 1, nullptr) ==
            MOEC_STATUS_INVALID_ARGUMENT);
    REQUIRE(std::string(moec_last_error_message())
                .rfind("shared_up_scale: expected float32 [3, 3]", 0) == 0);
    moec_weight_layout_t noShared = layout;
    noShared.shared_expert = 0;
    REQUIRE(moec_prepare_shared_expert(&noShared, &g, &gs, &b, &bs, out13.data(),
                                       out13s.data(), out2.data(), out2s.data(),
                                       1) == MOEC_STATUS_INVALID_ARGUMENT);
  }
}
