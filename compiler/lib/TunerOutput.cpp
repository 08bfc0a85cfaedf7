//===- TunerOutput.cpp - the table, the CSV, the summaries ---------------===//
///
/// \file
/// What `moec tune` writes (docs/tuning.md, "Output"): the table of the
/// winners, one CSV line per candidate and one summary per selection.
///
//===----------------------------------------------------------------------===//

#include "TunerInternal.h"

#include "moec/target/occupancy.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace moec {
namespace tuner {
namespace {

/// A count as a whole number (the analytic ones may have a fraction).
std::string formatCount(double count) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", count);
  return text;
}

} // namespace

std::string formatUs(double us) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", us);
  return text;
}

std::string problemLine(const TableProblem &p) {
  std::string line = "problem " + p.name + " family=" + p.family +
                     " hidden=" + std::to_string(p.hidden) +
                     " intermediate=" + std::to_string(p.intermediate) +
                     " experts=" + std::to_string(p.experts) +
                     " top_k=" + std::to_string(p.topK);
  if (p.ep != 1)
    line += " ep=" + std::to_string(p.ep);
  if (p.aFormat != "fp8")
    line += " a_format=" + p.aFormat;
  if (p.midFormat != "fp8")
    line += " mid_format=" + p.midFormat;
  return line;
}

std::string kernelLine(const TableKernel &k) {
  std::string line = "kernel " + k.name + " stage=" +
                     abi::stageName(k.stage) + " problem=" + k.problem;
  for (const auto &[name, value] : k.knobs)
    line += " " + name + "=" + value;
  return line;
}

std::string selectionKey(const TableSelection &selection) {
  return selection.network + " ep" + std::to_string(selection.ep) + " ws" +
         std::to_string(selection.workspace);
}

/// The GEMM stages, in the order of the CSV's per-stage columns.
constexpr abi::Stage kGemmStages[] = {abi::Stage::W13, abi::Stage::W2};

void writeCsv(const Search &search,
              const std::vector<std::vector<size_t>> &winnerOf,
              TuneResult &result) {
  const TuningTable &spec = search.spec;
  std::ostringstream csv;
  csv << "selection,candidate,tile_m,w13_n,w2_n,waves,b_direct,refinement,"
         "parent";
  for (abi::Stage gemm : kGemmStages) {
    const char *stage = abi::stageName(gemm);
    csv << "," << stage << "_vgpr," << stage << "_agpr," << stage << "_sgpr,"
        << stage << "_lds_bytes," << stage << "_vgpr_spill," << stage
        << "_sgpr_spill," << stage << "_workgroups_per_cu";
  }
  for (abi::Stage gemm : kGemmStages) {
    const char *stage = abi::stageName(gemm);
    csv << "," << stage << "_counts," << stage << "_global_bytes_read,"
        << stage << "_global_bytes_written," << stage << "_lds_bytes_read,"
        << stage << "_lds_bytes_written," << stage << "_lds_bank_conflicts,"
        << stage << "_scaled_mfmas," << stage << "_other_instructions";
  }
  csv << ",rejected,reason,keys_won,predicted_us_first_key,"
         "predicted_us_last_key,count_fallback\n";
  auto clean = [](std::string text) {
    std::replace(text.begin(), text.end(), ',', ';');
    std::replace(text.begin(), text.end(), '\n', ' ');
    return text;
  };
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    const std::vector<Candidate> &candidates = search.candidatesOf[s];
    TuneClassSummary summary;
    summary.key = selectionKey(selection);
    summary.keys = search.keysOf[s].size();
    summary.candidates = candidates.size();
    std::vector<size_t> keysWon(candidates.size(), 0);
    for (size_t c : winnerOf[s])
      ++keysWon[c];
    for (const Candidate &candidate : candidates) {
      if (candidate.rejectionClass.empty())
        continue;
      ++summary.rejected;
      ++summary.rejections[candidate.rejectionClass];
    }
    for (size_t c = 0; c < candidates.size(); ++c) {
      const Candidate &candidate = candidates[c];
      summary.refinements += candidate.parent != SIZE_MAX;
      summary.selectionWide +=
          !candidate.tiling.refinements.empty() &&
          candidate.tiling.refinements.back().selectionWide();
      summary.distinctConfigs += keysWon[c] > 0;
      const Tiling &t = candidate.tiling;
      csv << summary.key << "," << candidate.configName << "," << t.m << ","
          << t.w13N << "," << t.w2N << "," << t.waves << ","
          << (t.bDirect ? 1 : 0) << "," << t.refinementText() << ","
          << (candidate.parent == SIZE_MAX ? ""
                                           : candidates[candidate.parent].configName);
      auto gemmOf = [&](abi::Stage stage) {
        size_t found = SIZE_MAX;
        for (size_t k : candidate.kernels)
          if (search.kernels[k].kernel.stage == stage &&
              isGemm(search.kernels[k].kernel))
            found = k;
        return found;
      };
      for (abi::Stage stage : kGemmStages) {
        const size_t found = gemmOf(stage);
        if (found == SIZE_MAX || !search.compiled[found]) {
          csv << ",,,,,,,";
          continue;
        }
        const rt::KernelResources &r = search.resources[found];
        csv << "," << r.vgpr << "," << r.agpr << "," << r.sgpr << ","
            << r.ldsBytes << "," << r.vgprSpill << "," << r.sgprSpill << ","
            << target::estimateOccupancy(
                   search.target.chip,
                   resourceUse(r, search.workgroupSize[found]))
                   .workgroupsPerCu;
      }
      // The counts the model ranked this candidate with (none: rejected).
      std::string fallback;
      for (abi::Stage stage : kGemmStages) {
        const size_t found = gemmOf(stage);
        if (found == SIZE_MAX || !candidate.rejectionClass.empty()) {
          csv << ",,,,,,,,";
          continue;
        }
        const TileCounts &counts = search.tileCounts[found];
        csv << "," << counts.source;
        for (double value :
             {counts.globalBytesRead, counts.globalBytesWritten,
              counts.ldsBytesRead, counts.ldsBytesWritten,
              counts.ldsBankConflicts, counts.scaledMfmas,
              counts.otherInstructions})
          csv << "," << formatCount(value);
        if (!search.countError[found].empty())
          fallback += std::string(fallback.empty() ? "" : " ") +
                      abi::stageName(stage) + ": " +
                      search.countError[found];
      }
      csv << "," << (candidate.rejectionClass.empty() ? "no" : "yes") << ","
          << (candidate.rejectionClass.empty()
                  ? ""
                  : candidate.rejectionClass + ": " + clean(candidate.rejection))
          << "," << keysWon[c] << ","
          << (candidate.predictedUs.empty()
                  ? ""
                  : formatUs(candidate.predictedUs.front()))
          << ","
          << (candidate.predictedUs.empty()
                  ? ""
                  : formatUs(candidate.predictedUs.back()))
          << "," << clean(fallback) << "\n";
    }
    result.classes.push_back(std::move(summary));
  }
  result.csv = csv.str();

  std::ostringstream predictions;
  predictions << "selection,m,candidate,predicted_us,chosen\n";
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const std::string key = selectionKey(spec.selections[s]);
    const std::vector<Candidate> &candidates = search.candidatesOf[s];
    for (size_t c = 0; c < candidates.size(); ++c)
      for (size_t k = 0; k < candidates[c].predictedUs.size(); ++k)
        predictions << key << "," << search.keysOf[s][k] << ","
                    << candidates[c].configName << ","
                    << formatUs(candidates[c].predictedUs[k]) << ","
                    << (winnerOf[s][k] == c ? "yes" : "no") << "\n";
  }
  result.predictionsCsv = predictions.str();
}

CompileStatus writeTable(const Search &search,
                         const std::vector<std::vector<size_t>> &winnerOf,
                         const DeviceTimings &timings, TuneResult &result,
                         std::string &error) {
  const TuningTable &spec = search.spec;
  std::map<std::string, std::string> configOfKernels; // kernel list -> name
  std::map<std::string, std::vector<std::string>> configs; // name -> kernels
  std::map<std::string, std::string> kernelName;           // identity -> name
  std::map<std::string, const TableKernel *> kernelLines;  // name -> kernel
  std::vector<std::vector<std::string>> rowConfig(spec.selections.size());
  for (size_t s = 0; s < spec.selections.size(); ++s)
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      std::string list;
      for (size_t k : candidate.kernels)
        list += search.kernels[k].identity + "\n";
      auto [it, added] = configOfKernels.emplace(list, candidate.configName);
      if (added) {
        std::vector<std::string> names;
        for (size_t k : candidate.kernels) {
          const CandidateKernel &kernel = search.kernels[k];
          auto [named, fresh] =
              kernelName.emplace(kernel.identity, kernel.kernel.name);
          if (fresh) {
            // Two different kernels under one name would make the table
            // name the wrong one: a naming bug of the search, refused.
            auto [line, unique] =
                kernelLines.emplace(named->second, &kernel.kernel);
            if (!unique) {
              error = search.specPath + ": two different candidate kernels "
                                        "are both named '" + named->second + "'";
              return CompileStatus::CheckFailed;
            }
          }
          names.push_back(named->second);
        }
        configs[candidate.configName] = names;
      }
      rowConfig[s].push_back(it->second);
    }
  result.distinctConfigs = configs.size();

  const std::string &specPath = search.specPath;
  const bool measured = !timings.device.empty();
  std::ostringstream out;
  out << "moec-table 1\n"
      << "# Generated by `moec tune " << specPath.substr(specPath.rfind('/') + 1)
      << "` (scripts/regenerate-tables.sh); edit the spec, not this file.\n";
  if (measured)
    out << "# Rows are measured on " << timings.device << " (" << timings.method
        << ", " << timings.date << ") among the cost model's best\n"
        << "# candidates where the device timed them, and ranked by the cost "
           "model " << search.options.costModel << " elsewhere\n# (docs/tuning.md).\n\n";
  else
    out << "# Every row is ranked by the cost model " << search.options.costModel
        << " (docs/cost-model.md) among\n"
        << "# the candidates of the search space that passed the resource gate\n"
        << "# (docs/tuning.md); none is measured on gfx950 hardware.\n\n";
  for (const TableProblem &problem : spec.problems)
    out << problemLine(problem) << "\n";
  out << "\n";
  for (const auto &[name, kernel] : kernelLines) {
    TableKernel line = *kernel;
    line.name = name;
    out << kernelLine(line) << "\n";
  }
  out << "\n";
  std::set<std::string> measuredConfigs;
  for (size_t s = 0; s < spec.selections.size(); ++s)
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      if (!candidate.measuredUs.empty() && candidate.measuredUs[key] >= 0)
        measuredConfigs.insert(rowConfig[s][key]);
    }
  for (const auto &[name, list] : configs) {
    out << "config " << name << " kernels=";
    for (size_t i = 0; i < list.size(); ++i)
      out << (i ? "," : "") << list[i];
    out << " provenance="
        << (measuredConfigs.count(name) ? "measured" : "model-ranked") << "\n";
  }
  for (size_t s = 0; s < spec.selections.size(); ++s) {
    const TableSelection &selection = spec.selections[s];
    out << "\nselect network=" << selection.network
        << " family=" << selection.family << " ep=" << selection.ep
        << " workspace=" << selection.workspace
        << " transport=" << selection.transport
        << " above_max=" << selection.aboveMax << "\n";
    for (size_t key = 0; key < search.keysOf[s].size(); ++key) {
      const Candidate &candidate = search.candidatesOf[s][winnerOf[s][key]];
      out << "row m=" << search.keysOf[s][key] << " config=" << rowConfig[s][key];
      if (!candidate.measuredUs.empty() && candidate.measuredUs[key] >= 0) {
        out << " provenance=measured device=" << timings.device
            << " method=" << timings.method << " date=" << timings.date
            << " measured_us=" << formatUs(candidate.measuredUs[key]);
        ++result.measuredRows;
      } else {
        out << " provenance=model-ranked";
      }
      out << " model=" << search.options.costModel
          << " predicted_us=" << formatUs(candidate.predictedUs[key]) << "\n";
    }
    result.rows += search.keysOf[s].size();
  }
  result.table = out.str();
  return CompileStatus::Ok;
}

} // namespace tuner
} // namespace moec
