//===- KernelBuilders.h - moe stage op -> gpu.func builders -----*- C++ -*-===//

#ifndef MOEC_CODEGEN_KERNELBUILDERS_H
#define MOEC_CODEGEN_KERNELBUILDERS_H

#include "moec/Codegen/KernelAbi.h"

#include "mlir/Support/LLVM.h"

namespace mlir {
class OpBuilder;
namespace gpu {
class GPUModuleOp;
} // namespace gpu
} // namespace mlir

namespace moec {
namespace moe {
class CombineOp;
class QuantOp;
class SortOp;
class W13Op;
class W2Op;
} // namespace moe

/// The argument list and launch rule of the W2 kernel for `op`.
KernelAbi getW2KernelAbi(moe::W2Op op);

/// Builds the gpu.module holding the W2 kernel for `op` at the builder's
/// insertion point. Fails (with a diagnostic on `op`) when the configuration
/// cannot be generated.
mlir::FailureOr<mlir::gpu::GPUModuleOp> buildW2Kernel(mlir::OpBuilder &builder,
                                                      moe::W2Op op);

/// The argument list and launch rule of the W13 kernel for `op`.
KernelAbi getW13KernelAbi(moe::W13Op op);

/// Builds the gpu.module holding the W13 kernel for `op`.
mlir::FailureOr<mlir::gpu::GPUModuleOp> buildW13Kernel(mlir::OpBuilder &builder,
                                                       moe::W13Op op);

/// The argument list and launch rule of the combine kernel for `op`.
KernelAbi getCombineKernelAbi(moe::CombineOp op);

/// Builds the gpu.module holding the weighted-combine kernel for `op`.
mlir::FailureOr<mlir::gpu::GPUModuleOp>
buildCombineKernel(mlir::OpBuilder &builder, moe::CombineOp op);

/// The argument list and launch rule of the routing-sort kernel for `op`.
KernelAbi getSortKernelAbi(moe::SortOp op);

/// Builds the gpu.module holding the routing-sort kernel for `op`.
mlir::FailureOr<mlir::gpu::GPUModuleOp> buildSortKernel(mlir::OpBuilder &builder,
                                                        moe::SortOp op);

/// The argument list and launch rule of the input-quantisation kernel for
/// `op`.
KernelAbi getQuantKernelAbi(moe::QuantOp op);

/// Builds the gpu.module holding the input-quantisation kernel for `op`.
mlir::FailureOr<mlir::gpu::GPUModuleOp>
buildQuantKernel(mlir::OpBuilder &builder, moe::QuantOp op);

} // namespace moec

#endif // MOEC_CODEGEN_KERNELBUILDERS_H
