//===- TableCompiler.cpp - tuning table -> compiled kernels ---------------===//

#include "moec/Compiler/TableCompiler.h"
#include "moec/Compiler/CodeObjectMetadata.h"
#include "moec/Compiler/CompileCache.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/KernelIr.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/Dialect/Moe/MoeTarget.h"
#include "moec/Isa/Verify.h"

#include "IsaGate.h"
#include "moec/bundle.h"
#include "moec/hash.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <cstring>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace mlir;

namespace moec {
std::string hashHex(const void *data, size_t size) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(rt::xxh64(data, size)));
  return text;
}

namespace {

/// "file:line: field 'f': " of a table line.
std::string lineField(const SourceLine &where, const char *field) {
  return where.file + ":" + std::to_string(where.line) + ": field '" + field +
         "': ";
}

/// The ISA gate's repairs as the compile cache keeps them beside the
/// repaired code object: one "address wait_states rule" line each.
std::vector<uint8_t> encodeRepairs(const std::vector<rt::IsaRepairInfo> &repairs) {
  std::string text;
  for (const rt::IsaRepairInfo &r : repairs)
    text += std::to_string(r.address) + " " + std::to_string(r.waitStates) +
            " " + r.rule + "\n";
  return std::vector<uint8_t>(text.begin(), text.end());
}

/// encodeRepairs read back; a malformed line (a damaged cache) is dropped.
std::vector<rt::IsaRepairInfo> decodeRepairs(const std::vector<uint8_t> &bytes) {
  std::vector<rt::IsaRepairInfo> out;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(reinterpret_cast<const char *>(bytes.data()), bytes.size())
      .split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    auto [address, rest] = line.split(' ');
    auto [waits, rule] = rest.split(' ');
    rt::IsaRepairInfo r;
    if (address.getAsInteger(10, r.address) || waits.getAsInteger(10, r.waitStates) ||
        rule.empty())
      continue;
    r.rule = rule.str();
    out.push_back(std::move(r));
  }
  return out;
}

moe::PeerTransportAttr peerOf(Operation *op) {
  if (auto w13 = dyn_cast<moe::W13Op>(op))
    return w13.getPeerAttr();
  if (auto w2 = dyn_cast<moe::W2Op>(op))
    return w2.getPeerAttr();
  return {};
}

} // namespace

FusedHandshake fusedHandshakeOf(Operation *op) {
  moe::PeerTransportAttr peer = peerOf(op);
  if (!peer)
    return {};
  const int64_t waves = isa<moe::W13Op>(op)
                            ? cast<moe::W13Op>(op).getTile().getWaves()
                            : cast<moe::W2Op>(op).getTile().getWaves();
  FusedHandshake out;
  // A split dispatch's two W13 kernels are two stages.
  out.stage = op->getName().getStringRef().str() + " dispatch=" +
              moe::stringifyPeerDispatch(peer.getDispatch()).str();
  out.counts = "waves=" + std::to_string(waves) +
               " workgroups=" + std::to_string(peer.getWorkgroups()) +
               " dispatch_cus=" + std::to_string(peer.getDispatchCus()) +
               " plan_cus=" + std::to_string(peer.getPlanCus()) +
               " work_shards=" + std::to_string(peer.getWorkShards());
  return out;
}

bool checkSelections(const TuningTable &table,
                     const std::map<std::string, Operation *> &ops,
                     std::vector<uint32_t> &selectionMaxTokens,
                     std::string &error) {
  selectionMaxTokens.clear();
  for (const TableSelection &s : table.selections) {
    uint32_t capacity = 0;
    // Per fused stage: the first kernel the rows reach and its handshake.
    std::map<std::string, std::pair<std::string, std::string>> handshakes;
    for (const TableRow &r : s.rows)
      for (const std::string &name : table.findConfig(r.config)->kernels) {
        moe::PeerTransportAttr peer = peerOf(ops.at(name));
        if (!peer)
          continue;
        const FusedHandshake fused = fusedHandshakeOf(ops.at(name));
        const std::string &handshake = fused.counts;
        auto [first, added] =
            handshakes.emplace(fused.stage, std::make_pair(name, handshake));
        if (!added && first->second.second != handshake) {
          error = lineField(r.where, "config") + "config '" + r.config +
                  "' uses fused kernel '" + name + "' with " + handshake +
                  ", but kernel '" + first->second.first +
                  "' of this selection has " + first->second.second +
                  ": the fused stages' handshake counts add up over every "
                  "forward, so one selection's configurations must agree on "
                  "them (docs/families.md)";
          return false;
        }
        const std::string transport =
            moe::stringifyPeerKind(peer.getTransport()).str();
        if (transport != s.transport) {
          error = lineField(r.where, "config") + "config '" + r.config +
                  "' uses kernel '" + name + "' with transport=" + transport +
                  ", but the selection's transport is " + s.transport;
          return false;
        }
        if (peer.getMaxTokens() < s.workspace) {
          error = lineField(r.where, "config") + "config '" + r.config +
                  "' uses kernel '" + name + "' with max_tokens=" +
                  std::to_string(peer.getMaxTokens()) +
                  ", below the selection's workspace " +
                  std::to_string(s.workspace);
          return false;
        }
        const uint32_t maxTokens = static_cast<uint32_t>(peer.getMaxTokens());
        capacity = capacity == 0 ? maxTokens : std::min(capacity, maxTokens);
        if (r.m > int64_t(maxTokens)) {
          error = lineField(r.where, "m") + "row m=" + std::to_string(r.m) +
                  " is above the capacity of config '" + r.config +
                  "' (kernel '" + name + "' has max_tokens=" +
                  std::to_string(maxTokens) + ")";
          return false;
        }
      }
    selectionMaxTokens.push_back(capacity);
  }
  return true;
}

bool checkSplitDispatch(const TuningTable &table,
                        const std::map<std::string, Operation *> &ops,
                        std::string &error) {
  for (const TableConfig &c : table.configs) {
    const std::string *onlyName = nullptr, *noneName = nullptr;
    moe::W13Op only, none;
    for (const std::string &name : c.kernels) {
      auto w13 = dyn_cast<moe::W13Op>(ops.at(name));
      if (!w13 || !w13.getPeerAttr())
        continue;
      if (w13.getPeerAttr().getDispatch() == moe::PeerDispatch::only)
        only = w13, onlyName = &name;
      else if (w13.getPeerAttr().getDispatch() == moe::PeerDispatch::none)
        none = w13, noneName = &name;
    }
    if (!only && !none)
      continue;
    if (!only || !none) {
      error = lineField(c.where, "kernels") + "config '" + c.name +
              "' needs both a dispatch=only and a dispatch=none kernel";
      return false;
    }
    // The W13 kernel waits for dispatch_cus x waves signals, one per wave
    // of each dispatch workgroup.
    const int64_t signals = none.getPeerAttr().getDispatchCus();
    const int64_t producers = only.getPeerAttr().getWorkgroups();
    const int64_t waitWaves = none.getTile().getWaves();
    const int64_t sendWaves = only.getTile().getWaves();
    if (signals != producers || waitWaves != sendWaves) {
      error = lineField(c.where, "kernels") + "config '" + c.name +
              "': kernel '" + *noneName + "' waits for dispatch_cus=" +
              std::to_string(signals) + " x waves=" +
              std::to_string(waitWaves) +
              " signals, but its dispatch kernel '" + *onlyName +
              "' has workgroups=" + std::to_string(producers) +
              " x waves=" + std::to_string(sendWaves);
      return false;
    }
  }
  return true;
}

bool checkPeerPayload(const TuningTable &table,
                      const std::map<std::string, Operation *> &ops,
                      std::string &error) {
  for (const TableConfig &c : table.configs) {
    const std::string *stage2Name = nullptr, *combineName = nullptr;
    bool fp8Payload = false, fp8Rows = false;
    for (const std::string &name : c.kernels) {
      if (auto w2 = dyn_cast<moe::W2Op>(ops.at(name)); w2 && w2.getPeerAttr()) {
        stage2Name = &name;
        fp8Payload = w2.getPeerAttr().getPayload() == moe::ActivationFormat::fp8;
      } else if (auto combine = dyn_cast<moe::CombineOp>(ops.at(name));
                 combine && combine.getPeerRows()) {
        combineName = &name;
        fp8Rows = combine.getFp8PeerRows();
      }
    }
    if (!stage2Name || !combineName || fp8Payload == fp8Rows)
      continue;
    error = lineField(c.where, "kernels") + "config '" + c.name +
            "': fused stage 2 '" + *stage2Name + "' sends " +
            (fp8Payload ? "FP8 (payload=fp8)" : "BF16 (payload=bf16)") +
            " combine rows, but combine '" + *combineName + "' reads " +
            (fp8Rows ? "FP8 rows (fp8_peer_rows=true)"
                     : "BF16 rows (fp8_peer_rows=false)");
    return false;
  }
  return true;
}

CompileStatus compileTable(const TuningTable &table,
                           const CompileOptions &options,
                           CompiledTable &compiled, std::string &error) {
  DialectRegistry registry;
  registerMoecDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Keep the first diagnostic as the one-line error; its location is the
  // table line, so it reads "table:LINE:1: error: ...".
  std::string firstDiagnostic;
  std::mutex diagnosticMutex;
  using Clock = std::chrono::steady_clock;
  auto secondsSince = [](Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const Clock::time_point frontEndStart = Clock::now();
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    std::lock_guard<std::mutex> lock(diagnosticMutex);
    if (!firstDiagnostic.empty())
      return success();
    llvm::raw_string_ostream os(firstDiagnostic);
    if (auto fileLoc = dyn_cast<FileLineColLoc>(diag.getLocation()))
      os << fileLoc.getFilename().getValue() << ":" << fileLoc.getLine()
         << ": ";
    os << diag.str();
    return success();
  });

  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  // The part is the module's moe.target: every op is verified against its
  // limits and built with its facts.
  if (options.target)
    (*module)->setAttr(moe::kTargetAttrName,
                       StringAttr::get(&context, options.target->chip.name));
  const CompileTarget &target =
      CompileTarget::of(*moe::lookupTarget(module->getOperation()));
  OpBuilder builder(&context);
  builder.setInsertionPointToEnd(module->getBody());
  compiled = CompiledTable();
  compiled.target = &target;

  // Table kernel name -> its built op, for the checks across kernels.
  std::map<std::string, Operation *> ops;
  for (const TableKernel &kernel : table.kernels) {
    StageSpec spec = stageSpecOf(table, kernel);
    StageDescription description;
    Operation *op = buildStageOp(builder, spec, description, error);
    if (!op)
      return CompileStatus::BadInput;
    auto existing = std::find_if(
        compiled.kernels.begin(), compiled.kernels.end(),
        [&](const CompiledKernel &c) { return c.symbol == description.symbol; });
    if (existing != compiled.kernels.end()) {
      if (existing->stage != kernel.stage ||
          existing->attributes != description.attributes) {
        error = kernel.where.file + ":" + std::to_string(kernel.where.line) +
                ": kernel '" + kernel.name + "' differs from kernel '" +
                existing->tableNames.front() + "' but gets the same symbol " +
                description.symbol + " (the naming rule misses a knob)";
        return CompileStatus::CheckFailed;
      }
      // Same problem and knobs: one binary serves both table names.
      op->erase();
      ops[kernel.name] = ops[existing->tableNames.front()];
      existing->tableNames.push_back(kernel.name);
      compiled.kernelIndex[kernel.name] = existing - compiled.kernels.begin();
      continue;
    }
    ops[kernel.name] = op;
    CompiledKernel entry;
    entry.tableNames = {kernel.name};
    entry.symbol = description.symbol;
    entry.stage = kernel.stage;
    entry.attributes = description.attributes;
    entry.abi = description.abi;
    entry.where = kernel.where;
    compiled.kernelIndex[kernel.name] = compiled.kernels.size();
    compiled.kernels.push_back(std::move(entry));
  }
  if (!checkSelections(table, ops, compiled.selectionMaxTokens, error) ||
      !checkSplitDispatch(table, ops, error) ||
      !checkPeerPayload(table, ops, error))
    return CompileStatus::BadInput;

  if (failed(lowerToKernelIR(*module))) {
    error = table.path + ": kernel generation failed: " + firstDiagnostic;
    return CompileStatus::CheckFailed;
  }
  compiled.frontEndSeconds = secondsSince(frontEndStart);

  // Each kernel compiles alone (its own clone, LLVM context and target
  // machine; lld is serialised inside linkHsaco), so kernels are spread
  // over threads and the results land in kernel order: the bundle is the
  // same for any number of jobs.
  CompileCache cache(options.cacheDirectory, options.cacheMaxBytes);
  std::vector<std::string> errors(compiled.kernels.size());
  std::atomic<size_t> next{0}, done{0}, fromCache{0};
  std::mutex progressMutex;
  compiled.kernelTimes.resize(compiled.kernels.size());
  auto compileOne = [&](CompiledKernel &kernel, std::string &kernelError,
                        KernelCompileTime &time) {
    std::string where = kernel.where.file + ":" +
                        std::to_string(kernel.where.line) + ": kernel " +
                        kernel.symbol + ": ";
    time.symbol = kernel.symbol;
    time.stage = kernel.stage;
    Clock::time_point phase = Clock::now();
    auto kernelIr = serializeKernelIr(*module, kernel.symbol);
    if (failed(kernelIr)) {
      kernelError = where + "cannot serialise its kernel IR";
      return;
    }
    kernel.kernelIr = std::move(*kernelIr);
    time.irSeconds = secondsSince(phase);
    phase = Clock::now();
    std::string description = std::string(abi::stageName(kernel.stage)) +
                              ";" + kernel.symbol + ";" +
                              target.chip.arch + target.features;
    for (const auto &[name, value] : kernel.attributes)
      description += ";" + name + "=" + value;
    const std::string key = CompileCache::key(kernel.kernelIr, description);
    const std::string repairKey =
        CompileCache::key(kernel.kernelIr, description + ";isa-repairs");
    if (std::optional<std::vector<uint8_t>> cached = cache.load(key)) {
      kernel.hsaco = std::move(*cached);
      if (std::optional<std::vector<uint8_t>> repairs = cache.load(repairKey))
        kernel.isaRepairs = decodeRepairs(*repairs);
      ++fromCache;
      time.fromCache = true;
      time.cacheSeconds = secondsSince(phase);
    } else {
      time.cacheSeconds = secondsSince(phase);
      phase = Clock::now();
      auto hsaco = compileKernel(*module, kernel.symbol, target);
      if (!hsaco) {
        std::lock_guard<std::mutex> lock(diagnosticMutex);
        kernelError =
            where + llvm::toString(hsaco.takeError()) + " " + firstDiagnostic;
        return;
      }
      kernel.hsaco = std::move(*hsaco);
      time.codegenSeconds = secondsSince(phase);
      phase = Clock::now();
      cache.store(key, kernel.hsaco);
      time.cacheSeconds += secondsSince(phase);
    }
    phase = Clock::now();
    auto described = readKernelResources(kernel.hsaco);
    if (!described) {
      kernelError = where + llvm::toString(described.takeError());
      return;
    }
    if (described->size() != 1) {
      kernelError = where + "expected one kernel in the code object";
      return;
    }
    kernel.resources = described->front().resources;
    const rt::KernelResources &r = kernel.resources;
    if (!options.allowSpills && (r.vgprSpill > 0 || r.sgprSpill > 0)) {
      kernelError = where + "spills " + std::to_string(r.vgprSpill) +
                    " VGPRs and " + std::to_string(r.sgprSpill) +
                    " SGPRs (resource gate)";
      return;
    }
    if (r.privateSegmentBytes > 0 && !options.allowSpills) {
      kernelError = where + "uses " + std::to_string(r.privateSegmentBytes) +
                    " bytes of scratch (resource gate)";
      return;
    }
    if (r.ldsBytes > target.chip.ldsBytesPerCu) {
      kernelError = where + "uses " + std::to_string(r.ldsBytes) +
                    " bytes of LDS; " + target.chip.name + " has " +
                    std::to_string(target.chip.ldsBytesPerCu);
      return;
    }
    if (options.verifyIsa) {
      isacheck::KernelExpectation expected;
      for (const abi::KernelArgInfo &arg : kernel.abi.args)
        expected.args.push_back(arg.kind);
      expected.workgroupSize = kernel.abi.workgroupSize;
      if (llvm::Error e = applyIsaGate(*module, kernel.symbol, target, expected,
                                       kernel.hsaco, kernel.isaRepairs)) {
        kernelError = where + llvm::toString(std::move(e));
        return;
      }
      // A repaired code object replaces the cached one, with its repairs
      // beside it, so a cache hit needs no second repair and still says
      // what was repaired.
      if (!kernel.isaRepairs.empty()) {
        cache.store(key, kernel.hsaco);
        cache.store(repairKey, encodeRepairs(kernel.isaRepairs));
      }
    }
    kernel.contentHash = hashHex(kernel.hsaco.data(), kernel.hsaco.size());
    kernel.name = kernel.symbol + "_" + kernel.contentHash.substr(0, 8);
    time.resourceSeconds = secondsSince(phase);
  };
  auto worker = [&] {
    for (size_t i; (i = next++) < compiled.kernels.size();) {
      const Clock::time_point start = Clock::now();
      compileOne(compiled.kernels[i], errors[i], compiled.kernelTimes[i]);
      compiled.kernelTimes[i].totalSeconds = secondsSince(start);
      const size_t finished = ++done;
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progressMutex);
        options.progress(finished, compiled.kernels.size(),
                         compiled.kernels[i].symbol);
      }
    }
  };
  unsigned jobs = options.jobs ? options.jobs : std::thread::hardware_concurrency();
  jobs = std::max(1u, std::min<unsigned>(jobs, unsigned(compiled.kernels.size())));
  compiled.jobs = jobs;
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < jobs; ++j)
    threads.emplace_back(worker);
  worker();
  for (std::thread &thread : threads)
    thread.join();
  compiled.kernelErrors = errors;
  compiled.kernelsFromCache = fromCache;
  compiled.corruptCacheEntries = cache.corruptEntries();
  cache.trim();
  // The first failure in kernel order, whatever order the threads ran in.
  for (const std::string &kernelError : errors)
    if (!kernelError.empty()) {
      error = kernelError;
      return CompileStatus::CheckFailed;
    }
  return CompileStatus::Ok;
}

bool checkBundleWritable(const std::string &bundlePath, std::string &error) {
  const std::string outputDir =
      bundlePath.find('/') == std::string::npos
          ? "."
          : bundlePath.substr(0, bundlePath.find_last_of('/') + 1);
  if (::access(outputDir.c_str(), W_OK | X_OK) == 0)
    return true;
  error = bundlePath + ": cannot write into " + outputDir + " (" +
          std::strerror(errno) + ")";
  return false;
}

CompileStatus compileTableToBundle(const std::string &tablePath,
                                   const std::string &bundlePath,
                                   const CompileOptions &options,
                                   CompileSummary &summary, std::string &error) {
  TuningTable table;
  if (!readTuningTable(tablePath, table, error))
    return CompileStatus::BadInput;
  if (options.rewriteTable)
    options.rewriteTable(table);
  // A bundle that cannot be written is bad input, found before compiling.
  if (!checkBundleWritable(bundlePath, error))
    return CompileStatus::BadInput;
  CompiledTable compiled;
  CompileStatus status = compileTable(table, options, compiled, error);
  if (status != CompileStatus::Ok)
    return status;
  BundleContents bundle = buildBundleContents(table, compiled);
  if (!rt::writeBundle(bundlePath, rt::serializeManifest(bundle.manifest),
                       bundle.objects, error))
    return CompileStatus::CheckFailed;
  summary.tableKernels = table.kernels.size();
  summary.uniqueKernels = compiled.kernels.size();
  summary.kernelsFromCache = compiled.kernelsFromCache;
  summary.corruptCacheEntries = compiled.corruptCacheEntries;
  summary.kernelTimes = std::move(compiled.kernelTimes);
  summary.frontEndSeconds = compiled.frontEndSeconds;
  summary.jobs = compiled.jobs;
  for (const CompiledKernel &kernel : compiled.kernels)
    if (kernel.resources.vgprSpill || kernel.resources.sgprSpill ||
        kernel.resources.privateSegmentBytes)
      summary.spillingKernels.emplace_back(kernel.name, kernel.resources);
  std::ifstream written(bundlePath, std::ios::binary | std::ios::ate);
  summary.bundleBytes = written ? static_cast<uint64_t>(written.tellg()) : 0;
  return CompileStatus::Ok;
}

} // namespace moec
