//===- TestSupport.cpp ----------------------------------------------------===//

#include "TestSupport.h"

#include "moec/Harness/StageKernel.h"

#include "mlir/Dialect/AMDGPU/IR/AMDGPUDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

namespace moec::emu::test {

mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    auto *c = new mlir::MLIRContext();
    c->loadDialect<mlir::amdgpu::AMDGPUDialect, mlir::arith::ArithDialect,
                   mlir::gpu::GPUDialect, mlir::math::MathDialect,
                   mlir::memref::MemRefDialect, mlir::ROCDL::ROCDLDialect,
                   mlir::scf::SCFDialect, mlir::vector::VectorDialect>();
    return c;
  }();
  return *ctx;
}

mlir::MLIRContext &stageContext() {
  static mlir::MLIRContext *ctx = [] {
    auto *c = new mlir::MLIRContext();
    prepareContext(*c);
    return c;
  }();
  return *ctx;
}

void buildKernelOrFail(const StageSpec &spec, BuiltKernel &kernel) {
  std::string error;
  const bool ok =
      mlir::succeeded(buildKernelIR(stageContext(), spec, kernel, error));
  INFO(error);
  REQUIRE(ok);
}

BuiltStage buildStageOrFail(const StageSpec &spec) {
  BuiltStage built;
  built.kernel = std::make_unique<BuiltKernel>();
  buildKernelOrFail(spec, *built.kernel);
  std::string error;
  built.harness = StageHarness::create(*built.kernel, error);
  INFO(error);
  REQUIRE(built.harness);
  return built;
}

ParsedKernel parseKernel(const std::string &text) {
  ParsedKernel kernel;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context(), [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  kernel.module = mlir::parseSourceString<mlir::ModuleOp>(text, &context());
  INFO(diagnostics);
  REQUIRE(kernel.module);
  kernel.module->walk([&](mlir::gpu::GPUFuncOp func) { kernel.func = func; });
  REQUIRE(kernel.func);
  return kernel;
}

RunResult runOrFail(ParsedKernel &kernel, GlobalMemory &memory,
                    const std::vector<KernelArgValue> &args,
                    LaunchConfig launch) {
  std::string error;
  mlir::FailureOr<RunResult> result =
      runKernel(kernel.func, memory, args, launch, error);
  INFO(error);
  REQUIRE(mlir::succeeded(result));
  for (const Finding &finding : result->findings)
    UNSCOPED_INFO(finding.str());
  return std::move(*result);
}

std::vector<KernelArgValue> bufferArgs(std::initializer_list<unsigned> ids) {
  std::vector<KernelArgValue> args;
  for (unsigned id : ids)
    args.push_back(KernelArgValue::makeBuffer(id));
  return args;
}

std::string kernelText(const std::string &name, const std::string &signature,
                       const std::string &body, int lanes) {
  // A leading newline, as the tests' raw strings have: line numbers in
  // findings are the same as in the text the test shows.
  return "\ngpu.module @m {\n  gpu.func @" + name + signature +
         " kernel\n      attributes {known_block_size = array<i32: " +
         std::to_string(lanes) + ", 1, 1>} {\n    %tid = gpu.thread_id x" +
         body + "    gpu.return\n  }\n}\n";
}

BufferRun::BufferRun(ParsedKernel &kernel, const std::vector<BufferArg> &args,
                     LaunchConfig launch) {
  std::vector<KernelArgValue> values;
  for (const BufferArg &arg : args) {
    const unsigned id = memory.addBuffer(arg.name, arg.bytes);
    if (arg.written)
      memory.write(id, 0, arg.values.data(), arg.bytes);
    ids.emplace_back(arg.name, id);
    values.push_back(KernelArgValue::makeBuffer(id));
  }
  result = runOrFail(kernel, memory, values, launch);
}

unsigned BufferRun::id(const std::string &name) const {
  for (const auto &[argName, id] : ids)
    if (argName == name)
      return id;
  FAIL("no buffer argument named " << name);
  return 0;
}

OutputRun::OutputRun(const std::string &text, uint64_t outBytes,
                     LaunchConfig launch)
    : kernel(parseKernel(text)), out(memory.addBuffer("out", outBytes)),
      result(runOrFail(kernel, memory, bufferArgs({out}), launch)) {}

} // namespace moec::emu::test
