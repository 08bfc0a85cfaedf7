//===- KernelEmitter.cpp - builder shorthands of the kernel emitters -----===//

#include "KernelEmitter.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace moec {

Value KernelEmitter::idx(int64_t value) {
  return arith::ConstantIndexOp::create(b, loc, value);
}
Value KernelEmitter::add(Value x, Value y) {
  return arith::AddIOp::create(b, loc, x, y);
}
Value KernelEmitter::mul(Value x, int64_t c) {
  return arith::MulIOp::create(b, loc, x, idx(c));
}
Value KernelEmitter::mul(Value x, Value y) {
  return arith::MulIOp::create(b, loc, x, y);
}
Value KernelEmitter::divC(Value x, int64_t c) {
  return arith::DivUIOp::create(b, loc, x, idx(c));
}
Value KernelEmitter::remC(Value x, int64_t c) {
  return arith::RemUIOp::create(b, loc, x, idx(c));
}
Value KernelEmitter::i32(int64_t value) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), value);
}
Value KernelEmitter::i64(int64_t value) {
  return arith::ConstantIntOp::create(b, loc, b.getI64Type(), value);
}
Value KernelEmitter::toIndex(Value i32Value) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), i32Value);
}

MemRefType KernelEmitter::globalBuffer(int64_t elements, Type elementType) {
  auto space =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Global);
  return MemRefType::get({elements}, elementType, MemRefLayoutAttrInterface(),
                         space);
}

MemRefType KernelEmitter::ldsBuffer(int64_t dwords) {
  auto space =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  return MemRefType::get({dwords}, b.getI32Type(), MemRefLayoutAttrInterface(),
                         space);
}

Value KernelEmitter::asBuffer(Value memref, Value validBytes) {
  return amdgpu::FatRawBufferCastOp::create(b, loc, memref, validBytes,
                                            /*cacheSwizzleStride=*/Value(),
                                            /*boundsCheck=*/true,
                                            /*resetOffset=*/false);
}

Value KernelEmitter::bytesOf(Value countI32, int64_t bytesPerItem) {
  Value count = arith::ExtUIOp::create(b, loc, b.getI64Type(), countI32);
  return arith::MulIOp::create(b, loc, count, i64(bytesPerItem));
}

Value KernelEmitter::load16(Value memref, Value dwordIndex, bool nontemporal) {
  return vector::LoadOp::create(b, loc, VectorType::get({4}, b.getI32Type()),
                                memref, ValueRange{dwordIndex}, nontemporal,
                                llvm::MaybeAlign(16));
}

void KernelEmitter::store16(Value value, Value memref, Value dwordIndex) {
  vector::StoreOp::create(b, loc, value, memref, ValueRange{dwordIndex},
                          /*nontemporal=*/false, llvm::MaybeAlign(16));
}

SmallVector<Value, 8> KernelEmitter::loadF32Block(Value lds, Value firstDword) {
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  SmallVector<Value, 8> values;
  for (int64_t q = 0; q < 8; ++q)
    values.push_back(vector::BitCastOp::create(
        b, loc, f32x4, load16(lds, add(firstDword, idx(4 * q)))));
  return values;
}

Value KernelEmitter::atomicAddI32(Value memref, Value index, Value amountI32) {
  return memref::AtomicRMWOp::create(b, loc, arith::AtomicRMWKind::addi,
                                     amountI32, memref, ValueRange{index});
}

void KernelEmitter::onThreadZero(Value tid, function_ref<void()> body) {
  Value first =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, tid, idx(0));
  auto ifFirst = scf::IfOp::create(b, loc, first, /*withElseRegion=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifFirst.thenBlock());
  body();
}

void KernelEmitter::emitWaitUntil(Value tid, Value memref, Value index,
                                  Value targetI32) {
  onThreadZero(tid, [&] {
    auto loop = scf::WhileOp::create(b, loc, TypeRange{}, ValueRange{});
    Block *before = b.createBlock(&loop.getBefore());
    // An atomic add of zero is the poll: a plain load could be served from a
    // stale cache line.
    Value word = atomicAddI32(memref, index, i32(0));
    Value behind = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::slt,
        arith::SubIOp::create(b, loc, word, targetI32), i32(0));
    scf::ConditionOp::create(b, loc, behind, ValueRange{});
    b.createBlock(&loop.getAfter());
    ROCDL::SSleepOp::create(b, loc, 1);
    scf::YieldOp::create(b, loc);
    (void)before;
    b.setInsertionPointAfter(loop);
  });
  gpu::BarrierOp::create(b, loc);
}

/// max |v| over a 1x32 block given as eight vector<4xf32>; NaN propagates
/// (arith.maximumf), which both block quantisers rely on.
static Value blockAmax(OpBuilder &b, Location loc, ArrayRef<Value> values) {
  Value amax4 = math::AbsFOp::create(b, loc, values[0]);
  for (Value v : values.drop_front())
    amax4 = arith::MaximumFOp::create(b, loc, amax4,
                                      math::AbsFOp::create(b, loc, v));
  Value amax = vector::ExtractOp::create(b, loc, amax4, 0);
  for (int64_t i = 1; i < 4; ++i)
    amax = arith::MaximumFOp::create(
        b, loc, amax, vector::ExtractOp::create(b, loc, amax4, i));
  return amax;
}

void KernelEmitter::storeFp8Block(ArrayRef<Value> values, Value outBuf,
                                  Value outDword, Value outScaleBuf,
                                  Value scaleIndex) {
  Fp8Block block = quantiseFp8Block(values);
  for (int64_t half = 0; half < 2; ++half)
    store16(block.chunks[half], outBuf, add(outDword, idx(4 * half)));
  memref::StoreOp::create(b, loc, block.scale, outScaleBuf,
                          ValueRange{scaleIndex});
}

KernelEmitter::Fp8Block
KernelEmitter::quantiseFp8Block(ArrayRef<Value> values) {
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  Value amax = blockAmax(b, loc, values);
  amax = arith::MaximumFOp::create(
      b, loc, amax, arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1e-4f)));
  // Smallest e with 448 * 2^e >= amax. With amax = M * 2^E, M in [1, 2), and
  // 448 = 1.75 * 2^8: e = E - 8, plus one when M > 1.75 (mantissa field
  // above 0x600000). Exact, with no rounding of amax / 448.
  Value bits = arith::BitcastOp::create(b, loc, b.getI32Type(), amax);
  Value biasedE = arith::ShRUIOp::create(b, loc, bits, i32(23));
  Value mantissa = arith::AndIOp::create(b, loc, bits, i32(0x7fffff));
  Value above = arith::ExtUIOp::create(
      b, loc, b.getI32Type(),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, mantissa,
                            i32(0x600000)));
  // code = e + 127 = biasedE - 8 + above, clamped to [1, 254].
  Value code = arith::AddIOp::create(
      b, loc, arith::SubIOp::create(b, loc, biasedE, i32(8)), above);
  code = arith::MaxSIOp::create(b, loc, code, i32(1));
  code = arith::MinSIOp::create(b, loc, code, i32(254));
  // Multiplier 2^-e as FP32 bits: biased exponent 127 - e = 254 - code.
  Value inverseBits = arith::ShLIOp::create(
      b, loc, arith::SubIOp::create(b, loc, i32(254), code), i32(23));
  Value inverse = arith::BitcastOp::create(b, loc, b.getF32Type(), inverseBits);
  Value inverse4 = vector::BroadcastOp::create(b, loc, f32x4, inverse);

  auto fp8x4 = VectorType::get({4}, b.getType<Float8E4M3FNType>());
  SmallVector<Value> dwords;
  for (Value v : values) {
    Value scaled = arith::MulFOp::create(b, loc, v, inverse4);
    Value fp8 = arith::TruncFOp::create(b, loc, fp8x4, scaled);
    dwords.push_back(vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), fp8));
  }
  Fp8Block block;
  for (int64_t half = 0; half < 2; ++half) {
    Value chunk = vector::ShuffleOp::create(b, loc, dwords[4 * half],
                                            dwords[4 * half + 1],
                                            ArrayRef<int64_t>{0, 1});
    Value chunk2 = vector::ShuffleOp::create(b, loc, dwords[4 * half + 2],
                                             dwords[4 * half + 3],
                                             ArrayRef<int64_t>{0, 1});
    block.chunks[half] = vector::ShuffleOp::create(
        b, loc, chunk, chunk2, ArrayRef<int64_t>{0, 1, 2, 3});
  }
  block.scale = arith::TruncIOp::create(b, loc, b.getI8Type(), code);
  return block;
}

void KernelEmitter::storeFp4Block(ArrayRef<Value> values, Value outBuf,
                                  Value outDword, Value outScaleBuf,
                                  Value scaleIndex) {
  auto f32 = b.getF32Type();
  auto i32Type = b.getI32Type();
  auto f32x4 = VectorType::get({4}, f32);
  auto i32x4 = VectorType::get({4}, i32Type);
  auto splat = [&](int64_t value) -> Value {
    return arith::ConstantOp::create(
        b, loc, i32x4,
        DenseElementsAttr::get(i32x4, static_cast<int32_t>(value)));
  };
  auto cmp = [&](arith::CmpIPredicate pred, Value x, Value y) -> Value {
    return arith::CmpIOp::create(b, loc, pred, x, y);
  };
  auto select = [&](Value cond, Value x, Value y) -> Value {
    return arith::SelectOp::create(b, loc, cond, x, y);
  };
  Value amax = blockAmax(b, loc, values);
  Value bits = arith::AndIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32Type, amax), i32(0x7fffffff));
  Value nonFinite = cmp(arith::CmpIPredicate::eq,
                        arith::ShRUIOp::create(b, loc, bits, i32(23)), i32(255));
  // AITER: (bits + 0x200000) & 0x7F800000 is amax rounded up to a power of
  // two exactly when its significand is >= 1.75; the scale is that power
  // over 4 (E2M1's largest exponent is 2). No carry reaches the sign: bits
  // of a finite amax are at most 0x7F7FFFFF.
  Value rounded = arith::ShRUIOp::create(
      b, loc, arith::AddIOp::create(b, loc, bits, i32(0x200000)), i32(23));
  Value code = arith::MaxSIOp::create(
      b, loc, arith::SubIOp::create(b, loc, rounded, i32(2)), i32(0));
  // Rounded past FP32's range: AITER's log2 of infinity, clamped to 254.
  code = select(cmp(arith::CmpIPredicate::eq, rounded, i32(255)), i32(254),
                code);
  code = select(nonFinite, i32(255), code);
  // 1 / scale = 2^(127 - code) as FP32 bits (biased exponent 254 - code);
  // code 254 needs 2^-127, a subnormal: take 2^-126, then halve.
  Value clamped = arith::MinSIOp::create(b, loc, code, i32(253));
  Value inverse = arith::BitcastOp::create(
      b, loc, f32,
      arith::ShLIOp::create(
          b, loc, arith::SubIOp::create(b, loc, i32(254), clamped), i32(23)));
  Value half = select(
      cmp(arith::CmpIPredicate::eq, code, i32(254)),
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(0.5f)),
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(1.0f)));
  Value inverse4 = vector::BroadcastOp::create(b, loc, f32x4, inverse);
  Value half4 = vector::BroadcastOp::create(b, loc, f32x4, half);

  // E2M1 round to nearest even of a magnitude q: the code is the number of
  // rounding boundaries q has passed (ties go to the even code: q above
  // 0.25, 1.25, 2.5, 5; q at or above 0.75, 1.75, 3.5), which saturates at
  // code 7 (6). For q >= 0 the FP32 bits order as the values do.
  struct Boundary {
    uint32_t bits;
    bool inclusive;
  };
  const Boundary boundaries[] = {
      {0x3E800000u, false}, // 0.25
      {0x3F400000u, true},  // 0.75
      {0x3FA00000u, false}, // 1.25
      {0x3FE00000u, true},  // 1.75
      {0x40200000u, false}, // 2.5
      {0x40600000u, true},  // 3.5
      {0x40A00000u, false}, // 5
  };
  SmallVector<Value> nibbles;
  for (auto [index, v] : llvm::enumerate(values)) {
    Value q = arith::MulFOp::create(
        b, loc, arith::MulFOp::create(b, loc, v, inverse4), half4);
    Value qBits = arith::BitcastOp::create(b, loc, i32x4, q);
    Value magnitude =
        arith::AndIOp::create(b, loc, qBits, splat(0x7fffffff));
    Value nibble = arith::ShLIOp::create(
        b, loc, arith::ShRUIOp::create(b, loc, qBits, splat(31)), splat(3));
    for (const Boundary &bound : boundaries) {
      Value passed = cmp(bound.inclusive ? arith::CmpIPredicate::uge
                                         : arith::CmpIPredicate::ugt,
                         magnitude, splat(bound.bits));
      nibble = arith::AddIOp::create(
          b, loc, nibble, arith::ExtUIOp::create(b, loc, i32x4, passed));
    }
    // Element e of values[q] is element 4 (q % 2) + e of its word.
    const int32_t shift = 16 * int32_t(index % 2);
    auto shifts = arith::ConstantOp::create(
        b, loc, i32x4,
        DenseElementsAttr::get(i32x4, ArrayRef<int32_t>{shift, shift + 4,
                                                        shift + 8, shift + 12}));
    nibbles.push_back(arith::ShLIOp::create(b, loc, nibble, shifts));
  }
  // Word w holds elements 8w..8w+7, element j of it in bits 4j..4j+3: the
  // OR of the eight shifted nibbles of values[2w] and values[2w + 1],
  // reduced by ORs of whole-vector shuffles (no scalar extracts, which
  // the canonicalizer would gather into vector.from_elements).
  auto orOf = [&](Value x, Value y) -> Value {
    return arith::OrIOp::create(b, loc, x, y);
  };
  auto shuffle = [&](Value x, Value y, ArrayRef<int64_t> mask) -> Value {
    return vector::ShuffleOp::create(b, loc, x, y, mask);
  };
  // Per word, four partial ORs.
  SmallVector<Value> partials;
  for (int64_t w = 0; w < 4; ++w)
    partials.push_back(orOf(nibbles[2 * w], nibbles[2 * w + 1]));
  // Two partials each of words x and y: [x01, x23, y01, y23].
  auto pairOf = [&](Value x, Value y) {
    return orOf(shuffle(x, y, {0, 1, 4, 5}), shuffle(x, y, {2, 3, 6, 7}));
  };
  Value low = pairOf(partials[0], partials[1]);
  Value high = pairOf(partials[2], partials[3]);
  Value words =
      orOf(shuffle(low, high, {0, 2, 4, 6}), shuffle(low, high, {1, 3, 5, 7}));
  words = select(nonFinite, splat(0), words);
  store16(words, outBuf, outDword);
  Value codeByte = arith::TruncIOp::create(b, loc, b.getI8Type(), code);
  memref::StoreOp::create(b, loc, codeByte, outScaleBuf, ValueRange{scaleIndex});
}

FailureOr<gpu::GPUFuncOp> KernelEmitter::createKernel(StringRef name,
                                                      ArrayRef<Type> argTypes,
                                                      const KernelAbi &abi,
                                                      int64_t ldsDwords) {
  if (argTypes.size() != abi.args.size())
    return emitError(loc) << "kernel " << name << " has " << argTypes.size()
                          << " arguments but its ABI lists " << abi.args.size();
  for (auto [type, arg] : llvm::zip_equal(argTypes, abi.args)) {
    bool isBuffer = isa<MemRefType>(type);
    if (isBuffer != (arg.kind == KernelArg::Kind::Buffer))
      return emitError(loc) << "kernel " << name << " argument '" << arg.name
                            << "' is " << type << " but its ABI says "
                            << abi::argKindName(arg.kind);
  }
  const int64_t workgroupSize = abi.workgroupSize;
  auto module = gpu::GPUModuleOp::create(b, loc, name);
  b.setInsertionPointToStart(module.getBody());
  SmallVector<Type> lds;
  if (ldsDwords > 0)
    lds.push_back(ldsBuffer(ldsDwords));
  auto func = gpu::GPUFuncOp::create(
      b, loc, name, FunctionType::get(b.getContext(), argTypes, {}),
      /*workgroupAttributions=*/lds, /*privateAttributions=*/TypeRange{});
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(workgroupSize), 1, 1}));
  b.setInsertionPointToStart(&func.getBody().front());
  return func;
}

} // namespace moec
