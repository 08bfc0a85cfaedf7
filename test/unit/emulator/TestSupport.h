//===- TestSupport.h - parse and run small kernels in tests -----*- C++ -*-===//

#ifndef MOEC_TEST_UNIT_EMULATOR_TESTSUPPORT_H
#define MOEC_TEST_UNIT_EMULATOR_TESTSUPPORT_H

#include "moec/Emulator/Emulator.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "moec/Harness/StageHarness.h"

#include <memory>

namespace moec::emu::test {

/// A context with the kernel-IR dialects loaded (shared by all tests).
mlir::MLIRContext &context();

/// A context with every moec dialect loaded (emu::prepareContext), for the
/// tests that build stage ops and lower them (shared by all tests).
mlir::MLIRContext &stageContext();

/// A stage kernel built from a spec at the test problem and its harness
/// (which refers to the kernel: keep both).
struct BuiltStage {
  std::unique_ptr<BuiltKernel> kernel;
  std::unique_ptr<StageHarness> harness;
  const StageShape &shape() const { return harness->shape(); }
};

/// Builds `spec`'s kernel in stageContext() into `kernel`; fails the
/// current test with the error when it cannot be made.
void buildKernelOrFail(const StageSpec &spec, BuiltKernel &kernel);

/// Builds `spec`'s kernel in stageContext() and its harness; fails the
/// current test with the error when either cannot be made.
BuiltStage buildStageOrFail(const StageSpec &spec);

/// A parsed kernel: the module owns the gpu.func.
struct ParsedKernel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::gpu::GPUFuncOp func;
};

/// MLIR text of a gpu.module @m holding one kernel @`name`: `signature` is
/// its parameter list (and workgroup attributions), `lanes` its workgroup
/// size (known_block_size); the body defines %tid (gpu.thread_id x), then
/// runs `body`, then returns.
std::string kernelText(const std::string &name, const std::string &signature,
                       const std::string &body, int lanes = 64);

/// Parses MLIR text holding one gpu.module with one gpu.func; fails the
/// current test on a parse error.
ParsedKernel parseKernel(const std::string &text);

/// Runs with one workgroup by default; fails the test on a hard error.
RunResult runOrFail(ParsedKernel &kernel, GlobalMemory &memory,
                    const std::vector<KernelArgValue> &args,
                    LaunchConfig launch = LaunchConfig());

/// Kernel arguments that are all buffers, in order.
std::vector<KernelArgValue> bufferArgs(std::initializer_list<unsigned> ids);

/// The run most single-kernel tests make: a kernel whose only argument is
/// an output buffer "out", run once (runOrFail).
struct OutputRun {
  /// Parses `text` and runs it on a fresh `outBytes`-byte buffer "out".
  OutputRun(const std::string &text, uint64_t outBytes,
            LaunchConfig launch = LaunchConfig());

  ParsedKernel kernel;
  GlobalMemory memory;
  unsigned out = 0;
  RunResult result;
};

template <typename T>
unsigned addInput(GlobalMemory &memory, const std::string &name,
                  const std::vector<T> &values) {
  unsigned id = memory.addBuffer(name, values.size() * sizeof(T));
  memory.write(id, 0, values.data(), values.size() * sizeof(T));
  return id;
}

template <typename T>
std::vector<T> readBuffer(const GlobalMemory &memory, unsigned id) {
  std::vector<T> values(memory.size(id) / sizeof(T));
  std::memcpy(values.data(), memory.data(id), values.size() * sizeof(T));
  return values;
}

/// One buffer argument of a BufferRun: written from values (an input), or
/// `bytes` bytes the host never writes (an output).
struct BufferArg {
  std::string name;
  uint64_t bytes = 0;
  bool written = false;
  std::vector<uint8_t> values;

  template <typename T>
  static BufferArg input(std::string name, const std::vector<T> &values) {
    BufferArg arg{std::move(name), values.size() * sizeof(T), true, {}};
    arg.values.resize(arg.bytes);
    std::memcpy(arg.values.data(), values.data(), arg.bytes);
    return arg;
  }
  static BufferArg output(std::string name, uint64_t bytes) {
    return BufferArg{std::move(name), bytes, false, {}};
  }
};

/// The run of a kernel whose arguments are all buffers: `args` in order,
/// on fresh memory, run once (runOrFail).
struct BufferRun {
  BufferRun(ParsedKernel &kernel, const std::vector<BufferArg> &args,
            LaunchConfig launch = LaunchConfig());

  /// The buffer id of the argument named `name` (it must be one).
  unsigned id(const std::string &name) const;
  template <typename T> std::vector<T> read(const std::string &name) const {
    return readBuffer<T>(memory, id(name));
  }

  GlobalMemory memory;
  std::vector<std::pair<std::string, unsigned>> ids;
  RunResult result;
};

/// Number of findings of `kind`.
inline uint64_t countOf(const RunResult &result, FindingKind kind) {
  return result.findingCounts[static_cast<int>(kind)];
}

} // namespace moec::emu::test

#endif
