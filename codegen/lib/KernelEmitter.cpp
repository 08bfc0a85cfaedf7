//===- KernelEmitter.cpp - builder shorthands of the kernel emitters -----===//

#include "KernelEmitter.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
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
                            << rt::argKindName(arg.kind);
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
