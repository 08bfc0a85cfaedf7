#include "NaiveOracle.h"

#include "moec/reference/Formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace naive {

using moec::ref::decodeBf16;
using moec::ref::decodeE2M1;
using moec::ref::decodeE8M0;
using moec::ref::decodeFp8E4M3;
using moec::ref::encodeFp8E4M3;

Matrix fromMxfp4(const std::vector<uint8_t> &packed,
                 const std::vector<uint8_t> &scales, int64_t expert,
                 int64_t rows, int64_t depth) {
  Matrix m;
  m.rows = rows;
  m.depth = depth;
  m.values.resize(rows * depth);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < depth; ++k) {
      int64_t element = (expert * rows + r) * depth + k;
      uint8_t byte = packed[element / 2];
      uint8_t code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
      double scale = decodeE8M0(scales[(expert * rows + r) * (depth / 32) + k / 32]);
      m.values[r * depth + k] = decodeE2M1(code) * scale;
    }
  return m;
}

Matrix fromFp8(const std::vector<uint8_t> &codes,
               const std::vector<uint8_t> &scales, int64_t rows, int64_t depth) {
  Matrix m;
  m.rows = rows;
  m.depth = depth;
  m.values.resize(rows * depth);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < depth; ++k)
      m.values[r * depth + k] = decodeFp8E4M3(codes[r * depth + k]) *
                                decodeE8M0(scales[r * (depth / 32) + k / 32]);
  return m;
}

std::vector<double> fakeQuantFp8(const std::vector<double> &values) {
  std::vector<double> out(values.size());
  for (size_t start = 0; start < values.size(); start += 32) {
    double amax = 0;
    for (size_t i = start; i < start + 32; ++i)
      amax = std::max(amax, std::fabs(values[i]));
    amax = std::max(amax, static_cast<double>(1e-4f));
    double scale = std::ldexp(1.0, -126);
    while (448.0 * scale < amax)
      scale *= 2.0;
    for (size_t i = start; i < start + 32; ++i)
      out[i] = decodeFp8E4M3(encodeFp8E4M3(values[i] / scale)) * scale;
  }
  return out;
}

std::vector<double> fakeQuantFp4(const std::vector<double> &values) {
  static const double kValues[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<double> out(values.size());
  for (size_t start = 0; start < values.size(); start += 32) {
    float amax = 0;
    for (size_t i = start; i < start + 32; ++i)
      amax = std::max(amax, static_cast<float>(std::fabs(values[i])));
    uint32_t bits;
    std::memcpy(&bits, &amax, 4);
    bits = (bits + 0x200000u) & 0xFF800000u;
    float rounded;
    std::memcpy(&rounded, &bits, 4);
    const int exponent =
        rounded == 0 ? -127
                     : std::clamp(int(std::floor(std::log2(rounded))) - 2, -127, 127);
    const double scale = std::ldexp(1.0, exponent);
    for (size_t i = start; i < start + 32; ++i) {
      const double x = std::fabs(values[i]) / scale;
      int best = 0;
      for (int c = 1; c < 8; ++c) {
        const double d = std::fabs(x - kValues[c]), bestD = std::fabs(x - kValues[best]);
        if (d < bestD || (d == bestD && c % 2 == 0))
          best = c;
      }
      out[i] = std::copysign(kValues[best] * scale, values[i]);
    }
  }
  return out;
}

std::vector<double> expertOutput(const Layer &layer, const std::vector<double> &x,
                                 int64_t expert) {
  const int64_t H = layer.hidden, I = layer.intermediate;
  const Matrix &w13 = layer.w13[expert];
  const Matrix &w2 = layer.w2[expert];
  std::vector<double> h(2 * I, 0.0);
  for (int64_t n = 0; n < 2 * I; ++n) {
    double sum = 0;
    for (int64_t k = 0; k < H; ++k)
      sum += x[k] * w13.at(n, k);
    h[n] = sum;
  }
  std::vector<double> act(I);
  for (int64_t j = 0; j < I; ++j) {
    double gate, up;
    int64_t g = layer.interleave;
    if (g == 0 || g >= I) {
      gate = h[j];
      up = h[I + j];
    } else {
      int64_t base = (j / g) * 2 * g;
      gate = h[base + j % g];
      up = h[base + g + j % g];
    }
    if (!layer.w13Bias.empty()) {
      gate += layer.w13Bias[expert][j];
      up += layer.w13Bias[expert][I + j];
    }
    if (layer.clampLimit > 0) {
      gate = std::min(gate, layer.clampLimit);
      up = std::max(-layer.clampLimit, std::min(up, layer.clampLimit));
    }
    if (layer.gptOssSwiglu)
      act[j] = gate * (1.0 / (1.0 + std::exp(-1.702 * gate))) * (up + 1.0);
    else
      act[j] = gate / (1.0 + std::exp(-gate)) * up;
  }
  if (layer.quantize)
    act = layer.fp4Intermediate ? fakeQuantFp4(act) : fakeQuantFp8(act);
  std::vector<double> y(H, 0.0);
  for (int64_t n = 0; n < H; ++n) {
    double sum = 0;
    for (int64_t j = 0; j < I; ++j)
      sum += act[j] * w2.at(n, j);
    y[n] = layer.w2Bias.empty() ? sum : sum + layer.w2Bias[expert][n];
  }
  return y;
}

std::vector<double> runLayer(const Layer &layer,
                             const std::vector<uint16_t> &hidden,
                             const std::vector<int32_t> &ids,
                             const std::vector<float> &weights, int64_t tokens,
                             int64_t topk) {
  const int64_t H = layer.hidden;
  const int64_t experts = static_cast<int64_t>(layer.w13.size());
  std::vector<double> out(tokens * H, 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> x(H);
    for (int64_t k = 0; k < H; ++k)
      x[k] = decodeBf16(hidden[t * H + k]);
    if (layer.quantize)
      x = layer.fp4Input ? fakeQuantFp4(x) : fakeQuantFp8(x);
    for (int64_t slot = 0; slot < topk; ++slot) {
      int32_t expert = ids[t * topk + slot];
      if (expert < 0 || expert >= experts)
        continue;
      std::vector<double> y = expertOutput(layer, x, expert);
      for (int64_t n = 0; n < H; ++n)
        out[t * H + n] += weights[t * topk + slot] * y[n];
    }
  }
  return out;
}

} // namespace naive
