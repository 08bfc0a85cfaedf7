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

void KernelEmitter::storeFp8Block(ArrayRef<Value> values, Value outBuf,
                                  Value outDword, Value outScaleBuf,
                                  Value scaleIndex) {
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  // amax over the 32 values.
  Value amax4 = math::AbsFOp::create(b, loc, values[0]);
  for (Value v : values.drop_front())
    amax4 = arith::MaximumFOp::create(b, loc, amax4,
                                      math::AbsFOp::create(b, loc, v));
  Value amax = vector::ExtractOp::create(b, loc, amax4, 0);
  for (int64_t i = 1; i < 4; ++i)
    amax = arith::MaximumFOp::create(
        b, loc, amax, vector::ExtractOp::create(b, loc, amax4, i));
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
  for (int64_t half = 0; half < 2; ++half) {
    Value chunk = vector::ShuffleOp::create(b, loc, dwords[4 * half],
                                            dwords[4 * half + 1],
                                            ArrayRef<int64_t>{0, 1});
    Value chunk2 = vector::ShuffleOp::create(b, loc, dwords[4 * half + 2],
                                             dwords[4 * half + 3],
                                             ArrayRef<int64_t>{0, 1});
    Value four = vector::ShuffleOp::create(b, loc, chunk, chunk2,
                                           ArrayRef<int64_t>{0, 1, 2, 3});
    store16(four, outBuf, add(outDword, idx(4 * half)));
  }
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
