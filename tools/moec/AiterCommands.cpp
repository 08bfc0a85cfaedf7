//===- AiterCommands.cpp - moec compile/select on AITER CSVs --------------===//

#include "AiterCommands.h"
#include "CommandSupport.h"
#include "Commands.h"

#include "moec/aiter_select.h"
#include "moec/bundle.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>

namespace moec::cli {

int runAiterCompile(const std::vector<std::string> &paths,
                    const std::string &output, const CompileOptions &options,
                    const AiterCompileOptions &aiterOptions, bool quiet) {
  for (const std::string &path : paths)
    if (!isAiterCsvFile(path)) {
      std::cerr << "moec: " << path
                << ":1: not an AITER tuned fused-MoE CSV (its header needs "
                   "token, model_dim, inter_dim, expert, topk, kernelName1 "
                   "and kernelName2)\n";
      return kBadInput;
    }
  auto start = std::chrono::steady_clock::now();
  CompileSummary summary;
  AiterCompileSummary aiter;
  std::string error;
  CompileStatus status = compileAiterCsvsToBundle(
      paths, output, options, aiterOptions, summary, aiter, error);
  for (const std::string &line : aiter.merge.dropped)
    std::cerr << "moec: " << line << "\n";
  // The audit only warns: it never changes what is selected.
  for (const std::string &line : aiter.audit.warnings)
    std::cerr << "moec: warning: " << line << "\n";
  if (!aiter.audit.warnings.empty())
    std::cerr << "moec: audit: " << aiter.audit.warnings.size()
              << " warning(s): " << aiter.audit.fallingUs
              << " us falling as token rises, " << aiter.audit.highError
              << " err1/err2 above "
              << AiterAuditOptions().maxErrorPercent << " %, " << aiter.audit.copiedTimings
              << " timings copied across shapes\n";
  // Without --skip-unsupported the error lists the refused rows.
  if (aiterOptions.skipUnsupported)
    for (const std::string &line : aiter.unsupported)
      std::cerr << "moec: skipped " << line << "\n";
  if (!aiter.refusalsByReason.empty()) {
    std::cerr << "moec: " << aiter.unsupported.size()
              << " AITER row(s) refused; rows per reason (a row counts under "
                 "each of its reasons):\n";
    for (const auto &[reason, count] : aiter.refusalsByReason)
      std::cerr << "moec:   " << count << " " << reason << "\n";
  }
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? kBadInput : kCheckFailed;
  }
  if (aiter.substitutedRows > 0)
    std::cerr << "moec: " << aiter.substitutedRows
              << " compiled AITER row(s) name a kernel of another family "
                 "that moec's own kernel of the same stage, tile and dtypes "
                 "serves (substituted_from in the manifest)\n";
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  if (!quiet)
    std::cout << "moec: compiled " << aiter.compiledRows << " of "
              << aiter.rows << " AITER rows (" << aiter.skippedRows
              << " skipped, " << aiter.merge.duplicates << " duplicate, "
              << aiter.merge.fallbackTags << " flydsl_fallback dropped) into "
              << summary.tableKernels << " table kernels ("
              << summary.uniqueKernels << " unique) in " << output << " in "
              << seconds << " s\n";
  return kSuccess;
}

int runAiterSelect(const std::string &bundlePath, uint64_t m,
                   const std::vector<std::string> &where, bool json) {
  rt::AiterKeyColumns columns;
  for (const std::string &pair : where) {
    const size_t eq = pair.find('=');
    const std::string_view text(pair);
    const auto error =
        eq == std::string::npos
            ? rt::AiterKeyColumns::Error::UnknownColumn
            : columns.set(text.substr(0, eq), text.substr(eq + 1));
    if (error == rt::AiterKeyColumns::Error::UnknownColumn) {
      std::cerr << "moec: --where " << pair
                << ": expected COLUMN=VALUE with a key column of AITER's CSV "
                   "(token comes from --m)\n";
      return kBadInput;
    }
    if (error == rt::AiterKeyColumns::Error::Repeated) {
      std::cerr << "moec: --where " << pair.substr(0, eq) << ": given twice\n";
      return kBadInput;
    }
    if (error != rt::AiterKeyColumns::Error::None) {
      std::cerr << "moec: --where " << pair << ": "
                << rt::AiterKeyColumns::errorText(error) << "\n";
      return kBadInput;
    }
  }
  if (columns.firstMissing() != SIZE_MAX) {
    std::cerr << "moec: the key needs --where for " << columns.missingColumns()
              << " (the key is explicit: nothing is defaulted)\n";
    return kBadInput;
  }
  const rt::AiterKey &key = columns.key();
  auto bundle = openBundleOrReport(bundlePath);
  if (!bundle)
    return kBadInput;
  const rt::Manifest &manifest = bundle->manifest();
  if (manifest.aiterRows.empty()) {
    std::cerr << "moec: " << bundlePath
              << ": holds no AITER rows (compiled from a moec tuning table; "
                 "use --network/--ep/--workspace)\n";
    return kBadInput;
  }
  const rt::AiterSelection s = rt::selectAiter(manifest.aiterRows, key, m);
  if (s.status != rt::AiterStatus::Hit) {
    std::cerr << "moec: " << bundlePath << ": "
              << rt::describeAiterRefusal(manifest, key, s, m) << "\n";
    return kCheckFailed;
  }
  const rt::AiterRowInfo &row = manifest.aiterRows[s.row];
  const std::string file = manifest.sources[row.source].path;
  const std::string at = file + ":" + std::to_string(row.line);
  const rt::ConfigInfo &config = manifest.configs[row.config];
  if (json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (uint32_t k : config.kernels)
      kernels.push_back({{"stage", rt::stageName(manifest.kernels[k].stage)},
                         {"name", manifest.kernels[k].name}});
    nlohmann::json out = {{"m", m},
                          {"token", row.token},
                          {"rule", rt::aiterRuleName(s.rule)},
                          {"kernelName1", row.kernelName1},
                          {"kernelName2", row.kernelName2},
                          {"block_m", row.blockM},
                          {"ksplit", row.ksplit},
                          {"source_row", row.line},
                          {"file", file},
                          {"config", config.id},
                          {"notes", row.notes},
                          {"kernels", kernels}};
    if (!row.substitutedFrom1.empty())
      out["substituted_from"]["kernelName1"] = row.substitutedFrom1;
    if (!row.substitutedFrom2.empty())
      out["substituted_from"]["kernelName2"] = row.substitutedFrom2;
    std::cout << out.dump(2) << "\n";
    return kSuccess;
  }
  std::cout << "m " << m << " -> token " << s.token << ": row " << at << " ("
            << rt::aiterRuleName(s.rule) << ", token " << row.token << ")\n"
            << "kernelName1 " << row.kernelName1 << "\n"
            << "kernelName2 " << row.kernelName2 << "\n"
            << "block_m " << row.blockM << " ksplit " << row.ksplit << "\n"
            << "config " << config.id << "\n";
  // A kernel of another family that moec's own kernel serves.
  for (auto [column, name] :
       {std::pair<const char *, const std::string *>{"kernelName1",
                                                    &row.substitutedFrom1},
        {"kernelName2", &row.substitutedFrom2}})
    if (!name->empty())
      std::cout << column << " substituted_from=" << *name << "\n";
  for (uint32_t k : config.kernels)
    std::cout << "  " << rt::stageName(manifest.kernels[k].stage) << ": "
              << manifest.kernels[k].name << "\n";
  for (const std::string &note : row.notes)
    std::cout << "note: " << note << "\n";
  return kSuccess;
}

} // namespace moec::cli
