//===- PeerBuffer.h - views of a rank's symmetric buffer --------*- C++ -*-===//
///
/// \file
/// The fused MegaMoE kernels take one base pointer per rank: the rank's
/// symmetric buffer, whose regions (control words, combine rows, receive
/// rows, scales and metadata) lie at the byte offsets of
/// moec/abi/peer_protocol.h (peer::bufferLayout). A kernel sees the buffer
/// as an i8 memref and each region as a typed memref.view of it, made where
/// the region is used, so that only the ep bases are kernel arguments.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_LIB_PEERBUFFER_H
#define MOEC_CODEGEN_LIB_PEERBUFFER_H

#include "moec/abi/peer_protocol.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cstdint>

namespace moec {

/// Static extent (bytes) of a symmetric buffer's i8 memref: the largest a
/// memref can describe with 32-bit indices. Every region starts below it
/// (peer_protocol.h puts the receive rows, the only region that may pass
/// it, last); accesses are bounded by each view's buffer descriptor.
constexpr int64_t kSymmetricExtent = (int64_t(1) << 31) - 1;

/// The type of a symmetric-buffer base argument.
inline mlir::MemRefType symmetricBufferType(mlir::MLIRContext *context) {
  auto space =
      mlir::gpu::AddressSpaceAttr::get(context, mlir::gpu::AddressSpace::Global);
  return mlir::MemRefType::get({kSymmetricExtent},
                               mlir::IntegerType::get(context, 8),
                               mlir::MemRefLayoutAttrInterface(), space);
}

/// The region at `byteOffset` of the symmetric buffer `base`, as a 1-D
/// memref of `elements` x `elementType` (memref.view). `byteOffset` must
/// be below kSymmetricExtent (a 32-bit index).
inline mlir::Value symmetricRegion(mlir::OpBuilder &b, mlir::Location loc,
                                   mlir::Value base, int64_t byteOffset,
                                   int64_t elements, mlir::Type elementType) {
  auto baseType = mlir::cast<mlir::MemRefType>(base.getType());
  auto type = mlir::MemRefType::get({elements}, elementType,
                                    mlir::MemRefLayoutAttrInterface(),
                                    baseType.getMemorySpace());
  mlir::Value shift = mlir::arith::ConstantIndexOp::create(b, loc, byteOffset);
  return mlir::memref::ViewOp::create(b, loc, type, base, shift,
                                      mlir::ValueRange{});
}

/// Fails (with `what` in the message) when a region of `layout` starts at
/// or past kSymmetricExtent, which a 32-bit index cannot reach.
inline mlir::LogicalResult checkSymmetricLayout(mlir::Operation *op,
                                                const peer::BufferLayout &layout) {
  if (layout.recv_a < kSymmetricExtent)
    return mlir::success();
  return op->emitOpError("the receive rows of the symmetric buffer start at byte ")
         << layout.recv_a << ", past the 2^31 - 1 a 32-bit index reaches "
         << "(fewer max_tokens)";
}

} // namespace moec

#endif // MOEC_CODEGEN_LIB_PEERBUFFER_H
