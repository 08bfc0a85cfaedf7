//===- AiterCommands.cpp - moec compile/select on AITER CSVs --------------===//

#include "AiterCommands.h"
#include "CommandSupport.h"
#include "Commands.h"

#include "moec/aiter_select.h"
#include "moec/bundle.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
#include <map>
#include <set>

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
  if (status != CompileStatus::Ok) {
    std::cerr << "moec: " << error << "\n";
    return status == CompileStatus::BadInput ? kBadInput : kCheckFailed;
  }
  for (const std::string &line : aiter.unsupported)
    std::cerr << "moec: skipped " << line << "\n";
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

namespace {

const char *const kKeyColumns[] = {
    "gfx",      "cu_num",    "model_dim", "inter_dim", "expert",
    "topk",     "act_type",  "dtype",     "q_dtype_a", "q_dtype_w",
    "q_type",   "use_g1u1",  "doweight_stage1"};
const char *const kFhmoeColumns[] = {"shared_expert_id", "hidden_pad",
                                     "intermediate_pad", "gate_mode"};

bool toU32(const std::string &text, uint32_t &out) {
  if (text.empty() || text.size() > 10 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  uint64_t v = std::stoull(text);
  if (v > UINT32_MAX)
    return false;
  out = static_cast<uint32_t>(v);
  return true;
}

} // namespace

int runAiterSelect(const std::string &bundlePath, uint64_t m,
                   const std::vector<std::string> &where, bool json) {
  std::map<std::string, std::string> columns;
  std::set<std::string> known(std::begin(kKeyColumns), std::end(kKeyColumns));
  known.insert(std::begin(kFhmoeColumns), std::end(kFhmoeColumns));
  for (const std::string &pair : where) {
    size_t eq = pair.find('=');
    std::string column = pair.substr(0, eq);
    if (eq == std::string::npos || !known.count(column)) {
      std::cerr << "moec: --where " << pair
                << ": expected COLUMN=VALUE with a key column of AITER's CSV "
                   "(token comes from --m)\n";
      return kBadInput;
    }
    if (!columns.emplace(column, pair.substr(eq + 1)).second) {
      std::cerr << "moec: --where " << column << ": given twice\n";
      return kBadInput;
    }
  }
  size_t fhmoeGiven = 0;
  for (const char *c : kFhmoeColumns)
    fhmoeGiven += columns.count(c);
  std::vector<std::string> missing;
  for (const char *c : kKeyColumns)
    if (!columns.count(c))
      missing.push_back(c);
  if (fhmoeGiven != 0)
    for (const char *c : kFhmoeColumns)
      if (!columns.count(c))
        missing.push_back(c);
  if (!missing.empty()) {
    std::cerr << "moec: the key needs --where for";
    for (const std::string &c : missing)
      std::cerr << " " << c;
    std::cerr << " (the key is explicit: nothing is defaulted)\n";
    return kBadInput;
  }
  rt::AiterKey key;
  key.gfx = columns["gfx"];
  key.actType = columns["act_type"];
  key.dtype = columns["dtype"];
  key.qDtypeA = columns["q_dtype_a"];
  key.qDtypeW = columns["q_dtype_w"];
  key.qType = columns["q_type"];
  key.fhmoe = fhmoeGiven != 0;
  if (key.fhmoe)
    key.gateMode = columns["gate_mode"];
  struct Number {
    const char *column;
    uint32_t *out;
  } numbers[] = {{"cu_num", &key.cuNum},
                 {"model_dim", &key.modelDim},
                 {"inter_dim", &key.interDim},
                 {"expert", &key.expert},
                 {"topk", &key.topk},
                 {"use_g1u1", &key.useG1u1},
                 {"doweight_stage1", &key.doweightStage1},
                 {"shared_expert_id", &key.sharedExpertId},
                 {"hidden_pad", &key.hiddenPad},
                 {"intermediate_pad", &key.intermediatePad}};
  for (const Number &n : numbers) {
    auto it = columns.find(n.column);
    if (it == columns.end())
      continue;
    if (!toU32(it->second, *n.out)) {
      std::cerr << "moec: --where " << n.column << "=" << it->second
                << ": expected an unsigned integer\n";
      return kBadInput;
    }
  }
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
  if (s.status == rt::AiterStatus::Miss) {
    std::cerr << "moec: " << bundlePath << ": m " << m << ": "
              << rt::describeAiterMiss(manifest.aiterRows, key, s.token)
              << "\n";
    return kCheckFailed;
  }
  const rt::AiterRowInfo &row = manifest.aiterRows[s.row];
  const std::string file = manifest.sources[row.source].path;
  const std::string at = file + ":" + std::to_string(row.line);
  if (s.status == rt::AiterStatus::Skipped) {
    std::cerr << "moec: " << bundlePath << ": m " << m << " (token "
              << s.token << ", " << rt::aiterRuleName(s.rule)
              << ") selects AITER row " << at
              << ", which was not compiled: " << row.skipped << "\n";
    return kCheckFailed;
  }
  if (s.status == rt::AiterStatus::WrongActivation) {
    std::cerr << "moec: " << bundlePath << ": m " << m << " (token "
              << s.token << ", " << rt::aiterRuleName(s.rule)
              << "): AITER would borrow row " << at << " (act_type "
              << row.actType << ") and JIT it for " << key.actType
              << "; this bundle holds no kernel compiled for "
              << key.actType << "\n";
    return kCheckFailed;
  }
  const rt::ConfigInfo &config = manifest.configs[row.config];
  if (json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (uint32_t k : config.kernels)
      kernels.push_back({{"stage", manifest.kernels[k].stage},
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
    std::cout << out.dump(2) << "\n";
    return kSuccess;
  }
  std::cout << "m " << m << " -> token " << s.token << ": row " << at << " ("
            << rt::aiterRuleName(s.rule) << ", token " << row.token << ")\n"
            << "kernelName1 " << row.kernelName1 << "\n"
            << "kernelName2 " << row.kernelName2 << "\n"
            << "block_m " << row.blockM << " ksplit " << row.ksplit << "\n"
            << "config " << config.id << "\n";
  for (uint32_t k : config.kernels)
    std::cout << "  " << manifest.kernels[k].stage << ": "
              << manifest.kernels[k].name << "\n";
  for (const std::string &note : row.notes)
    std::cout << "note: " << note << "\n";
  return kSuccess;
}

} // namespace moec::cli
