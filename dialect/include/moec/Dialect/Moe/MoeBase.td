//===- MoeBase.td - moe dialect definition -----------------*- tablegen -*-===//
//
// The `moe` dialect describes Mixture-of-Experts GPU kernels at the level a
// tuning engineer thinks about them: the problem (shapes, expert count, data
// types) and a tile configuration. Each stage op declares one kernel; codegen
// lowers it to a gpu.func.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_DIALECT_MOE_MOEBASE_TD
#define MOEC_DIALECT_MOE_MOEBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Moe_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::moec::moe";
  let summary = "Mixture-of-Experts kernel stages and their tuning knobs";
  let description = [{
    The `moe` dialect is the input language of moec. A module holds one op
    per kernel to build. Every op carries a `#moe.problem` attribute (the
    layer's shape and data types) and a `#moe.tile` attribute (the tuning
    configuration). Verifiers reject configurations that cannot work and name
    the offending field, so a bad tuning-table row fails before any code is
    generated.

    Codegen (`moe-lower-to-kernel`) turns each op into a `gpu.module` holding
    one `gpu.func` built from scf, arith, vector, memref, gpu and amdgpu ops;
    that kernel IR is what the CPU emulator executes and what the upstream
    ROCDL lowering turns into gfx950 machine code.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = [
    "::mlir::gpu::GPUDialect",
    "::mlir::amdgpu::AMDGPUDialect"
  ];
}

class Moe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Moe_Dialect, mnemonic, traits>;

class Moe_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Moe_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // MOEC_DIALECT_MOE_MOEBASE_TD
