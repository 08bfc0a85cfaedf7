//===- SelectCommand.cpp - moec select BUNDLE --ep --workspace --m --------===//

#include "AiterCommands.h"
#include "CommandSupport.h"
#include "Commands.h"

#include "moec/bundle.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <set>
#include <sstream>

namespace {

struct SelectArgs {
  std::string bundle;
  std::string network;
  uint32_t ep = 1;
  uint32_t workspace = 0;
  uint32_t m = 0;
  bool ranges = false;
  bool json = false;
  /// AITER key columns (COLUMN=VALUE), docs/aiter-tables.md.
  std::vector<std::string> where;
};

const char *statusName(moec::rt::SelectStatus status) {
  switch (status) {
  case moec::rt::SelectStatus::Hit: return "hit";
  case moec::rt::SelectStatus::Fallback: return "fallback";
  case moec::rt::SelectStatus::Miss: return "miss";
  }
  return "miss";
}

/// What a row records about why it selects its configuration: the cost
/// model's prediction and, for a measured row, the measurement. Null when
/// the row records nothing.
nlohmann::json rowProvenanceJson(const moec::rt::RowProvenance &p) {
  using namespace moec::rt;
  if (!p.present)
    return nullptr;
  nlohmann::json out = {{"provenance", provenanceName(p.kind)}};
  if (!p.model.empty()) {
    out["model"] = p.model;
    out["predicted_us"] = p.predictedUs;
  }
  if (p.kind == Provenance::Measured) {
    out["device"] = p.device;
    out["method"] = p.method;
    out["date"] = p.date;
    out["measured_us"] = p.measuredUs;
  }
  return out;
}

/// The same in one line: "model-ranked by moec-cost-1, predicted 30.8 us
/// at m=1"; empty when the row records nothing.
std::string describeRowProvenance(const moec::rt::RowProvenance &p,
                                  uint32_t rowM) {
  using namespace moec::rt;
  if (!p.present)
    return std::string();
  std::ostringstream text;
  text << provenanceName(p.kind);
  if (p.kind == Provenance::Measured)
    text << " on " << p.device << " (" << p.method << ", " << p.date << "), "
         << p.measuredUs << " us at m=" << rowM;
  if (!p.model.empty())
    text << (p.kind == Provenance::Measured ? "; " : " by ") << p.model
         << (p.kind == Provenance::Measured ? " predicted " : ", predicted ")
         << p.predictedUs << " us at m=" << rowM;
  return text.str();
}

int runSelect(const SelectArgs &args, bool haveM) {
  using namespace moec::rt;
  if (!args.where.empty() && !haveM) {
    std::cerr << "moec: --where needs --m (AITER's token bucket comes from M)\n";
    return moec::cli::kBadInput;
  }
  if (!args.where.empty())
    return moec::cli::runAiterSelect(args.bundle, args.m, args.where,
                                     args.json);
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  const Manifest &manifest = bundle->manifest();
  std::string network;
  if (!moec::cli::resolveNetwork(manifest, args.bundle, args.network, network,
                                 error)) {
    std::cerr << "moec: " << error << "\n";
    return moec::cli::kBadInput;
  }
  TableHandle handle;
  if (!bundle->selector().resolveTable(network, args.ep, args.workspace, handle,
                                       error)) {
    std::cerr << "moec: " << args.bundle << ": " << error << "\n";
    return moec::cli::kCheckFailed;
  }
  const SelectionTable &table = bundle->selector().tables()[handle.index];

  if (args.ranges || !haveM) {
    nlohmann::json rows = nlohmann::json::array();
    for (const RowRange &range : bundle->selector().rowRanges(handle)) {
      const ConfigInfo &config = manifest.configs[range.config];
      const RowProvenance &provenance = table.rows[range.row].provenance;
      if (args.json) {
        rows.push_back({{"m", range.m},
                        {"m_low", range.mLow},
                        {"m_high", range.mHigh},
                        {"above_max_fallback", range.servesAboveMax},
                        {"config", config.id}});
        if (provenance.present)
          rows.back()["row_provenance"] = rowProvenanceJson(provenance);
        continue;
      }
      const std::string why = describeRowProvenance(provenance, range.m);
      std::cout << "m " << range.mLow << ".." << range.mHigh
                << (range.servesAboveMax
                        ? table.maxTokens != 0
                              ? " and up to " + std::to_string(table.maxTokens) +
                                    " (fallback above the row)"
                              : std::string("+ (fallback above)")
                        : std::string())
                << " -> row m=" << range.m << " config " << config.id
                << (why.empty() ? std::string() : " (" + why + ")") << "\n";
    }
    if (args.json)
      std::cout << rows.dump(2) << "\n";
    return moec::cli::kSuccess;
  }

  Selection selection = bundle->selector().select(handle, args.m);
  if (selection.status == SelectStatus::Miss) {
    std::cerr << "moec: " << args.bundle << ": "
              << describeSelectionMiss(table, args.m) << "\n";
    return moec::cli::kCheckFailed;
  }
  const ConfigInfo &config = manifest.configs[selection.config];
  const RowProvenance &provenance = table.rows[selection.row].provenance;
  if (args.json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (uint32_t k : config.kernels) {
      const KernelInfo &kernel = manifest.kernels[k];
      kernels.push_back({{"name", kernel.name},
                         {"symbol", kernel.symbol},
                         {"stage", moec::rt::stageName(kernel.stage)},
                         {"workgroup_size", kernel.launch.workgroupSize},
                         {"grid", {kernel.launch.gridX, kernel.launch.gridY,
                                   kernel.launch.gridZ}}});
    }
    nlohmann::json out = {
        {"network", table.network},
        {"ep", table.ep},
        {"workspace_class", table.workspace},
        {"transport", transportName(table.transport)},
        {"m", args.m},
        {"status", statusName(selection.status)},
        {"row_m", selection.rowM},
        {"exact", selection.exact},
        {"config", config.id},
        {"provenance", provenanceName(config.provenance)},
        {"kernels", kernels}};
    if (provenance.present)
      out["row_provenance"] = rowProvenanceJson(provenance);
    std::cout << out.dump(2) << "\n";
    return moec::cli::kSuccess;
  }
  std::cout << "table " << describeTableKey(table.network, table.ep,
                                             table.workspace)
            << " (" << kernelFamilyName(table.family) << ", "
            << transportName(table.transport) << ")\n"
            << "m " << args.m << " -> row m=" << selection.rowM << " ("
            << statusName(selection.status)
            << (selection.exact ? ", exact" : ", nearest") << ")\n"
            << "config " << config.id << " ("
            << provenanceName(config.provenance) << ")\n";
  if (provenance.present)
    std::cout << "row " << describeRowProvenance(provenance, selection.rowM)
              << "\n";
  for (uint32_t k : config.kernels) {
    const KernelInfo &kernel = manifest.kernels[k];
    std::cout << "  " << moec::rt::stageName(kernel.stage) << ": " << kernel.name << "  grid ("
              << kernel.launch.gridX << ", " << kernel.launch.gridY << ", "
              << kernel.launch.gridZ << ") x " << kernel.launch.workgroupSize[0]
              << " lanes\n";
  }
  return moec::cli::kSuccess;
}

} // namespace

void addSelectCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<SelectArgs>();
  CLI::App *cmd = app.add_subcommand(
      "select", "Show which configuration and kernels a key selects");
  moec::cli::addSelectionKeyOptions(cmd, args->bundle, args->network, args->ep,
                                    args->workspace);
  CLI::Option *m = cmd->add_option("--m", args->m,
                                   "max source tokens per rank (0: empty ranks)");
  cmd->add_flag("--ranges", args->ranges,
                "list the M range every row of the table serves");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->add_option("--where", args->where,
                  "an AITER key column as COLUMN=VALUE in the CSV's spelling "
                  "(repeat for every key column): AITER's lookup for --m");
  // With --where the key is AITER's, so --ep and --workspace are needed
  // only without it.
  CLI::Option *ep = cmd->get_option("--ep");
  CLI::Option *workspace = cmd->get_option("--workspace");
  ep->required(false);
  workspace->required(false);
  cmd->callback([args, m, ep, workspace, &exitStatus] {
    if (args->where.empty() && (!ep->count() || !workspace->count())) {
      std::cerr << "moec: " << (ep->count() ? "--workspace" : "--ep")
                << " is required (see moec --help)\n";
      exitStatus = moec::cli::kBadInput;
      return;
    }
    exitStatus = runSelect(*args, m->count() > 0);
  });
}
