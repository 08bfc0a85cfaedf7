//===- BundleManifest.cpp - the manifest of a compiled table --------------===//
///
/// \file
/// Fills the runtime's manifest model (moec/manifest.h, schema v1,
/// docs/bundle-format.md) for a compiled table; the runtime serialises it.
/// Only inputs that change the output go in: no timestamps, no absolute
/// paths, so the same table and compiler give a byte-identical bundle.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/hash.h"

#include "llvm/Config/llvm-config.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>

namespace moec {
namespace {

std::string baseName(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// Everything about the compiler that changes its output.
std::string compilerFingerprint(const CompileTarget &target) {
  std::string identity = std::string("moec 0.1.0;llvm ") + LLVM_VERSION_STRING +
                         ";" + target.triple + ";" + target.chip.arch + ";" +
                         target.features + ";" +
                         getKernelToLLVMPipeline(target) + ";O3";
  return hashHex(identity.data(), identity.size());
}

rt::KernelInfo kernelInfo(const CompiledKernel &kernel, uint32_t codeObject,
                          uint32_t irObject) {
  rt::KernelInfo info;
  info.name = kernel.name;
  info.symbol = kernel.symbol + ".kd";
  info.codeObject = codeObject;
  info.stage = kernel.stage;
  info.attributes = kernel.attributes;
  for (const KernelArg &arg : kernel.abi.args) {
    rt::KernelArgInfo recorded = arg;
    // Scalars are read by value.
    if (recorded.kind != rt::ArgKind::Buffer)
      recorded.access = rt::ArgAccess::Read;
    info.abi.push_back(recorded);
  }
  info.launch.workgroupSize = {kernel.abi.workgroupSize, 1, 1};
  info.launch.gridX = kernel.abi.gridX;
  info.launch.gridY = kernel.abi.gridY;
  info.launch.gridZ = kernel.abi.gridZ;
  info.resources = kernel.resources;
  info.contentHash = kernel.contentHash;
  info.tableNames = kernel.tableNames;
  info.weightLayout = kernel.abi.weightLayout;
  info.isaRepairs = kernel.isaRepairs;
  if (!kernel.kernelIr.empty()) {
    info.ir.object = irObject;
    info.ir.hash = hashHex(kernel.kernelIr.data(), kernel.kernelIr.size());
  }
  return info;
}

rt::Transport transportOf(const std::string &text) {
  if (text == "fixed_slot")
    return rt::Transport::FixedSlot;
  if (text == "compact")
    return rt::Transport::Compact;
  return rt::Transport::None;
}

rt::KernelFamily familyOf(const std::string &text) {
  if (text == "tp")
    return rt::KernelFamily::Tp;
  if (text == "fhmoe")
    return rt::KernelFamily::FhMoe;
  return rt::KernelFamily::MegaMoe;
}

/// A row's provenance as the manifest records it (the table reader has
/// checked the fields and numbers).
rt::RowProvenance manifestProvenance(const RowProvenance &row) {
  rt::RowProvenance out;
  if (row.kind.empty())
    return out;
  out.present = true;
  out.kind = row.kind == "measured" ? rt::Provenance::Measured
                                    : rt::Provenance::ModelRanked;
  out.model = row.model;
  if (!row.predictedUs.empty())
    out.predictedUs = std::strtod(row.predictedUs.c_str(), nullptr);
  out.device = row.device;
  out.method = row.method;
  out.date = row.date;
  if (!row.measuredUs.empty())
    out.measuredUs = std::strtod(row.measuredUs.c_str(), nullptr);
  return out;
}

} // namespace

BundleContents buildBundleContents(const TuningTable &table,
                                   const CompiledTable &compiled) {
  assert(compiled.target && "compileTable records the part it compiled for");
  const CompileTarget &target = *compiled.target;
  BundleContents bundle;
  rt::Manifest &manifest = bundle.manifest;
  manifest.target = {target.chip.arch, target.features, 6,
                     target.chip.computeUnits};
  manifest.compiler = {"moec", "0.1.0", LLVM_VERSION_STRING,
                       compilerFingerprint(target)};
  manifest.numerics = {
      {"accumulate", "f32"},
      {"activation_quant",
       "fp8_e4m3fn per 1x32, scale 2^ceil(log2(max(amax,1e-4)/448)), "
       "biased exponent clamped to [1,254]; same rule after SwiGLU"},
      {"output", "bf16, round to nearest even"},
      {"weight_format", "mxfp4: e2m1 values, one e8m0 scale per 32 along K"}};
  manifest.sources = {{baseName(table.path),
                       hashHex(table.text.data(), table.text.size())}};

  // Code objects first (kernel i uses object i), then the kernels' IR.
  const uint32_t kernelCount = static_cast<uint32_t>(compiled.kernels.size());
  for (uint32_t i = 0; i < kernelCount; ++i) {
    manifest.kernels.push_back(
        kernelInfo(compiled.kernels[i], i, kernelCount + i));
    bundle.objects.push_back(compiled.kernels[i].hsaco);
  }
  for (const CompiledKernel &kernel : compiled.kernels)
    if (!kernel.kernelIr.empty())
      bundle.objects.push_back(kernel.kernelIr);

  std::map<std::string, uint32_t> configIndex;
  for (const TableConfig &config : table.configs) {
    rt::ConfigInfo info;
    info.id = config.name;
    for (const std::string &name : config.kernels)
      info.kernels.push_back(
          static_cast<uint32_t>(compiled.kernelIndex.at(name)));
    info.provenance = config.provenance == "measured"
                          ? rt::Provenance::Measured
                          : rt::Provenance::ModelRanked;
    configIndex[config.name] = static_cast<uint32_t>(manifest.configs.size());
    manifest.configs.push_back(std::move(info));
  }

  for (size_t t = 0; t < table.selections.size(); ++t) {
    const TableSelection &s = table.selections[t];
    rt::SelectionTable selection;
    if (t < compiled.selectionMaxTokens.size())
      selection.maxTokens = compiled.selectionMaxTokens[t];
    selection.network = s.network;
    selection.family = familyOf(s.family);
    selection.ep = static_cast<uint32_t>(s.ep);
    selection.workspace = static_cast<uint32_t>(s.workspace);
    selection.transport = transportOf(s.transport);
    selection.aboveMax = s.aboveMax == "error" ? rt::AboveMaxPolicy::Error
                                               : rt::AboveMaxPolicy::Largest;
    std::vector<TableRow> sorted = s.rows;
    std::sort(sorted.begin(), sorted.end(),
              [](const TableRow &a, const TableRow &b) { return a.m < b.m; });
    for (const TableRow &row : sorted)
      selection.rows.push_back({static_cast<uint32_t>(row.m),
                                configIndex.at(row.config),
                                manifestProvenance(row.provenance)});
    manifest.selection.push_back(std::move(selection));
  }
  return bundle;
}

} // namespace moec
