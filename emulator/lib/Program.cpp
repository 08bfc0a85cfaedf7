//===- Program.cpp - decode a gpu.func into executable POps ---------------===//
///
/// \file
/// The only emulator TU that inspects MLIR ops: it assigns every SSA value a
/// slot, classifies its storage, and turns each op into a POp. Anything it
/// does not recognise is an error naming the op and its location, so
/// checkSupported() on a kernel is exactly "would the emulator run it".
///
//===----------------------------------------------------------------------===//

#include "Program.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace moec::emu::detail {

std::string describeLocation(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->getLoc().print(os);
  return text;
}

std::string describeOpName(Operation *op) {
  return op->getName().getStringRef().str();
}

namespace {

/// Storage of one scalar element type; false when unsupported.
bool classifyElement(Type type, ValueInfo &info) {
  if (type.isIndex()) {
    info.elem = Elem::Int;
    info.width = 64;
    info.elemBits = 64;
    return true;
  }
  if (auto integer = dyn_cast<IntegerType>(type)) {
    const unsigned width = integer.getWidth();
    if (width != 1 && width != 8 && width != 16 && width != 32 && width != 64)
      return false;
    info.elem = Elem::Int;
    info.width = width;
    info.elemBits = width == 1 ? 8 : width;
    return true;
  }
  if (type.isF32() || type.isF64() || type.isBF16()) {
    info.elem = type.isF32() ? Elem::F32 : type.isF64() ? Elem::F64 : Elem::BF16;
    info.width = info.elemBits = type.getIntOrFloatBitWidth();
    return true;
  }
  if (isa<Float4E2M1FNType>(type)) {
    info.elem = Elem::Other;
    info.width = info.elemBits = 4;
    return true;
  }
  if (isa<Float8E4M3FNType>(type)) {
    info.elem = Elem::F8E4M3FN;
    info.width = info.elemBits = 8;
    return true;
  }
  if (isa<Float8E5M2Type, Float8E8M0FNUType>(type)) {
    info.elem = Elem::Other;
    info.width = info.elemBits = 8;
    return true;
  }
  return false;
}

/// Storage of one value type; false (with `why`) when unsupported.
bool classifyType(Type type, ValueInfo &info, std::string &why) {
  if (auto memref = dyn_cast<MemRefType>(type)) {
    info.isMemRef = true;
    if (!memref.hasStaticShape() || !memref.getLayout().isIdentity()) {
      why = "memrefs must have a static shape and identity layout";
      return false;
    }
    Attribute space = memref.getMemorySpace();
    if (!space) {
      info.space = Space::Global;
    } else if (auto gpuSpace = dyn_cast<gpu::AddressSpaceAttr>(space)) {
      if (gpuSpace.getValue() == gpu::AddressSpace::Global)
        info.space = Space::Global;
      else if (gpuSpace.getValue() == gpu::AddressSpace::Workgroup)
        info.space = Space::Lds;
      else {
        why = "private memrefs are not supported";
        return false;
      }
    } else if (auto amdSpace = dyn_cast<amdgpu::AddressSpaceAttr>(space)) {
      if (amdSpace.getValue() != amdgpu::AddressSpace::FatRawBuffer) {
        why = "only the fat_raw_buffer amdgpu address space is supported";
        return false;
      }
      info.space = Space::RawBuffer;
    } else {
      why = "unsupported memory space";
      return false;
    }
    ValueInfo element;
    if (!classifyElement(memref.getElementType(), element) ||
        element.elemBits % 8 != 0) {
      why = "memref element type must be a byte-sized integer or float";
      return false;
    }
    info.memElemBytes = element.elemBits / 8;
    info.shape.assign(memref.getShape().begin(), memref.getShape().end());
    return true;
  }
  Type elementType = type;
  if (auto vector = dyn_cast<VectorType>(type)) {
    if (vector.getRank() != 1 || vector.isScalable()) {
      why = "only 1-D fixed vectors are supported";
      return false;
    }
    info.count = static_cast<unsigned>(vector.getNumElements());
    elementType = vector.getElementType();
  }
  if (!classifyElement(elementType, info)) {
    why = "unsupported element type";
    return false;
  }
  if (info.elemBits == 4 && info.count % 2 != 0) {
    why = "4-bit vectors must have an even length";
    return false;
  }
  info.laneBytes = (info.count * info.elemBits + 7) / 8;
  return true;
}

/// Writes `bits` (the low elemBits) as element `index` of a lane's bytes.
void putBits(std::vector<uint8_t> &bytes, unsigned elemBits, unsigned index,
             uint64_t bits) {
  if (elemBits == 4) {
    uint8_t &byte = bytes[index / 2];
    const unsigned shift = (index & 1) * 4;
    byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | ((bits & 0xF) << shift));
    return;
  }
  for (unsigned b = 0; b < elemBits / 8; ++b)
    bytes[index * (elemBits / 8) + b] = static_cast<uint8_t>(bits >> (8 * b));
}

class Decoder {
public:
  Decoder(Program &program, std::string &error)
      : program(program), error(error) {}

  LogicalResult decodeFunc(gpu::GPUFuncOp func);

private:
  LogicalResult fail(Operation *op, const Twine &why) {
    error = (Twine("emulator: unsupported op '") +
             op->getName().getStringRef() + "' at " + describeLocation(op) +
             ": " + why)
                .str();
    return failure();
  }
  FailureOr<unsigned> slotOf(Value value, Operation *user);
  FailureOr<unsigned> define(Value value, Operation *owner);
  FailureOr<int> decodeBlock(Block &block);
  LogicalResult decodeOp(Operation *op, POp &p);
  LogicalResult decodeConstant(arith::ConstantOp op, POp &p);
  // One decoder per op family: the decoded op (or why not), or nullopt
  // when `op` is not of the family. Operand and result slots are set.
  std::optional<LogicalResult> decodeArith(Operation *op, POp &p);
  std::optional<LogicalResult> decodeMemory(Operation *op, POp &p);
  std::optional<LogicalResult> decodeVector(Operation *op, POp &p);
  std::optional<LogicalResult> decodeGpu(Operation *op, POp &p);
  std::optional<LogicalResult> decodeAmdgpu(Operation *op, POp &p);
  std::optional<LogicalResult> decodeScf(Operation *op, POp &p);
  /// Float arithmetic runs on F32, F64 and BF16 slots.
  bool floatOk(unsigned slot) const;
  /// Conversions also reach FP8 E4M3FN (the W13 epilogue's quantisation).
  bool convertible(unsigned slot) const;
  LogicalResult floatUnary(Operation *o, POp &p, FloatUnaryOp which);
  LogicalResult floatBinary(Operation *o, POp &p, FloatOp which);
  LogicalResult intBinary(POp &p, IntOp which);
  LogicalResult intCast(POp &p, bool signExtend);
  LogicalResult gpuDim(POp &p, Kind kind, gpu::Dimension dim);
  /// A gfx950 f8f6f4 MFMA, scaled or not (amdgpu.mfma has no scale
  /// operands and means every scale 1.0): ints = shape, scale byte of A and
  /// B, the operand formats, unit scales.
  LogicalResult f8f6f4Mfma(Operation *o, POp &p, int64_t m, int64_t n,
                           int64_t k, Value a, Value b, Value c,
                           int64_t scaleByteA, int64_t scaleByteB,
                           bool unitScales);
  /// A gfx950 BF16 MFMA (v_mfma_f32_16x16x32_bf16, v_mfma_f32_32x32x16_bf16):
  /// the same kind as the scaled one, with a BF16 shape and unit scales.
  LogicalResult bf16Mfma(Operation *o, POp &p, int64_t m, int64_t n, int64_t k,
                         Value a, Value b, Value c);

  Program &program;
  std::string &error;
  llvm::DenseMap<Value, unsigned> slots;
};

FailureOr<unsigned> Decoder::define(Value value, Operation *owner) {
  ValueInfo info;
  std::string why;
  if (!classifyType(value.getType(), info, why)) {
    std::string typeText;
    llvm::raw_string_ostream os(typeText);
    value.getType().print(os);
    return fail(owner, "value of type " + typeText + ": " + why);
  }
  const unsigned slot = static_cast<unsigned>(program.values.size());
  program.values.push_back(std::move(info));
  slots[value] = slot;
  return slot;
}

FailureOr<unsigned> Decoder::slotOf(Value value, Operation *user) {
  auto it = slots.find(value);
  if (it == slots.end())
    return fail(user, "operand defined outside the kernel");
  return it->second;
}

FailureOr<int> Decoder::decodeBlock(Block &block) {
  const int index = static_cast<int>(program.blocks.size());
  program.blocks.emplace_back();
  std::vector<unsigned> args;
  for (BlockArgument arg : block.getArguments()) {
    Operation *owner = block.getParentOp();
    FailureOr<unsigned> slot = define(arg, owner);
    if (failed(slot))
      return failure();
    args.push_back(*slot);
  }
  std::vector<unsigned> ops;
  for (Operation &op : block) {
    POp p;
    p.op = &op;
    if (failed(decodeOp(&op, p)))
      return failure();
    ops.push_back(static_cast<unsigned>(program.ops.size()));
    program.ops.push_back(std::move(p));
  }
  program.blocks[index].args = std::move(args);
  program.blocks[index].ops = std::move(ops);
  return index;
}

LogicalResult Decoder::decodeConstant(arith::ConstantOp op, POp &p) {
  const ValueInfo &info = program.values[p.out[0]];
  p.constant.assign(info.laneBytes, 0);
  Attribute value = op.getValue();
  auto bitsOf = [&](Attribute element) -> std::optional<uint64_t> {
    if (auto integer = dyn_cast<IntegerAttr>(element))
      return integer.getValue().getZExtValue();
    if (auto floating = dyn_cast<FloatAttr>(element))
      return floating.getValue().bitcastToAPInt().getZExtValue();
    return std::nullopt;
  };
  if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    unsigned index = 0;
    if (isa<FloatType>(dense.getElementType())) {
      for (const APFloat &element : dense.getValues<APFloat>())
        putBits(p.constant, info.elemBits, index++,
                element.bitcastToAPInt().getZExtValue());
    } else {
      for (const APInt &element : dense.getValues<APInt>())
        putBits(p.constant, info.elemBits, index++, element.getZExtValue());
    }
    return success();
  }
  std::optional<uint64_t> bits = bitsOf(value);
  if (!bits)
    return fail(op, "constant attribute kind");
  putBits(p.constant, info.elemBits, 0, *bits);
  return success();
}

LogicalResult Decoder::decodeOp(Operation *op, POp &p) {
  // Operands first (their slots exist by dominance), then results, then
  // regions, so a region's values get slots after its parent's operands.
  for (Value operand : op->getOperands()) {
    FailureOr<unsigned> slot = slotOf(operand, op);
    if (failed(slot))
      return failure();
    p.in.push_back(*slot);
  }
  for (Value result : op->getResults()) {
    FailureOr<unsigned> slot = define(result, op);
    if (failed(slot))
      return failure();
    p.out.push_back(*slot);
  }
  // One decoder per op family, as the executor dispatches them.
  for (auto decodeFamily :
       {&Decoder::decodeArith, &Decoder::decodeMemory, &Decoder::decodeVector,
        &Decoder::decodeGpu, &Decoder::decodeAmdgpu, &Decoder::decodeScf})
    if (std::optional<LogicalResult> decoded = (this->*decodeFamily)(op, p))
      return *decoded;
  return fail(op, "no emulator semantics for this op");
}

bool Decoder::floatOk(unsigned slot) const {
  Elem e = program.values[slot].elem;
  return e == Elem::F32 || e == Elem::F64 || e == Elem::BF16;
}

bool Decoder::convertible(unsigned slot) const {
  return floatOk(slot) || program.values[slot].elem == Elem::F8E4M3FN;
}

LogicalResult Decoder::floatUnary(Operation *o, POp &p, FloatUnaryOp which) {
  if (!floatOk(p.out[0]))
    return fail(o, "float arithmetic on this element type");
  p.kind = Kind::FloatUnary;
  p.sub = static_cast<uint8_t>(which);
  return success();
}

LogicalResult Decoder::floatBinary(Operation *o, POp &p, FloatOp which) {
  if (!floatOk(p.out[0]))
    return fail(o, "float arithmetic on this element type");
  p.kind = Kind::FloatBinary;
  p.sub = static_cast<uint8_t>(which);
  return success();
}

LogicalResult Decoder::intBinary(POp &p, IntOp which) {
  p.kind = Kind::IntBinary;
  p.sub = static_cast<uint8_t>(which);
  return success();
}

LogicalResult Decoder::intCast(POp &p, bool signExtend) {
  p.kind = Kind::IntCast;
  p.sub = signExtend ? 1 : 0;
  return success();
}

LogicalResult Decoder::gpuDim(POp &p, Kind kind, gpu::Dimension dim) {
  p.kind = kind;
  p.ints = {static_cast<int64_t>(dim)};
  return success();
}

LogicalResult Decoder::f8f6f4Mfma(Operation *o, POp &p, int64_t m, int64_t n,
                                  int64_t k, Value a, Value b, Value c,
                                  int64_t scaleByteA, int64_t scaleByteB,
                                  bool unitScales) {
  const bool is16 = m == 16 && n == 16 && k == 128;
  const bool is32 = m == 32 && n == 32 && k == 64;
  if (!is16 && !is32)
    return fail(o, "only the f8f6f4 shapes 16x16x128 and 32x32x64");
  auto format = [&](Value source) -> int {
    auto vector = dyn_cast<VectorType>(source.getType());
    Type element = vector ? vector.getElementType() : Type();
    if (element && isa<Float8E4M3FNType>(element))
      return static_cast<int>(mfma::OperandFormat::Fp8);
    if (element && isa<Float4E2M1FNType>(element))
      return static_cast<int>(mfma::OperandFormat::Fp4);
    return -1;
  };
  const int fa = format(a), fb = format(b);
  if (fa < 0 || fb < 0)
    return fail(o, "operands other than f8E4M3FN and f4E2M1FN");
  if (!cast<VectorType>(c.getType()).getElementType().isF32())
    return fail(o, "accumulators other than f32");
  p.kind = Kind::ScaledMfma;
  p.ints = {static_cast<int64_t>(is16 ? mfma::Shape::M16N16K128
                                      : mfma::Shape::M32N32K64),
            scaleByteA, scaleByteB, fa, fb, unitScales ? 1 : 0};
  return success();
}

LogicalResult Decoder::bf16Mfma(Operation *o, POp &p, int64_t m, int64_t n,
                                int64_t k, Value a, Value b, Value c) {
  const bool is16 = m == 16 && n == 16 && k == 32;
  const bool is32 = m == 32 && n == 32 && k == 16;
  if (!is16 && !is32)
    return fail(o, "only the BF16 shapes 16x16x32 and 32x32x16");
  auto isBf16x8 = [](Value source) {
    auto vector = dyn_cast<VectorType>(source.getType());
    return vector && vector.getNumElements() == mfma::kBf16ElementsPerLane &&
           vector.getElementType().isBF16();
  };
  if (!isBf16x8(a) || !isBf16x8(b))
    return fail(o, "BF16 operands other than vector<8xbf16>");
  if (!cast<VectorType>(c.getType()).getElementType().isF32())
    return fail(o, "accumulators other than f32");
  const auto bf16 = static_cast<int64_t>(mfma::OperandFormat::Bf16);
  p.kind = Kind::ScaledMfma;
  p.ints = {static_cast<int64_t>(is16 ? mfma::Shape::M16N16K32Bf16
                                      : mfma::Shape::M32N32K16Bf16),
            0, 0, bf16, bf16, 1};
  return success();
}

std::optional<LogicalResult> Decoder::decodeArith(Operation *op, POp &p) {
  // arith and math: scalars and elementwise vectors.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](arith::ConstantOp o) {
        p.kind = Kind::Constant;
        return decodeConstant(o, p);
      })
      .Case([&](arith::AddIOp) { return intBinary(p, IntOp::Add); })
      .Case([&](arith::SubIOp) { return intBinary(p, IntOp::Sub); })
      .Case([&](arith::MulIOp) { return intBinary(p, IntOp::Mul); })
      .Case([&](arith::DivUIOp) { return intBinary(p, IntOp::DivU); })
      .Case([&](arith::DivSIOp) { return intBinary(p, IntOp::DivS); })
      .Case([&](arith::RemUIOp) { return intBinary(p, IntOp::RemU); })
      .Case([&](arith::RemSIOp) { return intBinary(p, IntOp::RemS); })
      .Case([&](arith::CeilDivUIOp) { return intBinary(p, IntOp::CeilDivU); })
      .Case([&](arith::CeilDivSIOp) { return intBinary(p, IntOp::CeilDivS); })
      .Case([&](arith::FloorDivSIOp) { return intBinary(p, IntOp::FloorDivS); })
      .Case([&](arith::MinUIOp) { return intBinary(p, IntOp::MinU); })
      .Case([&](arith::MaxUIOp) { return intBinary(p, IntOp::MaxU); })
      .Case([&](arith::MinSIOp) { return intBinary(p, IntOp::MinS); })
      .Case([&](arith::MaxSIOp) { return intBinary(p, IntOp::MaxS); })
      .Case([&](arith::AndIOp) { return intBinary(p, IntOp::And); })
      .Case([&](arith::OrIOp) { return intBinary(p, IntOp::Or); })
      .Case([&](arith::XOrIOp) { return intBinary(p, IntOp::Xor); })
      .Case([&](arith::ShLIOp) { return intBinary(p, IntOp::Shl); })
      .Case([&](arith::ShRUIOp) { return intBinary(p, IntOp::ShrU); })
      .Case([&](arith::ShRSIOp) { return intBinary(p, IntOp::ShrS); })
      .Case([&](arith::CmpIOp o) {
        p.kind = Kind::CmpI;
        p.sub = static_cast<uint8_t>(o.getPredicate());
        return success();
      })
      .Case([&](arith::ExtUIOp) { return intCast(p, false); })
      .Case([&](arith::ExtSIOp) { return intCast(p, true); })
      .Case([&](arith::TruncIOp) { return intCast(p, false); })
      .Case([&](arith::IndexCastOp) { return intCast(p, true); })
      .Case([&](arith::IndexCastUIOp) { return intCast(p, false); })
      .Case([&](arith::BitcastOp) {
        p.kind = Kind::Bitcast;
        return success();
      })
      .Case([&](arith::SelectOp o) -> LogicalResult {
        if (isa<VectorType>(o.getCondition().getType()))
          return fail(o, "vector conditions");
        p.kind = Kind::Select;
        return success();
      })
      .Case([&](arith::AddFOp o) { return floatBinary(o, p, FloatOp::Add); })
      .Case([&](arith::SubFOp o) { return floatBinary(o, p, FloatOp::Sub); })
      .Case([&](arith::MulFOp o) { return floatBinary(o, p, FloatOp::Mul); })
      .Case([&](arith::DivFOp o) { return floatBinary(o, p, FloatOp::Div); })
      .Case([&](arith::MaxNumFOp o) {
        return floatBinary(o, p, FloatOp::MaxNum);
      })
      .Case([&](arith::MinNumFOp o) {
        return floatBinary(o, p, FloatOp::MinNum);
      })
      .Case([&](arith::MaximumFOp o) {
        return floatBinary(o, p, FloatOp::Maximum);
      })
      .Case([&](arith::MinimumFOp o) {
        return floatBinary(o, p, FloatOp::Minimum);
      })
      .Case([&](arith::NegFOp o) {
        return floatUnary(o, p, FloatUnaryOp::Neg);
      })
      .Case([&](arith::ExtFOp o) -> LogicalResult {
        if (!convertible(p.in[0]) || !convertible(p.out[0]))
          return fail(o, "extf between these types");
        p.kind = Kind::FloatCast;
        return success();
      })
      .Case([&](arith::TruncFOp o) -> LogicalResult {
        if (!convertible(p.in[0]) || !convertible(p.out[0]))
          return fail(o, "truncf between these types");
        if (o.getRoundingmode() &&
            *o.getRoundingmode() != arith::RoundingMode::to_nearest_even)
          return fail(o, "rounding modes other than to_nearest_even");
        p.kind = Kind::FloatCast;
        return success();
      })
      .Case([&](math::AbsFOp o) {
        return floatUnary(o, p, FloatUnaryOp::Abs);
      })
      .Case([&](math::Exp2Op o) {
        return floatUnary(o, p, FloatUnaryOp::Exp2);
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Decoder::decodeMemory(Operation *op, POp &p) {
  // memref and vector loads, stores and atomics.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](memref::LoadOp) {
        p.kind = Kind::MemLoad;
        return success();
      })
      .Case([&](memref::StoreOp) {
        p.kind = Kind::MemStore;
        return success();
      })
      .Case([&](memref::ViewOp o) -> LogicalResult {
        if (!o.getSizes().empty())
          return fail(o, "dynamic sizes");
        if (program.values[p.in[0]].space != Space::Global)
          return fail(o, "the source must be a global memref");
        p.kind = Kind::MemView;
        return success();
      })
      .Case([&](memref::AtomicRMWOp o) -> LogicalResult {
        using K = arith::AtomicRMWKind;
        std::optional<AtomicOp> which;
        switch (o.getKind()) {
        case K::addi: which = AtomicOp::AddI; break;
        case K::muli: which = AtomicOp::MulI; break;
        case K::maxs: which = AtomicOp::MaxS; break;
        case K::maxu: which = AtomicOp::MaxU; break;
        case K::mins: which = AtomicOp::MinS; break;
        case K::minu: which = AtomicOp::MinU; break;
        case K::andi: which = AtomicOp::AndI; break;
        case K::ori: which = AtomicOp::OrI; break;
        case K::xori: which = AtomicOp::XorI; break;
        case K::assign: which = AtomicOp::Assign; break;
        case K::addf: which = AtomicOp::AddF; break;
        case K::maximumf: which = AtomicOp::MaximumF; break;
        case K::minimumf: which = AtomicOp::MinimumF; break;
        case K::maxnumf: which = AtomicOp::MaxNumF; break;
        case K::minnumf: which = AtomicOp::MinNumF; break;
        default: break;
        }
        if (!which)
          return fail(o, "atomic kind " + arith::stringifyAtomicRMWKind(o.getKind()));
        const Elem e = program.values[p.out[0]].elem;
        const bool isFloat = *which >= AtomicOp::AddF;
        if (isFloat ? !(e == Elem::F32 || e == Elem::F64) : e != Elem::Int)
          return fail(o, "atomic kind on this element type");
        p.kind = Kind::AtomicRmw;
        p.sub = static_cast<uint8_t>(*which);
        return success();
      })
      .Case([&](vector::LoadOp) {
        p.kind = Kind::MemLoad;
        return success();
      })
      .Case([&](vector::StoreOp) {
        p.kind = Kind::MemStore;
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Decoder::decodeVector(Operation *op, POp &p) {
  // vector shuffles, casts and element moves.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](vector::InterleaveOp) {
        p.kind = Kind::Interleave;
        return success();
      })
      .Case([&](vector::ShuffleOp o) {
        p.kind = Kind::Shuffle;
        p.ints.assign(o.getMask().begin(), o.getMask().end());
        return success();
      })
      .Case([&](vector::BitCastOp) {
        p.kind = Kind::Bitcast;
        return success();
      })
      .Case([&](vector::ExtractOp o) -> LogicalResult {
        if (!o.getDynamicPosition().empty() ||
            o.getStaticPosition().size() != 1 ||
            isa<VectorType>(o.getResult().getType()))
          return fail(o, "only a static position into a 1-D vector");
        p.kind = Kind::Extract;
        p.ints = {o.getStaticPosition()[0]};
        return success();
      })
      .Case([&](vector::InsertOp o) -> LogicalResult {
        if (!o.getDynamicPosition().empty() ||
            o.getStaticPosition().size() != 1 ||
            isa<VectorType>(o.getValueToStore().getType()))
          return fail(o, "only a static position into a 1-D vector");
        p.kind = Kind::Insert;
        p.ints = {o.getStaticPosition()[0]};
        return success();
      })
      .Case([&](vector::ExtractStridedSliceOp o) -> LogicalResult {
        auto offsets = o.getOffsets().getValue();
        auto strides = o.getStrides().getValue();
        if (offsets.size() != 1 ||
            cast<IntegerAttr>(strides[0]).getInt() != 1)
          return fail(o, "only unit-stride 1-D slices");
        p.kind = Kind::ExtractSlice;
        p.ints = {cast<IntegerAttr>(offsets[0]).getInt()};
        return success();
      })
      .Case([&](vector::BroadcastOp o) -> LogicalResult {
        if (isa<VectorType>(o.getSource().getType()))
          return fail(o, "only scalar sources");
        p.kind = Kind::Broadcast;
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Decoder::decodeGpu(Operation *op, POp &p) {
  // gpu ids, barrier and return; rocdl.s.sleep.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](gpu::ThreadIdOp o) {
        return gpuDim(p, Kind::ThreadId, o.getDimension());
      })
      .Case([&](gpu::BlockIdOp o) {
        return gpuDim(p, Kind::BlockId, o.getDimension());
      })
      .Case([&](gpu::BlockDimOp o) {
        return gpuDim(p, Kind::BlockDim, o.getDimension());
      })
      .Case([&](gpu::GridDimOp o) {
        return gpuDim(p, Kind::GridDim, o.getDimension());
      })
      .Case([&](gpu::BarrierOp) {
        p.kind = Kind::Barrier;
        return success();
      })
      .Case([&](gpu::ReturnOp o) -> LogicalResult {
        if (o->getNumOperands() != 0)
          return fail(o, "kernels return nothing");
        if (!isa<gpu::GPUFuncOp>(o->getParentOp()))
          return fail(o, "gpu.return must end the kernel body");
        p.kind = Kind::Return;
        return success();
      })
      .Case([&](ROCDL::SSleepOp) {
        p.kind = Kind::Sleep;
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Decoder::decodeAmdgpu(Operation *op, POp &p) {
  // amdgpu buffers, LDS DMA, waits and MFMAs.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](amdgpu::LDSBarrierOp) {
        p.kind = Kind::Barrier;
        return success();
      })
      .Case([&](amdgpu::SchedBarrierOp) {
        p.kind = Kind::NoOp;
        return success();
      })
      .Case([&](amdgpu::FatRawBufferCastOp o) -> LogicalResult {
        if (o.getResetOffset())
          return fail(o, "resetOffset");
        if (program.values[p.in[0]].space != Space::Global)
          return fail(o, "the source must be a global memref");
        p.kind = Kind::FatRawBufferCast;
        // Operand order: source, [validBytes], [cacheSwizzleStride].
        p.ints = {o.getValidBytes() ? 1 : 0};
        return success();
      })
      .Case([&](amdgpu::GatherToLDSOp o) -> LogicalResult {
        const Space from = program.values[p.in[0]].space;
        if (from != Space::Global && from != Space::RawBuffer)
          return fail(o, "the source must be a global or fat_raw_buffer "
                         "memref");
        const unsigned dst = p.in[1 + o.getSrcIndices().size()];
        if (program.values[dst].space != Space::Lds)
          return fail(o, "the destination must be a workgroup memref");
        ValueInfo transfer;
        std::string why;
        if (!classifyType(o.getTransferType(), transfer, why) ||
            transfer.isMemRef)
          return fail(o, "transfer type: " + why);
        // The instruction moves 1, 2, 4, 12 or 16 bytes per lane;
        // narrower ones are widened to a dword in LDS, which is not
        // modelled.
        if (transfer.laneBytes != 4 && transfer.laneBytes != 16)
          return fail(o, "only 4- and 16-byte transfers");
        p.kind = Kind::GatherToLds;
        p.ints = {transfer.laneBytes,
                  static_cast<int64_t>(o.getSrcIndices().size())};
        return success();
      })
      .Case([&](amdgpu::MemoryCounterWaitOp) {
        // gather_to_lds writes LDS when it executes (OpSemantics.cpp), so
        // waiting for it changes nothing the emulator can observe.
        p.kind = Kind::NoOp;
        return success();
      })
      .Case([&](amdgpu::MFMAOp o) -> LogicalResult {
        if (o.getBlocks() != 1 || o.getCbsz() != 0 || o.getAbid() != 0 ||
            o.getBlgp() != amdgpu::MFMAPermB::none || o.getNegateA() ||
            o.getNegateB() || o.getNegateC())
          return fail(o, "blocks, cbsz, abid, blgp or negation");
        // Operands: sourceA, sourceB, destC.
        if (auto a = dyn_cast<VectorType>(o.getSourceA().getType());
            a && a.getElementType().isBF16())
          return bf16Mfma(o, p, o.getM(), o.getN(), o.getK(), o.getSourceA(),
                          o.getSourceB(), o.getDestC());
        return f8f6f4Mfma(o, p, o.getM(), o.getN(), o.getK(), o.getSourceA(),
                          o.getSourceB(), o.getDestC(), 0, 0,
                          /*unitScales=*/true);
      })
      .Case([&](amdgpu::ScaledMFMAOp o) -> LogicalResult {
        // Operands: sourceA, sourceB, destC, scalesA, scalesB.
        return f8f6f4Mfma(o, p, o.getM(), o.getN(), o.getK(), o.getSourceA(),
                          o.getSourceB(), o.getDestC(), o.getScalesIdxA(),
                          o.getScalesIdxB(), /*unitScales=*/false);
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<LogicalResult> Decoder::decodeScf(Operation *op, POp &p) {
  // scf control flow: regions decode as blocks.
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case([&](scf::IfOp o) -> LogicalResult {
        p.kind = Kind::If;
        FailureOr<int> thenBlock = decodeBlock(o.getThenRegion().front());
        if (failed(thenBlock))
          return failure();
        p.regions[0] = *thenBlock;
        if (!o.getElseRegion().empty()) {
          FailureOr<int> elseBlock = decodeBlock(o.getElseRegion().front());
          if (failed(elseBlock))
            return failure();
          p.regions[1] = *elseBlock;
        }
        return success();
      })
      .Case([&](scf::ForOp o) -> LogicalResult {
        if (o.getUnsignedCmp())
          return fail(o, "unsigned loop comparison");
        p.kind = Kind::For;
        FailureOr<int> body = decodeBlock(*o.getBody());
        if (failed(body))
          return failure();
        p.regions[0] = *body;
        return success();
      })
      .Case([&](scf::WhileOp o) -> LogicalResult {
        p.kind = Kind::While;
        FailureOr<int> before = decodeBlock(o.getBefore().front());
        if (failed(before))
          return failure();
        FailureOr<int> after = decodeBlock(o.getAfter().front());
        if (failed(after))
          return failure();
        p.regions[0] = *before;
        p.regions[1] = *after;
        return success();
      })
      .Case([&](scf::ConditionOp) {
        p.kind = Kind::Condition;
        return success();
      })
      .Case([&](scf::YieldOp) {
        p.kind = Kind::Yield;
        return success();
      })
      .Default([](Operation *) { return std::nullopt; });
}

LogicalResult Decoder::decodeFunc(gpu::GPUFuncOp func) {
  program.kernelName = func.getName().str();
  if (auto module = func->getParentOfType<gpu::GPUModuleOp>())
    program.kernelName = module.getName().str() + "::" + program.kernelName;
  if (!func.getPrivateAttributions().empty())
    return fail(func, "private attributions");
  if (func.getBody().getBlocks().size() != 1)
    return fail(func, "kernels with more than one block (unstructured control flow)");
  if (std::optional<ArrayRef<int32_t>> known = func.getKnownBlockSize())
    for (unsigned d = 0; d < 3 && d < known->size(); ++d)
      program.knownBlockSize[d] = (*known)[d];

  Block &entry = func.getBody().front();
  // Kernel arguments and workgroup attributions are entry block arguments;
  // decodeBlock defines them in order.
  FailureOr<int> entryIndex = decodeBlock(entry);
  if (failed(entryIndex))
    return failure();
  program.entry = static_cast<unsigned>(*entryIndex);
  const std::vector<unsigned> &args = program.blocks[program.entry].args;
  const unsigned numArgs = func.getNumArguments();
  program.argSlots.assign(args.begin(), args.begin() + numArgs);
  int64_t offset = 0;
  for (unsigned i = numArgs; i < args.size(); ++i) {
    const ValueInfo &info = program.values[args[i]];
    int64_t bytes = info.memElemBytes;
    for (int64_t extent : info.shape)
      bytes *= extent;
    // 16-byte aligned regions, as the backend lays out LDS variables.
    offset = (offset + 15) / 16 * 16;
    program.lds.push_back({args[i], offset, bytes});
    offset += bytes;
  }
  program.ldsBytes = offset;
  Block &last = entry;
  if (last.empty() || !isa<gpu::ReturnOp>(last.back()))
    return fail(func, "the kernel body must end with gpu.return");
  return success();
}

} // namespace

LogicalResult decodeProgram(gpu::GPUFuncOp func, Program &program,
                            std::string &error) {
  program = Program();
  return Decoder(program, error).decodeFunc(func);
}

} // namespace moec::emu::detail

namespace moec::emu {

LogicalResult checkSupported(gpu::GPUFuncOp func, std::string &error) {
  detail::Program program;
  return detail::decodeProgram(func, program, error);
}

FailureOr<RunResult> runKernels(ArrayRef<KernelLaunch> launches,
                                GlobalMemory &memory, std::string &error) {
  // One decoded program per distinct gpu.func (ranks often share one).
  std::vector<std::unique_ptr<detail::Program>> programs;
  llvm::DenseMap<Operation *, const detail::Program *> decoded;
  std::vector<detail::LaunchInput> inputs;
  inputs.reserve(launches.size());
  for (const KernelLaunch &launch : launches) {
    gpu::GPUFuncOp func = launch.func; // op handles are cheap copies
    if (!func) {
      error = "emulator: " +
              (launch.label.empty() ? std::string() : launch.label + ": ") +
              "launch without a kernel";
      return failure();
    }
    const detail::Program *&program = decoded[func.getOperation()];
    if (!program) {
      programs.push_back(std::make_unique<detail::Program>());
      if (failed(detail::decodeProgram(func, *programs.back(), error))) {
        if (!launch.label.empty())
          error.insert(error.find(": ") + 2, launch.label + ": ");
        return failure();
      }
      program = programs.back().get();
    }
    detail::LaunchInput input;
    input.program = program;
    input.args = launch.args;
    input.launch = &launch.launch;
    input.label = launch.label;
    inputs.push_back(std::move(input));
  }
  return detail::execute(inputs, memory, error);
}

FailureOr<RunResult> runKernel(gpu::GPUFuncOp func, GlobalMemory &memory,
                               ArrayRef<KernelArgValue> args,
                               const LaunchConfig &launch, std::string &error) {
  KernelLaunch single;
  single.func = func;
  single.args.assign(args.begin(), args.end());
  single.launch = launch;
  return runKernels(single, memory, error);
}

} // namespace moec::emu
