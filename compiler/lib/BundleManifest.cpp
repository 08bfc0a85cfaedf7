//===- BundleManifest.cpp - the manifest of a compiled table --------------===//
///
/// \file
/// Builds manifest schema v1 (docs/bundle-format.md). Only inputs that change
/// the output go in: no timestamps, no absolute paths, so the same table and
/// compiler give a byte-identical bundle.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Pipeline.h"
#include "moec/Compiler/TableCompiler.h"
#include "moec/hash.h"

#include "llvm/Config/llvm-config.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace moec {
namespace {

using Json = nlohmann::json;

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

Json kernelJson(const CompiledKernel &kernel, size_t codeObject) {
  Json config = Json::object();
  for (const auto &[knob, value] : kernel.config)
    config[knob] = value;
  Json abi = Json::array();
  for (const KernelArg &arg : kernel.abi.args)
    abi.push_back({{"name", arg.name},
                   {"kind", toString(arg.kind)},
                   {"dtype", arg.dtype},
                   {"access", arg.kind == KernelArg::Kind::Buffer
                                  ? toString(arg.access)
                                  : "read"},
                   {"shape", arg.shape}});
  const rt::KernelResources &r = kernel.resources;
  return {
      {"name", kernel.name},
      {"symbol", kernel.symbol + ".kd"},
      {"code_object", codeObject},
      {"stage", kernel.stage},
      {"config", config},
      {"abi", abi},
      {"launch",
       {{"workgroup_size", {kernel.abi.workgroupSize, 1, 1}},
        {"grid",
         {{"x", kernel.abi.gridX}, {"y", kernel.abi.gridY}, {"z", kernel.abi.gridZ}}}}},
      {"resources",
       {{"vgpr", r.vgpr},
        {"agpr", r.agpr},
        {"sgpr", r.sgpr},
        {"lds_bytes", r.ldsBytes},
        {"private_segment_bytes", r.privateSegmentBytes},
        {"vgpr_spill", r.vgprSpill},
        {"sgpr_spill", r.sgprSpill},
        {"wavefront_size", r.wavefrontSize},
        {"max_flat_workgroup_size", r.maxFlatWorkgroupSize}}},
      {"content_hash", kernel.contentHash},
      {"table_names", kernel.tableNames},
  };
}

} // namespace

std::string buildManifestJson(const TuningTable &table,
                              const CompiledTable &compiled,
                              const std::string &tableText) {
  const CompileTarget &target = CompileTarget::gfx950();
  Json manifest;
  manifest["target"] = {{"arch", target.chip.arch},
                        {"features", target.features},
                        {"code_object_version", 6}};
  manifest["compiler"] = {{"name", "moec"},
                          {"version", "0.1.0"},
                          {"llvm", LLVM_VERSION_STRING},
                          {"fingerprint", compilerFingerprint(target)}};
  manifest["numerics"] = {
      {"activation_quant",
       "fp8_e4m3fn per 1x32, scale 2^ceil(log2(max(amax,1e-4)/448)), "
       "biased exponent clamped to [1,254]; same rule after SwiGLU"},
      {"weight_format", "mxfp4: e2m1 values, one e8m0 scale per 32 along K"},
      {"accumulate", "f32"},
      {"output", "bf16, round to nearest even"}};
  manifest["sources"] = Json::array(
      {{{"path", baseName(table.path)},
        {"hash", hashHex(tableText.data(), tableText.size())}}});

  Json kernels = Json::array();
  for (size_t i = 0; i < compiled.kernels.size(); ++i)
    kernels.push_back(kernelJson(compiled.kernels[i], i));
  manifest["kernels"] = kernels;

  Json configs = Json::array();
  std::map<std::string, size_t> configIndex;
  for (const TableConfig &config : table.configs) {
    Json kernelIds = Json::array();
    for (const std::string &name : config.kernels)
      kernelIds.push_back(compiled.kernelIndex.at(name));
    configIndex[config.name] = configs.size();
    configs.push_back({{"id", config.name},
                       {"kernels", kernelIds},
                       {"provenance", config.provenance}});
  }
  manifest["configs"] = configs;

  Json selection = Json::array();
  for (const TableSelection &s : table.selections) {
    Json rows = Json::array();
    std::vector<TableRow> sorted = s.rows;
    std::sort(sorted.begin(), sorted.end(),
              [](const TableRow &a, const TableRow &b) { return a.m < b.m; });
    for (const TableRow &row : sorted)
      rows.push_back({{"m", row.m}, {"config", configIndex.at(row.config)}});
    selection.push_back({{"network", s.network},
                         {"family", s.family},
                         {"ep", s.ep},
                         {"workspace", s.workspace},
                         {"transport", s.transport},
                         {"above_max", s.aboveMax},
                         {"rows", rows}});
  }
  manifest["selection"] = selection;
  return manifest.dump();
}

} // namespace moec
