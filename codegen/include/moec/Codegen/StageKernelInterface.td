//===- StageKernelInterface.td - a stage op's kernel ------*- tablegen -*-===//
//
// The codegen's half of a stage op: its kernel ABI and the builder of its
// gpu.module. The moe dialect's StageOpInterface holds the rest (stage,
// problem, symbol, LDS, target checks); this half lives here because it
// needs the codegen, which the dialect library must not depend on. The
// codegen attaches it to the stage ops as external models
// (registerStageKernelInterfaceModels, StageKernelModels.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_STAGEKERNELINTERFACE_TD
#define MOEC_CODEGEN_STAGEKERNELINTERFACE_TD

include "mlir/IR/OpBase.td"

def StageKernelInterface : OpInterface<"StageKernelInterface"> {
  let cppNamespace = "::moec";
  let description = [{
    How a moe stage op becomes a kernel: the argument list and launch rule
    the manifest records (`KernelAbi`), and the builder of the gpu.module
    holding its gpu.func (`moe-lower-to-kernel`). Attached from the
    codegen to every op with the dialect's `StageOpInterface`, each model
    delegating to the stage's `getXKernelAbi` and `buildXKernel`
    (KernelBuilders.h).
  }];
  let methods = [
    InterfaceMethod<[{
        The kernel's arguments, launch geometry rule and workgroup size.
      }], "::moec::KernelAbi", "getKernelAbi">,
    InterfaceMethod<[{
        Builds the gpu.module holding the kernel at the builder's insertion
        point. Fails (with a diagnostic on the op) when the configuration
        cannot be generated.
      }], "::mlir::FailureOr<::mlir::gpu::GPUModuleOp>", "buildKernel",
      (ins "::mlir::OpBuilder &":$builder)>,
  ];
}

#endif // MOEC_CODEGEN_STAGEKERNELINTERFACE_TD
