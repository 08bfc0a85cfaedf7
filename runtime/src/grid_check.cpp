//===- grid_check.cpp - every grid rule positive where it is selected -----===//

#include "grid_check.h"

#include "kernel_attributes.h"
#include "moec/grid_program.h"

#include <climits>
#include <cstdint>
#include <iterator>

namespace moec::rt::detail {

namespace {

/// "selection[2] (flash-fused ep4 ws1024)".
std::string tableName(const SelectionTable &table, size_t t) {
  return "selection[" + std::to_string(t) + "] (" + table.network + " ep" +
         std::to_string(table.ep) + " ws" + std::to_string(table.workspace) + ")";
}

/// The sort's M tile of configuration `config` (1 without a sort), as the
/// layer pads the sorted route list.
uint64_t sortTileOf(const Manifest &manifest, const ConfigInfo &config) {
  for (uint32_t k : config.kernels)
    if (manifest.kernels[k].stage == Stage::Sort)
      return uint64_t(std::max<int64_t>(
          1, leadingInteger(attribute(manifest.kernels[k], "m_tile"))));
  return 1;
}

} // namespace

bool checkGridRulesAtRows(const Manifest &manifest,
                          const std::vector<SelectionTable> &tables,
                          std::string &error) {
  for (size_t t = 0; t < tables.size(); ++t) {
    const SelectionTable &table = tables[t];
    uint64_t previous = 0;
    for (size_t r = 0; r < table.rows.size(); ++r) {
      const SelectionRow &row = table.rows[r];
      uint64_t first = previous + 1, last = row.m;
      previous = row.m;
      // A fused table refuses M above its capacity before any launch.
      if (table.maxTokens > 0)
        last = std::min<uint64_t>(last, table.maxTokens);
      if (first > last || row.config >= manifest.configs.size())
        continue;
      const ConfigInfo &config = manifest.configs[row.config];
      const uint64_t sortTile = sortTileOf(manifest, config);
      for (uint32_t k : config.kernels) {
        const KernelInfo &kernel = manifest.kernels[k];
        const std::string_view problem = attribute(kernel, "problem");
        const int64_t hidden = integerParameter(problem, "hidden", -1);
        const int64_t intermediate = integerParameter(problem, "intermediate", -1);
        const int64_t experts = integerParameter(problem, "experts", -1);
        const int64_t topK = integerParameter(problem, "top_k", -1);
        // Without its problem the layer refuses the kernel at creation.
        if (hidden < 0 || intermediate < 0 || experts < 0 || topK < 0)
          continue;
        const uint64_t localExperts = uint64_t(experts) / std::max<uint32_t>(table.ep, 1);
        for (const uint64_t m : {first, last}) {
          const uint64_t routes = m * uint64_t(topK);
          const RuleVariable variables[] = {
              {"H", hidden},
              {"I", intermediate},
              {"num_tokens", int64_t(m)},
              {"num_sorted", int64_t(sortedCapacity(routes, localExperts, sortTile))},
              {"num_routes", int64_t(routes)},
          };
          for (int d = 0; d < 3; ++d) {
            const GridProgram &program = kernel.launch.gridPrograms[d];
            int64_t value = 0;
            std::string why;
            // A rule that does not evaluate here (a fraction where a
            // partial configuration has no sort to pad the list, a name
            // the layer does not give) is the launch's to report.
            if (!program.compiled() ||
                !program.evaluate(variables, std::size(variables), value, why) ||
                (value >= 1 && value <= int64_t(UINT32_MAX)))
              continue;
            error = tableName(table, t) + ", row " + std::to_string(r) + " (M " +
                    std::to_string(first) + " to " + std::to_string(last) +
                    "), at M " + std::to_string(m) + ": kernel " + kernel.name +
                    ": grid." + "xyz"[d] + " = " + std::to_string(value) +
                    " (rule '" + program.text() + "'), expected 1 .. 4294967295";
            return false;
          }
        }
      }
    }
  }
  return true;
}

} // namespace moec::rt::detail
