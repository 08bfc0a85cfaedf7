//===- MoeInterfaces.td - the stage op interface -----------*- tablegen -*-===//
//
// What every stage op of the moe dialect answers: its stage, its problem,
// its kernel symbol, its LDS and its legality on a chip. The kernel ABI and
// the kernel builder are the codegen's (moec/Codegen/StageKernelInterface.td,
// attached to the same ops from codegen), so the dialect library does not
// depend on the codegen.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOEINTERFACES_TD
#define MOEC_DIALECT_MOE_MOEINTERFACES_TD

include "mlir/IR/OpBase.td"

def Moe_StageOpInterface : OpInterface<"StageOpInterface"> {
  let cppNamespace = "::moec::moe";
  let description = [{
    An op that declares one kernel stage of a MoE layer (`moe.quant`,
    `moe.sort`, `moe.w13`, `moe.w2`, `moe.combine`). Passes and the compiler
    handle stage ops through this interface instead of listing the op
    classes: the stage as the `Stage` enum, the layer's problem, the kernel
    symbol, the LDS the kernel allocates and the checks against a chip's
    facts. The kernel's argument list and its builder are the codegen's
    `StageKernelInterface`, attached to the same ops from the codegen.
  }];
  let methods = [
    InterfaceMethod<[{
        The stage of the op's kernel. The op's mnemonic is the stage's name
        (`moe.w13` is `Stage::w13`); the compiler test `[stage]` checks every
        stage op.
      }], "::moec::moe::Stage", "getStage", (ins), [{}], [{
        return ::moec::moe::stageOfOpName(ConcreteOp::getOperationName());
      }]>,
    InterfaceMethod<[{
        The layer the kernel is built for: its dims and element types.
      }], "::moec::moe::ProblemAttr", "getProblem", (ins), [{}], [{
        return $_op.getProblem();
      }]>,
    InterfaceMethod<[{
        The kernel's symbol (MoeNaming.cpp): its stage, types, problem and
        every knob away from its ODS default.
      }], "std::string", "getKernelSymbol">,
    InterfaceMethod<[{
        Bytes of LDS the kernel allocates on the op's own chip (its
        `moe.target`), including the `tile.residency_cap` padding.
      }], "int64_t", "getLdsBytes">,
    InterfaceMethod<[{
        Checks the op against `chip`'s facts (features and limits), one
        error per problem; see moe::verifyOnTarget.
      }], "::mlir::LogicalResult", "verifyOnTarget",
      (ins "const ::moec::target::TargetInfo &":$chip)>,
  ];
}

#endif // MOEC_DIALECT_MOE_MOEINTERFACES_TD
