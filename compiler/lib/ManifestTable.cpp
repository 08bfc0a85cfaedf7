//===- ManifestTable.cpp - a tuning table rebuilt from a bundle -----------===//
//
// A bundle's manifest records every kernel's stage-op attributes, its
// configurations and its selection tables: enough to write the table it was
// compiled from again (up to kernel names and comments). `moec selftest
// --small` rebuilds a bundle's table this way, shrinks it and compiles it.
//
//===----------------------------------------------------------------------===//
#include "moec/Compiler/TableCompiler.h"

#include "moec/Compiler/StageBuilder.h"

#include <cstdio>
#include <cstdlib>
#include <set>

namespace moec {
namespace {

/// The table's spelling of a manifest transport ("fixed-slot" -> "fixed_slot").
std::string tableTransport(rt::Transport transport) {
  std::string name = rt::transportName(transport);
  for (char &c : name)
    if (c == '-')
      c = '_';
  return name;
}

/// A time as the table writes it: the fewest decimals that read back the
/// same value (at most 6).
std::string microseconds(double value) {
  char text[64];
  for (int decimals = 0; decimals <= 6; ++decimals) {
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

} // namespace

TuningTable tableOfManifest(const rt::Manifest &manifest,
                            const std::string &path) {
  static const char *const kProblemFields[] = {"hidden", "intermediate",
                                               "experts", "top_k", "ep"};
  TuningTable table;
  table.path = path;
  // The family of each kernel: that of a selection table using it.
  std::vector<std::string> familyOf(manifest.kernels.size(), "megamoe");
  for (const rt::SelectionTable &selection : manifest.selection)
    for (const rt::SelectionRow &row : selection.rows)
      for (uint32_t k : manifest.configs[row.config].kernels)
        familyOf[k] = rt::kernelFamilyName(selection.family);
  std::map<std::string, std::string> problemOfKey;
  for (size_t k = 0; k < manifest.kernels.size(); ++k) {
    const rt::KernelInfo &info = manifest.kernels[k];
    StageSpec spec = stageSpecOfAttributes(info.stage, info.attributes);
    TableProblem problem;
    problem.family = familyOf[k];
    auto field = [&](const char *name) -> int64_t {
      auto it = spec.fields.find(name);
      return it == spec.fields.end() ? 0 : std::atoll(it->second.c_str());
    };
    problem.hidden = field("hidden");
    problem.intermediate = field("intermediate");
    problem.experts = field("experts");
    problem.topK = field("top_k");
    problem.ep = std::max<int64_t>(1, field("ep"));
    const std::string key =
        problem.family + ":" + std::to_string(problem.hidden) + ":" +
        std::to_string(problem.intermediate) + ":" +
        std::to_string(problem.experts) + ":" + std::to_string(problem.topK) +
        ":" + std::to_string(problem.ep);
    auto [it, inserted] = problemOfKey.emplace(
        key, "problem" + std::to_string(problemOfKey.size()));
    if (inserted) {
      problem.name = it->second;
      table.problems.push_back(problem);
    }
    TableKernel kernel;
    kernel.name = info.name;
    kernel.stage = info.stage;
    kernel.problem = it->second;
    for (const char *name : kProblemFields)
      spec.fields.erase(name);
    kernel.knobs = std::move(spec.fields);
    table.kernels.push_back(std::move(kernel));
  }
  for (const rt::ConfigInfo &info : manifest.configs) {
    TableConfig config;
    config.name = info.id;
    for (uint32_t k : info.kernels)
      config.kernels.push_back(manifest.kernels[k].name);
    config.provenance = rt::provenanceName(info.provenance);
    table.configs.push_back(std::move(config));
  }
  for (const rt::SelectionTable &info : manifest.selection) {
    TableSelection selection;
    selection.network = info.network;
    selection.family = rt::kernelFamilyName(info.family);
    selection.transport = tableTransport(info.transport);
    selection.aboveMax = rt::aboveMaxPolicyName(info.aboveMax);
    selection.ep = info.ep;
    selection.workspace = info.workspace;
    for (const rt::SelectionRow &row : info.rows) {
      TableRow tableRow{int64_t(row.m), manifest.configs[row.config].id, {}, {}};
      const rt::RowProvenance &p = row.provenance;
      if (p.present) {
        tableRow.provenance.kind = rt::provenanceName(p.kind);
        tableRow.provenance.model = p.model;
        if (p.predictedUs >= 0)
          tableRow.provenance.predictedUs = microseconds(p.predictedUs);
        tableRow.provenance.device = p.device;
        tableRow.provenance.method = p.method;
        tableRow.provenance.date = p.date;
        if (p.measuredUs >= 0)
          tableRow.provenance.measuredUs = microseconds(p.measuredUs);
      }
      selection.rows.push_back(std::move(tableRow));
    }
    table.selections.push_back(std::move(selection));
  }
  table.text = rt::serializeManifest(manifest);
  return table;
}

} // namespace moec
