//===- OpSemantics.cpp - what every executable op computes ----------------===//
///
/// \file
/// execOp: the semantics of every op that is not control flow, over uniform
/// and per-lane values under an execution mask: integer and float
/// arithmetic (FP32 and BF16 computed in float, FP64 in double, every
/// result rounded once), casts, vector ops, loads, stores, atomics, the LDS
/// DMA, thread and block ids, raw-buffer casts and the scaled MFMA.
///
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "moec/Emulator/ScaledMfma.h"
#include "moec/reference/Formats.h"

#include "llvm/ADT/bit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

namespace moec::emu::detail {

using llvm::success;
using mlir::LogicalResult;

namespace {

/// ref::decodeFp8E4M3 of every code, computed once by it.
const double *fp8Values() {
  static const auto table = [] {
    std::array<double, 256> values;
    for (int code = 0; code < 256; ++code)
      values[size_t(code)] = ref::decodeFp8E4M3(static_cast<uint8_t>(code));
    return values;
  }();
  return table.data();
}

/// ref::encodeBf16 (nearest even; NaN to sign | 0x7FC0, overflow to
/// infinity) without its frexp / ldexp for a value that is exactly a float:
/// rounding the float's bits is that same rounding. Other values go to it.
inline uint64_t encodeBf16Fast(double value) {
  const float f = static_cast<float>(value);
  if (!(static_cast<double>(f) == value)) // NaN, or not a float
    return ref::encodeBf16(value);
  uint32_t u = llvm::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) >= 0x7F800000u) // infinity
    return ref::encodeBf16(value);
  u += 0x7FFFu + ((u >> 16) & 1);
  return u >> 16;
}

/// ref::encodeFp8E4M3(value, Saturate) without its frexp / ldexp where that
/// is easy: NaN, magnitudes from 448 up (saturated), and floats in the
/// normal range (their bits rounded to three mantissa bits, nearest even).
/// Zeros and subnormal results go to it.
inline uint64_t encodeFp8Fast(double value) {
  const uint64_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value))
    return sign | 0x7F;
  const double magnitude = std::fabs(value);
  if (magnitude >= 448.0) // rounds to 448 or above: saturated
    return sign | 0x7E;
  const float f = static_cast<float>(magnitude);
  if (!(static_cast<double>(f) == magnitude) || f < 0x1p-6f)
    return ref::encodeFp8E4M3(value, ref::Overflow::Saturate);
  uint32_t u = llvm::bit_cast<uint32_t>(f);
  u += 0x7FFFFu + ((u >> 20) & 1);
  const uint32_t exponent = (u >> 23) - 127 + 7;
  return sign | (exponent << 3) | ((u >> 20) & 7);
}

double decodeFloat(Elem elem, uint64_t bits) {
  switch (elem) {
  case Elem::F32:
    return llvm::bit_cast<float>(static_cast<uint32_t>(bits));
  case Elem::F64:
    return llvm::bit_cast<double>(bits);
  case Elem::BF16:
    // ref::decodeBf16: the upper half of a float.
    return llvm::bit_cast<float>(static_cast<uint32_t>(bits & 0xFFFF) << 16);
  case Elem::F8E4M3FN:
    return fp8Values()[bits & 0xFF];
  default:
    return 0.0;
  }
}

/// Rounds `value` once to `elem` (nearest even) and returns its bits.
uint64_t encodeFloat(Elem elem, double value) {
  switch (elem) {
  case Elem::F32:
    return llvm::bit_cast<uint32_t>(static_cast<float>(value));
  case Elem::F64:
    return llvm::bit_cast<uint64_t>(value);
  case Elem::BF16:
    return encodeBf16Fast(value);
  case Elem::F8E4M3FN:
    // The pipeline lowers truncf to FP8 with saturate-fp8-truncf: clamp to
    // +-448, then round to nearest even; NaN stays NaN.
    return encodeFp8Fast(value);
  default:
    return 0;
  }
}

/// IEEE 754-2019 maximum / minimum (arith.maximumf / minimumf): NaN if
/// either operand is NaN, and -0 orders below +0.
double ieeeMaximum(double x, double y) {
  if (std::isnan(x) || std::isnan(y))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == y)
    return std::signbit(x) ? y : x;
  return x > y ? x : y;
}
double ieeeMinimum(double x, double y) {
  if (std::isnan(x) || std::isnan(y))
    return std::numeric_limits<double>::quiet_NaN();
  if (x == y)
    return std::signbit(x) ? x : y;
  return x < y ? x : y;
}

/// Iterates the lanes a result must be computed for: lane 0 alone for a
/// uniform result, else every active lane.
template <typename F> void forLanes(bool uniform, uint64_t mask, F &&f) {
  if (uniform) {
    f(0);
    return;
  }
  for (int l = 0; l < kLanes; ++l)
    if (mask >> l & 1)
      f(l);
}

/// An elementwise op's inputs (`b` is `a` for an op of one operand) and
/// its result, already shaped for the lanes of `mask`: uniform when every
/// input is.
struct ElementwiseOperands {
  const RtValue &a;
  const RtValue &b;
  RtValue &r;
  bool uniform;
};

/// The start every elementwise executor shares: reads `p`'s `inputs` (1 or
/// 2) operands and shapes its result of `resultLaneBytes` a lane.
ElementwiseOperands elementwiseOperands(std::vector<RtValue> &regs,
                                        const POp &p, unsigned inputs,
                                        unsigned resultLaneBytes,
                                        uint64_t mask) {
  const RtValue &a = regs[p.in[0]];
  const RtValue &b = inputs == 2 ? regs[p.in[1]] : a;
  RtValue &r = regs[p.out[0]];
  const bool uniform = a.uniform && b.uniform;
  r.shapeFor(uniform, resultLaneBytes, mask);
  return {a, b, r, uniform};
}

int firstLane(uint64_t mask) {
  for (int l = 0; l < kLanes; ++l)
    if (mask >> l & 1)
      return l;
  return 0;
}

/// memcpy with the common lane sizes as constants (inline moves).
inline void copyLane(uint8_t *dst, const uint8_t *src, unsigned bytes) {
  switch (bytes) {
  case 16: std::memcpy(dst, src, 16); return;
  case 8: std::memcpy(dst, src, 8); return;
  case 4: std::memcpy(dst, src, 4); return;
  default: std::memcpy(dst, src, bytes);
  }
}

/// memcmp(...) != 0 likewise.
inline bool differ(const uint8_t *a, const uint8_t *b, unsigned bytes) {
  switch (bytes) {
  case 16: return std::memcmp(a, b, 16) != 0;
  case 8: return std::memcmp(a, b, 8) != 0;
  case 4: return std::memcmp(a, b, 4) != 0;
  default: return std::memcmp(a, b, bytes) != 0;
  }
}

/// Applies `f` to the lanes `forLanes` names of two scalar operands of one
/// machine word `U` (a stride of 0 reads a uniform operand's lane 0).
template <typename U, typename F>
inline void wordLanes(const uint8_t *a, unsigned strideA, const uint8_t *b,
                      unsigned strideB, uint8_t *r, bool uniform,
                      uint64_t mask, F &&f) {
  auto one = [&](int l) {
    U x, y;
    std::memcpy(&x, a + size_t(l) * strideA, sizeof(U));
    std::memcpy(&y, b + size_t(l) * strideB, sizeof(U));
    const U v = f(x, y);
    std::memcpy(r + size_t(l) * sizeof(U), &v, sizeof(U));
  };
  if (uniform) {
    one(0);
  } else if (mask == kAllLanes) {
    for (int l = 0; l < kLanes; ++l)
      one(l);
  } else {
    for (uint64_t m = mask; m; m &= m - 1)
      one(__builtin_ctzll(m));
  }
}

/// arith integer ops on i32 or i64 / index scalars, the bulk of a kernel's
/// address arithmetic, without the element loop: the same results as the
/// general path. False for the ops left to it (signed divisions).
template <typename U>
bool intBinaryWord(IntOp op, const RtValue &a, const RtValue &b, RtValue &r,
                   bool uniform, uint64_t mask, bool &divZero) {
  using S = std::make_signed_t<U>;
  constexpr U bits = sizeof(U) * 8;
  const uint8_t *pa = a.bytes.data(), *pb = b.bytes.data();
  const unsigned sa = a.uniform ? 0 : sizeof(U), sb = b.uniform ? 0 : sizeof(U);
  uint8_t *pr = r.bytes.data();
  auto run = [&](auto f) { wordLanes<U>(pa, sa, pb, sb, pr, uniform, mask, f); };
  switch (op) {
  case IntOp::Add: run([](U x, U y) -> U { return x + y; }); return true;
  case IntOp::Sub: run([](U x, U y) -> U { return x - y; }); return true;
  case IntOp::Mul: run([](U x, U y) -> U { return x * y; }); return true;
  case IntOp::And: run([](U x, U y) -> U { return x & y; }); return true;
  case IntOp::Or: run([](U x, U y) -> U { return x | y; }); return true;
  case IntOp::Xor: run([](U x, U y) -> U { return x ^ y; }); return true;
  case IntOp::MinU: run([](U x, U y) -> U { return std::min(x, y); }); return true;
  case IntOp::MaxU: run([](U x, U y) -> U { return std::max(x, y); }); return true;
  case IntOp::MinS:
    run([](U x, U y) -> U { return U(std::min(S(x), S(y))); });
    return true;
  case IntOp::MaxS:
    run([](U x, U y) -> U { return U(std::max(S(x), S(y))); });
    return true;
  case IntOp::Shl: run([](U x, U y) -> U { return y >= bits ? 0 : U(x << y); }); return true;
  case IntOp::ShrU: run([](U x, U y) -> U { return y >= bits ? 0 : U(x >> y); }); return true;
  case IntOp::ShrS:
    run([](U x, U y) -> U { return U(S(x) >> std::min<U>(y, bits - 1)); });
    return true;
  case IntOp::DivU:
  case IntOp::RemU:
  case IntOp::CeilDivU: {
    U divisor;
    std::memcpy(&divisor, pb, sizeof(U));
    if (b.uniform && divisor != 0 && (divisor & (divisor - 1)) == 0) {
      // A uniform power-of-two divisor (the usual index arithmetic):
      // shifts and masks, the same results as the division.
      const unsigned shift = unsigned(__builtin_ctzll(divisor));
      const U low = divisor - 1;
      if (op == IntOp::DivU)
        run([shift](U x, U) -> U { return x >> shift; });
      else if (op == IntOp::RemU)
        run([low](U x, U) -> U { return x & low; });
      else
        run([shift, low](U x, U) -> U {
          return U((x >> shift) + ((x & low) != 0));
        });
      return true;
    }
    run([&](U x, U y) -> U {
      if (y == 0) {
        divZero = true;
        return 0;
      }
      return op == IntOp::DivU ? x / y
             : op == IntOp::RemU ? x % y
                                 : U(x / y + (x % y != 0));
    });
    return true;
  }
  default:
    return false;
  }
}

} // namespace

LogicalResult Executor::execConstant(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask) {
  auto &regs = wave.regs;
  RtValue &r = regs[p.out[0]];
  r.uniform = true;
  r.bytes = p.constant;
  return success();
}

LogicalResult Executor::execIntBinary(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask) {
  const ValueInfo &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 2, ri.laneBytes, mask);
  const RtValue &a = in.a, &b = in.b;
  RtValue &r = in.r;
  const bool uni = in.uniform;
  const unsigned w = ri.width;
  const uint64_t m = widthMask(w);
  const IntOp op = static_cast<IntOp>(p.sub);
  bool divZero = false, overflow = false;
  if (ri.count == 1 && w == ri.elemBits && (w == 64 || w == 32) &&
      (w == 64 ? intBinaryWord<uint64_t>(op, a, b, r, uni, mask, divZero)
               : intBinaryWord<uint32_t>(op, a, b, r, uni, mask, divZero))) {
    if (divZero)
      return fatal(p, "integer division by zero");
    return success();
  }
  forLanes(uni, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      const uint64_t x = getBits(a.lane(l, ri.laneBytes), ri.elemBits, e) & m;
      const uint64_t y = getBits(b.lane(l, ri.laneBytes), ri.elemBits, e) & m;
      const int64_t sx = signExtend(x, w), sy = signExtend(y, w);
      uint64_t v = 0;
      switch (op) {
      case IntOp::Add: v = x + y; break;
      case IntOp::Sub: v = x - y; break;
      case IntOp::Mul: v = x * y; break;
      case IntOp::And: v = x & y; break;
      case IntOp::Or: v = x | y; break;
      case IntOp::Xor: v = x ^ y; break;
      case IntOp::MinU: v = std::min(x, y); break;
      case IntOp::MaxU: v = std::max(x, y); break;
      case IntOp::MinS: v = static_cast<uint64_t>(std::min(sx, sy)); break;
      case IntOp::MaxS: v = static_cast<uint64_t>(std::max(sx, sy)); break;
      // Shifts by the width or more are poison in arith; give 0 (or the
      // sign fill) so a result is defined.
      case IntOp::Shl: v = y >= w ? 0 : x << y; break;
      case IntOp::ShrU: v = y >= w ? 0 : x >> y; break;
      case IntOp::ShrS:
        v = static_cast<uint64_t>(sx >> std::min<uint64_t>(y, w - 1));
        break;
      case IntOp::DivU: case IntOp::RemU: case IntOp::CeilDivU:
        if (y == 0) { divZero = true; break; }
        v = op == IntOp::DivU ? x / y : op == IntOp::RemU ? x % y
                                                          : (x + y - 1) / y;
        if (op == IntOp::CeilDivU)
          v = x / y + (x % y != 0);
        break;
      case IntOp::DivS: case IntOp::RemS: case IntOp::FloorDivS:
      case IntOp::CeilDivS: {
        if (sy == 0) { divZero = true; break; }
        if (sy == -1 && sx == signExtend(uint64_t(1) << (w - 1), w)) {
          overflow = true;
          break;
        }
        const int64_t q = sx / sy, rem = sx % sy;
        if (op == IntOp::DivS) v = static_cast<uint64_t>(q);
        else if (op == IntOp::RemS) v = static_cast<uint64_t>(rem);
        else if (op == IntOp::FloorDivS)
          v = static_cast<uint64_t>(q - ((rem != 0) && ((rem < 0) != (sy < 0))));
        else
          v = static_cast<uint64_t>(q + ((rem != 0) && ((rem < 0) == (sy < 0))));
        break;
      }
      }
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v & m);
    }
  });
  if (divZero)
    return fatal(p, "integer division by zero");
  if (overflow)
    return fatal(p, "signed division overflow");
  return success();
}

LogicalResult Executor::execCmpI(Workgroup &wg, Wave &wave, const POp &p,
                                 uint64_t mask) {
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 2, ri.laneBytes, mask);
  const RtValue &a = in.a, &b = in.b;
  RtValue &r = in.r;
  const bool uni = in.uniform;
  const unsigned w = ai.width;
  const CmpPred pred = static_cast<CmpPred>(p.sub);
  forLanes(uni, mask, [&](int l) {
    for (unsigned e = 0; e < ai.count; ++e) {
      const uint64_t x = getBits(a.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(w);
      const uint64_t y = getBits(b.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(w);
      const int64_t sx = signExtend(x, w), sy = signExtend(y, w);
      bool c = false;
      switch (pred) {
      case CmpPred::Eq: c = x == y; break;
      case CmpPred::Ne: c = x != y; break;
      case CmpPred::Slt: c = sx < sy; break;
      case CmpPred::Sle: c = sx <= sy; break;
      case CmpPred::Sgt: c = sx > sy; break;
      case CmpPred::Sge: c = sx >= sy; break;
      case CmpPred::Ult: c = x < y; break;
      case CmpPred::Ule: c = x <= y; break;
      case CmpPred::Ugt: c = x > y; break;
      case CmpPred::Uge: c = x >= y; break;
      }
      setBits(r.lane(l, ri.laneBytes), 8, e, c ? 1 : 0);
    }
  });
  return success();
}

LogicalResult Executor::execIntCast(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 1, ri.laneBytes, mask);
  const RtValue &a = in.a;
  RtValue &r = in.r;
  forLanes(a.uniform, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      uint64_t x = getBits(a.lane(l, ai.laneBytes), ai.elemBits, e) & widthMask(ai.width);
      if (p.sub == 1)
        x = static_cast<uint64_t>(signExtend(x, ai.width));
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, x & widthMask(ri.width));
    }
  });
  return success();
}

LogicalResult Executor::execBitcast(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  if (ai.laneBytes != ri.laneBytes)
    return fatal(p, "bitcast between different sizes");
  regs[p.out[0]].uniform = regs[p.in[0]].uniform;
  regs[p.out[0]].bytes = regs[p.in[0]].bytes;
  return success();
}

LogicalResult Executor::execSelect(Workgroup &wg, Wave &wave, const POp &p,
                                   uint64_t mask) {
  auto &regs = wave.regs;
  const RtValue &c = regs[p.in[0]], &a = regs[p.in[1]], &b = regs[p.in[2]];
  const ValueInfo &ri = info(p.out[0]);
  RtValue &r = regs[p.out[0]];
  if (ri.isMemRef) {
    // A memref is one descriptor: the condition may be a per-lane value
    // (say, derived from the wave id) but must agree on every active lane.
    bool pick = c.bytes[0] != 0;
    if (!c.uniform) {
      int first = -1;
      for (int l = 0; l < kLanes; ++l) {
        if (!(mask >> l & 1))
          continue;
        const bool here = c.lane(l, 1)[0] != 0;
        if (first < 0) {
          first = l;
          pick = here;
        } else if (here != pick) {
          return fatal(p, "per-lane select of memrefs whose condition "
                          "differs between lanes");
        }
      }
    }
    r = pick ? a : b;
    return success();
  }
  const bool uni = c.uniform && a.uniform && b.uniform;
  r.shapeFor(uni, ri.laneBytes, mask);
  forLanes(uni, mask, [&](int l) {
    const RtValue &pick = c.lane(l, 1)[0] ? a : b;
    copyLane(r.lane(l, ri.laneBytes), pick.lane(l, ri.laneBytes), ri.laneBytes);
  });
  return success();
}

LogicalResult Executor::execFloatBinary(Workgroup &wg, Wave &wave, const POp &p,
                                        uint64_t mask) {
  const ValueInfo &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 2, ri.laneBytes, mask);
  const RtValue &a = in.a, &b = in.b;
  RtValue &r = in.r;
  const bool uni = in.uniform;
  const FloatOp op = static_cast<FloatOp>(p.sub);
  if (ri.elem == Elem::F32) {
    // The general path's steps for F32 (decode to double, compute in
    // float, round the double result to float) with the op chosen once.
    auto run = [&](auto f) {
      forLanes(uni, mask, [&](int l) {
        const uint8_t *pa = a.lane(l, ri.laneBytes);
        const uint8_t *pb = b.lane(l, ri.laneBytes);
        uint8_t *pr = r.lane(l, ri.laneBytes);
        for (unsigned e = 0; e < ri.count; ++e) {
          float xa, ya;
          std::memcpy(&xa, pa + 4 * e, 4);
          std::memcpy(&ya, pb + 4 * e, 4);
          const double x = xa, y = ya;
          const double v = f(static_cast<float>(x), static_cast<float>(y));
          const float out = static_cast<float>(v);
          std::memcpy(pr + 4 * e, &out, 4);
        }
      });
    };
    switch (op) {
    case FloatOp::Add: run([](float x, float y) -> float { return x + y; }); break;
    case FloatOp::Sub: run([](float x, float y) -> float { return x - y; }); break;
    case FloatOp::Mul: run([](float x, float y) -> float { return x * y; }); break;
    case FloatOp::Div: run([](float x, float y) -> float { return x / y; }); break;
    case FloatOp::MaxNum:
      run([](float x, float y) -> float { return std::fmax(x, y); });
      break;
    case FloatOp::MinNum:
      run([](float x, float y) -> float { return std::fmin(x, y); });
      break;
    case FloatOp::Maximum:
      run([](float x, float y) -> float {
        return static_cast<float>(ieeeMaximum(x, y));
      });
      break;
    case FloatOp::Minimum:
      run([](float x, float y) -> float {
        return static_cast<float>(ieeeMinimum(x, y));
      });
      break;
    }
    return success();
  }
  forLanes(uni, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      const double x = decodeFloat(ri.elem, getBits(a.lane(l, ri.laneBytes), ri.elemBits, e));
      const double y = decodeFloat(ri.elem, getBits(b.lane(l, ri.laneBytes), ri.elemBits, e));
      double v = 0.0;
      // F32 and BF16 compute in float (BF16 arithmetic is legalised to
      // f32 then truncated), F64 in double.
      if (ri.elem == Elem::F64) {
        switch (op) {
        case FloatOp::Add: v = x + y; break;
        case FloatOp::Sub: v = x - y; break;
        case FloatOp::Mul: v = x * y; break;
        case FloatOp::Div: v = x / y; break;
        case FloatOp::MaxNum: v = std::fmax(x, y); break;
        case FloatOp::MinNum: v = std::fmin(x, y); break;
        case FloatOp::Maximum: v = ieeeMaximum(x, y); break;
        case FloatOp::Minimum: v = ieeeMinimum(x, y); break;
        }
      } else {
        const float fx = static_cast<float>(x), fy = static_cast<float>(y);
        float f = 0.0f;
        switch (op) {
        case FloatOp::Add: f = fx + fy; break;
        case FloatOp::Sub: f = fx - fy; break;
        case FloatOp::Mul: f = fx * fy; break;
        case FloatOp::Div: f = fx / fy; break;
        case FloatOp::MaxNum: f = std::fmax(fx, fy); break;
        case FloatOp::MinNum: f = std::fmin(fx, fy); break;
        case FloatOp::Maximum: f = static_cast<float>(ieeeMaximum(fx, fy)); break;
        case FloatOp::Minimum: f = static_cast<float>(ieeeMinimum(fx, fy)); break;
        }
        v = f;
      }
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, v));
    }
  });
  return success();
}

LogicalResult Executor::execFloatUnary(Workgroup &wg, Wave &wave, const POp &p,
                                       uint64_t mask) {
  const ValueInfo &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 1, ri.laneBytes, mask);
  const RtValue &a = in.a;
  RtValue &r = in.r;
  const FloatUnaryOp op = static_cast<FloatUnaryOp>(p.sub);
  forLanes(a.uniform, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      const double x = decodeFloat(ri.elem, getBits(a.lane(l, ri.laneBytes), ri.elemBits, e));
      double v = 0.0;
      switch (op) {
      case FloatUnaryOp::Abs: v = std::fabs(x); break;
      case FloatUnaryOp::Neg: v = -x; break;
      // Correctly rounded exp2 (the double result rounded once); the
      // hardware's v_exp_f32 is within 1 ulp of it (docs/emulator.md).
      case FloatUnaryOp::Exp2: v = std::exp2(x); break;
      }
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, v));
    }
  });
  return success();
}

LogicalResult Executor::execInterleave(Workgroup &wg, Wave &wave, const POp &p,
                                       uint64_t mask) {
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 2, ri.laneBytes, mask);
  const RtValue &a = in.a, &b = in.b;
  RtValue &r = in.r;
  const bool uni = in.uniform;
  forLanes(uni, mask, [&](int l) {
    for (unsigned e = 0; e < ai.count; ++e) {
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, 2 * e,
              getBits(a.lane(l, ai.laneBytes), ai.elemBits, e));
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, 2 * e + 1,
              getBits(b.lane(l, ai.laneBytes), ai.elemBits, e));
    }
  });
  return success();
}

LogicalResult Executor::execFloatCast(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask) {
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  const ElementwiseOperands in =
      elementwiseOperands(wave.regs, p, 1, ri.laneBytes, mask);
  const RtValue &a = in.a;
  RtValue &r = in.r;
  forLanes(a.uniform, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      const double x = decodeFloat(ai.elem, getBits(a.lane(l, ai.laneBytes), ai.elemBits, e));
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, encodeFloat(ri.elem, x));
    }
  });
  return success();
}

LogicalResult Executor::execMemLoad(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  auto &regs = wave.regs;
  auto allUniform = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      if (!regs[p.in[i]].uniform)
        return false;
    return true;
  };
  const ValueInfo &mi = info(p.in[0]), &ri = info(p.out[0]);
  const MemRefDesc &mem = regs[p.in[0]].mem;
  const bool uni = allUniform(1, p.in.size());
  RtValue &r = regs[p.out[0]];
  const unsigned bytes = ri.laneBytes;
  if (!mask) {
    r.shape(uni, bytes);
    return success();
  }
  r.shapeFor(uni, bytes, mask);
  int64_t ldsAddresses[kLanes];
  // A rank-1 memref's index is the index operand itself.
  const RtValue *index1 = mi.shape.size() == 1 ? &regs[p.in[1]] : nullptr;
  forLanes(uni, mask, [&](int l) {
    const int lane = uni ? firstLane(mask) : l;
    int64_t index;
    if (index1)
      std::memcpy(&index, index1->lane(lane, 8), 8);
    else
      index = linearIndex(mi, wave, p.in, 1, lane);
    ldsAddresses[l] = mem.baseBytes + index * mi.memElemBytes;
    const uint8_t *src =
        access(p, wg, wave, lane, mem, index * mi.memElemBytes, bytes, false);
    uint8_t *dst = r.lane(l, bytes);
    if (src && mem.shared)
      sharedLoad(dst, src, bytes);
    else if (src)
      copyLane(dst, src, bytes);
    else
      std::memset(dst, 0, bytes);
  });
  // A uniform address is one broadcast dword set: no conflict.
  if (mem.space == Space::Lds && !uni)
    countBankConflicts(ldsAddresses, mask, bytes);
  return success();
}

LogicalResult Executor::execMemStore(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &vi = info(p.in[0]), &mi = info(p.in[1]);
  const RtValue &value = regs[p.in[0]];
  const MemRefDesc &mem = regs[p.in[1]].mem;
  const unsigned bytes = vi.laneBytes;
  // Every active lane stores, in lane order: with one address for all
  // lanes the highest active lane's value remains.
  int64_t ldsAddresses[kLanes];
  const RtValue *index1 = mi.shape.size() == 1 ? &regs[p.in[2]] : nullptr;
  for (int l = 0; l < kLanes; ++l) {
    if (!(mask >> l & 1))
      continue;
    int64_t index;
    if (index1)
      std::memcpy(&index, index1->lane(l, 8), 8);
    else
      index = linearIndex(mi, wave, p.in, 2, l);
    ldsAddresses[l] = mem.baseBytes + index * mi.memElemBytes;
    uint8_t *dst =
        access(p, wg, wave, l, mem, index * mi.memElemBytes, bytes, true);
    if (!dst)
      continue;
    if (mem.shared) {
      // Memory another process accesses now: atomic pieces.
      std::vector<uint8_t> now(bytes);
      sharedLoad(now.data(), dst, bytes);
      writes += differ(now.data(), value.lane(l, bytes), bytes);
      sharedStore(dst, value.lane(l, bytes), bytes);
      continue;
    }
    // Only a store that changes memory counts as a write: a wave that
    // rewrites the same value while it waits cannot release anyone.
    if (differ(dst, value.lane(l, bytes), bytes))
      ++writes;
    copyLane(dst, value.lane(l, bytes), bytes);
  }
  if (mem.space == Space::Lds)
    countBankConflicts(ldsAddresses, mask, bytes);
  return success();
}

LogicalResult Executor::execGatherToLds(Workgroup &wg, Wave &wave, const POp &p,
                                        uint64_t mask) {
  auto &regs = wave.regs;
  // Each active lane reads `bytes` at its own source index (a raw buffer's
  // range check gives zeros, as for a load) and the wave's results go to
  // LDS contiguously in lane order: lane l at the base + l * bytes, with
  // the base from one lane's destination indices. The op's definition
  // names lane 0; the backend puts the first active lane's into M0
  // (v_readfirstlane), so the two agree only when every active lane
  // passes the same base, which is required here. The write happens now:
  // the backend waits for the DMA (vmcnt) before the workgroup's next
  // barrier and before this wave's own LDS reads of it.
  const unsigned bytes = static_cast<unsigned>(p.ints[0]);
  const size_t dstAt = 1 + static_cast<size_t>(p.ints[1]);
  const ValueInfo &si = info(p.in[0]), &di = info(p.in[dstAt]);
  const MemRefDesc &src = regs[p.in[0]].mem;
  const MemRefDesc &dst = regs[p.in[dstAt]].mem;
  if (!mask)
    return success();
  const int first = firstLane(mask);
  const int64_t base = linearIndex(di, wave, p.in, dstAt + 1, first);
  for (int l = first + 1; l < kLanes; ++l)
    if ((mask >> l & 1) &&
        linearIndex(di, wave, p.in, dstAt + 1, l) != base)
      return fatal(p, "lanes " + std::to_string(first) + " and " +
                          std::to_string(l) +
                          " pass different LDS destinations; the wave "
                          "writes from one base (lane 0's by the op's "
                          "definition, the first active lane's on the "
                          "hardware)");
  uint8_t data[16];
  for (int l = 0; l < kLanes; ++l) {
    if (!(mask >> l & 1))
      continue;
    const int64_t from = linearIndex(si, wave, p.in, 1, l);
    const uint8_t *in =
        access(p, wg, wave, l, src, from * si.memElemBytes, bytes, false);
    if (in && src.shared)
      sharedLoad(data, in, bytes);
    else if (in)
      std::memcpy(data, in, bytes);
    else
      std::memset(data, 0, bytes);
    uint8_t *out = access(p, wg, wave, l, dst,
                          base * di.memElemBytes + int64_t(l) * bytes, bytes,
                          true);
    if (!out)
      continue;
    if (std::memcmp(out, data, bytes) != 0)
      ++writes;
    std::memcpy(out, data, bytes);
  }
  ++result.stats.ldsDmaOps;
  return success();
}

LogicalResult Executor::execAtomicRmw(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &vi = info(p.in[0]), &mi = info(p.in[1]);
  const RtValue &value = regs[p.in[0]];
  const MemRefDesc &mem = regs[p.in[1]].mem;
  RtValue &r = regs[p.out[0]];
  r.shape(false, vi.laneBytes);
  const unsigned bytes = vi.laneBytes;
  const AtomicOp op = static_cast<AtomicOp>(p.sub);
  // Lanes in increasing order, each a whole read-modify-write: one valid
  // serialisation of the hardware's atomics.
  for (int l = 0; l < kLanes; ++l) {
    if (!(mask >> l & 1))
      continue;
    const int64_t index = linearIndex(mi, wave, p.in, 2, l);
    uint8_t *at = access(p, wg, wave, l, mem, index * mi.memElemBytes,
                         bytes, /*isWrite=*/true, /*atomic=*/true);
    if (!at)
      continue; // result stays 0, as for an out-of-range raw load
    const uint64_t operand = getBits(value.lane(l, bytes), vi.elemBits, 0);
    const uint64_t m = widthMask(vi.width);
    // The new value from the old one: in place here, or in a
    // compare-and-swap loop on memory another process shares.
    auto apply = [&](uint64_t old) {
      const int64_t so = signExtend(old, vi.width), sv = signExtend(operand, vi.width);
      uint64_t next = 0;
      auto fp = [&](double v) { return encodeFloat(vi.elem, v); };
      const double fo = decodeFloat(vi.elem, old), fv = decodeFloat(vi.elem, operand);
      switch (op) {
      case AtomicOp::AddI: next = old + operand; break;
      case AtomicOp::MulI: next = old * operand; break;
      case AtomicOp::MaxS: next = uint64_t(std::max(so, sv)); break;
      case AtomicOp::MinS: next = uint64_t(std::min(so, sv)); break;
      case AtomicOp::MaxU: next = std::max(old & m, operand & m); break;
      case AtomicOp::MinU: next = std::min(old & m, operand & m); break;
      case AtomicOp::AndI: next = old & operand; break;
      case AtomicOp::OrI: next = old | operand; break;
      case AtomicOp::XorI: next = old ^ operand; break;
      case AtomicOp::Assign: next = operand; break;
      case AtomicOp::AddF:
        next = vi.elem == Elem::F32 ? fp(double(float(fo) + float(fv))) : fp(fo + fv);
        break;
      case AtomicOp::MaximumF: next = fp(ieeeMaximum(fo, fv)); break;
      case AtomicOp::MinimumF: next = fp(ieeeMinimum(fo, fv)); break;
      case AtomicOp::MaxNumF: next = fp(std::fmax(fo, fv)); break;
      case AtomicOp::MinNumF: next = fp(std::fmin(fo, fv)); break;
      }
      return next & m;
    };
    if (mem.shared && vi.elemBits >= 8) {
      const uint64_t old = sharedReadModifyWrite(at, bytes, apply);
      setBits(r.lane(l, bytes), vi.elemBits, 0, old);
      writes += apply(old) != old;
      uint8_t *shadow =
          memory.written(mem.buffer) + mem.baseBytes + index * mi.memElemBytes;
      for (unsigned b = 0; b < bytes; ++b)
        writes += __atomic_exchange_n(shadow + b, uint8_t(1),
                                      __ATOMIC_RELAXED) == 0;
      continue;
    }
    const uint64_t old = getBits(at, vi.elemBits, 0);
    setBits(r.lane(l, bytes), vi.elemBits, 0, old);
    setBits(at, vi.elemBits, 0, apply(old));
    // An atomic that leaves the value as it was (a spin's fetch-add of 0)
    // is not a write.
    if (getBits(at, vi.elemBits, 0) != old)
      ++writes;
    if (mem.space != Space::Lds) {
      uint8_t *shadow =
          memory.written(mem.buffer) + mem.baseBytes + index * mi.memElemBytes;
      if (std::memchr(shadow, 0, bytes))
        ++writes;
      std::memset(shadow, 1, bytes);
    }
  }
  return success();
}

LogicalResult Executor::execShuffle(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &ai = info(p.in[0]), &bi = info(p.in[1]), &ri = info(p.out[0]);
  const RtValue &a = regs[p.in[0]], &b = regs[p.in[1]];
  RtValue &r = regs[p.out[0]];
  const bool uni = a.uniform && b.uniform;
  r.shapeFor(uni, ri.laneBytes, mask);
  if (ri.elemBits % 8 == 0) {
    // Whole bytes: element copies, or two lane copies for the common
    // concatenation [0, 1, ..., n - 1].
    const unsigned eb = ri.elemBits / 8;
    bool concat = ri.count == ai.count + bi.count;
    for (unsigned e = 0; e < ri.count && concat; ++e)
      concat = p.ints[e] == int64_t(e);
    forLanes(uni, mask, [&](int l) {
      uint8_t *dst = r.lane(l, ri.laneBytes);
      const uint8_t *pa = a.lane(l, ai.laneBytes), *pb = b.lane(l, bi.laneBytes);
      if (concat) {
        copyLane(dst, pa, ai.laneBytes);
        copyLane(dst + ai.laneBytes, pb, bi.laneBytes);
        return;
      }
      for (unsigned e = 0; e < ri.count; ++e) {
        const int64_t idx = p.ints[e];
        if (idx >= 0 && idx < int64_t(ai.count))
          std::memcpy(dst + e * eb, pa + idx * eb, eb);
        else if (idx >= int64_t(ai.count))
          std::memcpy(dst + e * eb, pb + (idx - ai.count) * eb, eb);
        else
          std::memset(dst + e * eb, 0, eb); // a poison index (-1) reads 0
      }
    });
    return success();
  }
  forLanes(uni, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e) {
      const int64_t idx = p.ints[e];
      uint64_t v = 0; // a poison index (-1) reads 0
      if (idx >= 0 && idx < int64_t(ai.count))
        v = getBits(a.lane(l, ai.laneBytes), ai.elemBits, unsigned(idx));
      else if (idx >= int64_t(ai.count))
        v = getBits(b.lane(l, bi.laneBytes), bi.elemBits, unsigned(idx - ai.count));
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v);
    }
  });
  return success();
}

LogicalResult Executor::execExtract(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &ai = info(p.in[0]), &ri = info(p.out[0]);
  const RtValue &a = regs[p.in[0]];
  RtValue &r = regs[p.out[0]];
  if (p.ints[0] < 0 || p.ints[0] + ri.count > ai.count)
    return fatal(p, "position out of range");
  r.shapeFor(a.uniform, ri.laneBytes, mask);
  if (ri.elemBits % 8 == 0) {
    // Whole bytes: one copy per lane.
    const size_t from = size_t(p.ints[0]) * (ri.elemBits / 8);
    forLanes(a.uniform, mask, [&](int l) {
      copyLane(r.lane(l, ri.laneBytes), a.lane(l, ai.laneBytes) + from,
               ri.laneBytes);
    });
    return success();
  }
  forLanes(a.uniform, mask, [&](int l) {
    for (unsigned e = 0; e < ri.count; ++e)
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e,
              getBits(a.lane(l, ai.laneBytes), ai.elemBits,
                      unsigned(p.ints[0]) + e));
  });
  return success();
}

LogicalResult Executor::execInsert(Workgroup &wg, Wave &wave, const POp &p,
                                   uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &si = info(p.in[0]), &ri = info(p.out[0]);
  const RtValue &s = regs[p.in[0]], &dest = regs[p.in[1]];
  if (p.ints[0] < 0 || p.ints[0] >= int64_t(ri.count))
    return fatal(p, "position out of range");
  // The result is the destination (every lane, active or not) with one
  // element replaced, built in the result's own storage.
  RtValue &r = regs[p.out[0]];
  r.uniform = dest.uniform;
  r.bytes.assign(dest.bytes.begin(), dest.bytes.end());
  r.mem = dest.mem;
  const bool uni = s.uniform && dest.uniform;
  if (!uni)
    r.spread(ri.laneBytes);
  forLanes(uni, mask, [&](int l) {
    setBits(r.lane(l, ri.laneBytes), ri.elemBits, unsigned(p.ints[0]),
            getBits(s.lane(l, si.laneBytes), si.elemBits, 0));
  });
  return success();
}

LogicalResult Executor::execBroadcast(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask) {
  auto &regs = wave.regs;
  const ValueInfo &si = info(p.in[0]), &ri = info(p.out[0]);
  const RtValue &s = regs[p.in[0]];
  RtValue &r = regs[p.out[0]];
  r.shapeFor(s.uniform, ri.laneBytes, mask);
  if (ri.elemBits % 8 == 0 && si.elemBits == ri.elemBits) {
    // Whole bytes: the scalar's bytes copied into every element.
    const unsigned eb = ri.elemBits / 8;
    forLanes(s.uniform, mask, [&](int l) {
      uint8_t *dst = r.lane(l, ri.laneBytes);
      const uint8_t *src = s.lane(l, si.laneBytes);
      if (ri.count == 1) {
        copyLane(dst, src, eb);
        return;
      }
      for (unsigned e = 0; e < ri.count; ++e)
        std::memcpy(dst + e * eb, src, eb);
    });
    return success();
  }
  forLanes(s.uniform, mask, [&](int l) {
    const uint64_t v = getBits(s.lane(l, si.laneBytes), si.elemBits, 0);
    for (unsigned e = 0; e < ri.count; ++e)
      setBits(r.lane(l, ri.laneBytes), ri.elemBits, e, v);
  });
  return success();
}

LogicalResult Executor::execThreadId(Workgroup &wg, Wave &wave, const POp &p,
                                     uint64_t mask) {
  auto &regs = wave.regs;
  const int dim = static_cast<int>(p.ints[0]);
  RtValue &r = regs[p.out[0]];
  if (block[dim] == 1) {
    r.shape(true, 8);
    return success();
  }
  r.shapeFor(false, 8, kAllLanes);
  for (int l = 0; l < kLanes; ++l) {
    const int64_t t = int64_t(wave.id) * kLanes + l;
    const int64_t x = t % block[0], y = (t / block[0]) % block[1],
                  z = t / (block[0] * block[1]);
    setBits(r.lane(l, 8), 64, 0, uint64_t(dim == 0 ? x : dim == 1 ? y : z));
  }
  return success();
}

LogicalResult Executor::execGridQuery(Workgroup &wg, Wave &wave, const POp &p,
                                      uint64_t mask) {
  auto &regs = wave.regs;
  const int dim = static_cast<int>(p.ints[0]);
  RtValue &r = regs[p.out[0]];
  r.shapeFor(true, 8, kAllLanes);
  const int64_t v = p.kind == Kind::BlockId    ? wg.id[dim]
                    : p.kind == Kind::BlockDim ? block[dim]
                                               : launch.grid[dim];
  setBits(r.bytes.data(), 64, 0, uint64_t(v));
  return success();
}

LogicalResult Executor::execMemView(Workgroup &wg, Wave &wave, const POp &p,
                                    uint64_t mask) {
  // A typed window of the source's bytes (a region of a symmetric buffer):
  // the same buffer from baseBytes + shift, the result type's extent.
  auto &regs = wave.regs;
  const RtValue &src = regs[p.in[0]];
  const RtValue &shift = regs[p.in[1]];
  if (!shift.uniform)
    return fatal(p, "memref.view's byte shift must be uniform");
  int64_t bytes;
  std::memcpy(&bytes, shift.bytes.data(), 8);
  if (bytes < 0 || bytes > src.mem.extentBytes)
    return fatal(p, "memref.view at byte " + std::to_string(bytes) +
                        " of a " + std::to_string(src.mem.extentBytes) +
                        "-byte memref");
  const ValueInfo &ri = info(p.out[0]);
  int64_t extent = ri.memElemBytes;
  for (int64_t d : ri.shape)
    extent *= d;
  RtValue &r = regs[p.out[0]];
  r = src;
  r.mem.baseBytes = src.mem.baseBytes + bytes;
  r.mem.extentBytes = extent;
  return success();
}

LogicalResult Executor::execFatRawBufferCast(Workgroup &wg, Wave &wave, const POp &p,
                                             uint64_t mask) {
  auto &regs = wave.regs;
  const RtValue &src = regs[p.in[0]];
  RtValue &r = regs[p.out[0]];
  r = src;
  r.mem.space = Space::RawBuffer;
  r.mem.numRecords = src.mem.extentBytes;
  if (p.ints[0]) {
    const RtValue &valid = regs[p.in[1]];
    if (!valid.uniform)
      return fatal(p, "validBytes must be uniform (a buffer descriptor is "
                      "scalar)");
    // num_records is a 32-bit descriptor field.
    const uint64_t v = getBits(valid.bytes.data(), 64, 0);
    r.mem.numRecords = static_cast<int64_t>(std::min<uint64_t>(v, 0xFFFFFFFFu));
  }
  return success();
}

LogicalResult Executor::execScaledMfma(Workgroup &wg, Wave &wave, const POp &p,
                                       uint64_t mask) {
  auto &regs = wave.regs;
  if (mask != kAllLanes)
    return fatal(p, "scaled_mfma needs all 64 lanes active (the emulator "
                    "does not model MFMA under a partial EXEC mask)");
  const auto shape = static_cast<mfma::Shape>(p.ints[0]);
  const mfma::ShapeInfo si = mfma::shapeInfo(shape);
  // The operands are read in place: lane l's register bytes at
  // l * laneBytes (0 for a uniform value; FP4 uses the low 16 bytes).
  auto source = [&](unsigned operand) {
    const ValueInfo &vi = info(p.in[operand]);
    const RtValue &v = regs[p.in[operand]];
    return std::make_pair(v.bytes.data(), v.uniform ? 0u : vi.laneBytes);
  };
  auto gatherScale = [&](unsigned operand, int64_t select,
                         std::array<uint8_t, kLanes> &out) {
    const ValueInfo &vi = info(p.in[operand]);
    const RtValue &v = regs[p.in[operand]];
    // A scalar scale is byte 0; a vector<4> scale is the op_sel byte.
    const unsigned byte = vi.count == 1 ? 0 : unsigned(select);
    for (int l = 0; l < kLanes; ++l)
      out[l] = v.lane(l, vi.laneBytes)[byte];
  };
  std::array<uint8_t, kLanes> aScales, bScales;
  // amdgpu.mfma (ints[5] set) has no scale operands: every scale is 1.0.
  if (p.ints[5]) {
    aScales.fill(127);
    bScales.fill(127);
  } else {
    gatherScale(3, p.ints[1], aScales);
    gatherScale(4, p.ints[2], bScales);
  }
  const auto [aBytes, aStride] = source(0);
  const auto [bBytes, bStride] = source(1);
  MfmaOperand a{static_cast<mfma::OperandFormat>(p.ints[3]), aBytes, aStride,
                aScales.data()};
  MfmaOperand b{static_cast<mfma::OperandFormat>(p.ints[4]), bBytes, bStride,
                bScales.data()};
  const ValueInfo &ci = info(p.in[2]);
  const RtValue &c = regs[p.in[2]];
  // C per lane, lane-major; a uniform C (a zero splat) is spread first.
  float accIn[kLanes * 16];
  const float *cLanes = reinterpret_cast<const float *>(c.bytes.data());
  if (c.uniform) {
    for (int l = 0; l < kLanes; ++l)
      std::memcpy(&accIn[size_t(l) * si.accPerLane], c.bytes.data(),
                  size_t(si.accPerLane) * 4);
    cLanes = accIn;
  } else if (reinterpret_cast<uintptr_t>(cLanes) % alignof(float) != 0) {
    std::memcpy(accIn, c.bytes.data(), size_t(kLanes) * si.accPerLane * 4);
    cLanes = accIn;
  }
  RtValue &r = regs[p.out[0]];
  if (&r == &c) {
    std::memcpy(accIn, c.bytes.data(), size_t(kLanes) * si.accPerLane * 4);
    cLanes = accIn;
  }
  r.shapeFor(false, ci.laneBytes, kAllLanes);
  scaledMfma(shape, a, b, cLanes, reinterpret_cast<float *>(r.bytes.data()));
  ++result.stats.mfmas;
  return success();
}

LogicalResult Executor::execOp(Workgroup &wg, Wave &wave, const POp &p,
                               uint64_t mask) {
  // One member function per op kind (or kinds that share a body), in
  // the order of OpKind.
  switch (p.kind) {
  case Kind::Constant:
    return execConstant(wg, wave, p, mask);
  case Kind::NoOp:
    return success();
  case Kind::IntBinary:
    return execIntBinary(wg, wave, p, mask);
  case Kind::CmpI:
    return execCmpI(wg, wave, p, mask);
  case Kind::IntCast:
    return execIntCast(wg, wave, p, mask);
  case Kind::Bitcast:
    return execBitcast(wg, wave, p, mask);
  case Kind::Select:
    return execSelect(wg, wave, p, mask);
  case Kind::FloatBinary:
    return execFloatBinary(wg, wave, p, mask);
  case Kind::FloatUnary:
    return execFloatUnary(wg, wave, p, mask);
  case Kind::Interleave:
    return execInterleave(wg, wave, p, mask);
  case Kind::FloatCast:
    return execFloatCast(wg, wave, p, mask);
  case Kind::MemLoad:
    return execMemLoad(wg, wave, p, mask);
  case Kind::MemStore:
    return execMemStore(wg, wave, p, mask);
  case Kind::GatherToLds:
    return execGatherToLds(wg, wave, p, mask);
  case Kind::AtomicRmw:
    return execAtomicRmw(wg, wave, p, mask);
  case Kind::Shuffle:
    return execShuffle(wg, wave, p, mask);
  case Kind::Extract:
  case Kind::ExtractSlice:
    return execExtract(wg, wave, p, mask);
  case Kind::Insert:
    return execInsert(wg, wave, p, mask);
  case Kind::Broadcast:
    return execBroadcast(wg, wave, p, mask);
  case Kind::ThreadId:
    return execThreadId(wg, wave, p, mask);
  case Kind::BlockId:
  case Kind::BlockDim:
  case Kind::GridDim:
    return execGridQuery(wg, wave, p, mask);
  case Kind::MemView:
    return execMemView(wg, wave, p, mask);
  case Kind::FatRawBufferCast:
    return execFatRawBufferCast(wg, wave, p, mask);
  case Kind::ScaledMfma:
    return execScaledMfma(wg, wave, p, mask);
  default:
    return fatal(p, "internal: op kind not executable here");
  }
}
} // namespace moec::emu::detail
