//===- AiterCsv.cpp - AITER's tuned fused-MoE CSV as a tuning table -------===//
///
/// \file
/// The facts (column names, the kernel-name grammar, the merge and lookup
/// rules) are AITER's, read from ROCm/aiter (aiter/fused_moe.py,
/// aiter/jit/core.py, aiter/ops/flydsl/moe_kernels.py,
/// aiter/ops/flydsl/kernels/mixed_moe_gemm_2stage_common.py); the code is
/// moec's. docs/aiter-tables.md is the reference.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/AiterCsv.h"
#include "moec/Compiler/CompileTarget.h"
#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "moec/Dialect/Moe/MoeTarget.h"
#include "moec/bundle.h"

#include "llvm/ADT/STLExtras.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>
#include <sstream>
#include <unistd.h>

namespace moec {
namespace {

std::vector<std::string> splitCsvLine(const std::string &line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(field);
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  fields.push_back(field);
  return fields;
}

const char *const kRequiredColumns[] = {
    "cu_num",   "token",    "model_dim", "inter_dim",       "expert",
    "topk",     "act_type", "dtype",     "q_dtype_a",       "q_dtype_w",
    "q_type",   "use_g1u1", "doweight_stage1", "block_m",   "ksplit",
    "kernelName1", "kernelName2"};
const char *const kFhmoeColumns[] = {"shared_expert_id", "hidden_pad",
                                     "intermediate_pad", "gate_mode"};

constexpr const char *kSilu = "ActivationType.Silu";
constexpr const char *kSwiglu = "ActivationType.Swiglu";
constexpr const char *kSituv2 = "ActivationType.Situv2";

/// W13's clamp for ActivationType.Swiglu rows: --swiglu-limit when given,
/// else 7, the limit AITER's runtime_swiglu_limit passes for swiglu.
int64_t swigluLimitOf(const AiterCompileOptions &options) {
  return options.swigluLimit > 0 ? options.swigluLimit : 7;
}

bool fhmoeColumnName(const char *name) {
  for (const char *c : kFhmoeColumns)
    if (std::strcmp(c, name) == 0)
      return true;
  return false;
}

std::string where(const std::string &file, int line, const char *column) {
  return file + ":" + std::to_string(line) + ": column '" + column + "': ";
}

/// AITER's _LEGACY_CU_NUM_TO_GFX (aiter/jit/utils/chip_info.py) knows three
/// counts: 256 (MI355X) and 304 (MI300X), whose arch is that of moec's part
/// with as many CUs, and 80 (MI308X), the same arch as MI300X. Any other
/// count (MI350P's 128 included) gives "", as in AITER.
std::string gfxOfCuNum(uint32_t cuNum) {
  constexpr uint32_t kMi308xCus = 80, kMi300xCus = 304, kMi355xCus = 256;
  if (cuNum == kMi308xCus)
    cuNum = kMi300xCus;
  if (cuNum != kMi300xCus && cuNum != kMi355xCus)
    return "";
  return std::string(target::archOfComputeUnits(cuNum));
}

bool sameKey(const rt::AiterRowInfo &a, const rt::AiterRowInfo &b) {
  return a.gfx == b.gfx && a.cuNum == b.cuNum && a.token == b.token &&
         a.modelDim == b.modelDim && a.interDim == b.interDim &&
         a.expert == b.expert && a.topk == b.topk && a.actType == b.actType &&
         a.dtype == b.dtype && a.qDtypeA == b.qDtypeA &&
         a.qDtypeW == b.qDtypeW && a.qType == b.qType &&
         a.useG1u1 == b.useG1u1 && a.doweightStage1 == b.doweightStage1 &&
         a.fhmoe == b.fhmoe &&
         (!a.fhmoe ||
          (a.sharedExpertId == b.sharedExpertId && a.hiddenPad == b.hiddenPad &&
           a.intermediatePad == b.intermediatePad && a.gateMode == b.gateMode));
}

std::string keyText(const rt::AiterRowInfo &r) {
  std::ostringstream os;
  os << r.gfx << "," << r.cuNum << "," << r.token << "," << r.modelDim << ","
     << r.interDim << "," << r.expert << "," << r.topk << "," << r.actType
     << "," << r.dtype << "," << r.qDtypeA << "," << r.qDtypeW << ","
     << r.qType << "," << r.useG1u1 << "," << r.doweightStage1;
  if (r.fhmoe)
    os << "," << r.sharedExpertId << "," << r.hiddenPad << ","
       << r.intermediatePad << "," << r.gateMode;
  return os.str();
}

/// Reads an unsigned decimal into `out` (up to 2^32 - 1).
bool parseUnsigned(const std::string &text, uint32_t &out) {
  if (text.empty() || text.size() > 10)
    return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (value > UINT32_MAX)
    return false;
  out = static_cast<uint32_t>(value);
  return true;
}

/// `_name{digits}` at the front of `parts[i]`.
bool numberedPart(const std::string &part, const char *prefix, int64_t &value) {
  size_t n = std::strlen(prefix);
  if (part.compare(0, n, prefix) != 0 || part.size() == n)
    return false;
  uint32_t v = 0;
  if (!parseUnsigned(part.substr(n), v))
    return false;
  value = v;
  return true;
}

} // namespace

bool isAiterCsvHeader(const std::string &text) {
  std::string first = text.substr(0, text.find('\n'));
  std::vector<std::string> columns = splitCsvLine(first);
  std::set<std::string> have(columns.begin(), columns.end());
  for (const char *c : {"token", "model_dim", "inter_dim", "expert", "topk",
                        "kernelName1", "kernelName2"})
    if (!have.count(c))
      return false;
  return true;
}

bool isAiterCsvFile(const std::string &path) {
  std::ifstream in(path);
  std::string first;
  if (!in || !std::getline(in, first))
    return false;
  return isAiterCsvHeader(first);
}

bool parseAiterCsv(const std::string &path, const std::string &text,
                   std::vector<AiterCsvRow> &rows, std::string &error) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) {
    error = path + ":1: empty file (expected an AITER tuned fused-MoE CSV header)";
    return false;
  }
  std::vector<std::string> header = splitCsvLine(line);
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < header.size(); ++i) {
    if (column.count(header[i])) {
      error = path + ":1: column '" + header[i] + "': given twice";
      return false;
    }
    column[header[i]] = i;
  }
  if (!column.count("kernelName1") || !column.count("kernelName2")) {
    error = path + ":1: no kernelName1/kernelName2 columns: an untuned AITER "
                   "CSV names no kernels to compile";
    return false;
  }
  for (const char *c : kRequiredColumns)
    if (!column.count(c)) {
      error = path + ":1: column '" + c + "': missing from the header";
      return false;
    }
  size_t fhmoeColumns = 0;
  for (const char *c : kFhmoeColumns)
    fhmoeColumns += column.count(c);
  if (fhmoeColumns != 0 && fhmoeColumns != 4) {
    for (const char *c : kFhmoeColumns)
      if (!column.count(c)) {
        error = path + ":1: column '" + c +
                "': missing (an FHMoE table has shared_expert_id, hidden_pad, "
                "intermediate_pad and gate_mode)";
        return false;
      }
  }
  const bool fhmoe = fhmoeColumns == 4;
  int lineNumber = 1;
  while (std::getline(in, line)) {
    ++lineNumber;
    if (line.empty() || line == "\r")
      continue;
    std::vector<std::string> fields = splitCsvLine(line);
    if (fields.size() > header.size()) {
      error = path + ":" + std::to_string(lineNumber) + ": " +
              std::to_string(fields.size()) + " fields, the header has " +
              std::to_string(header.size());
      return false;
    }
    // A short row reads as pandas reads it: the missing trailing columns
    // are empty.
    const size_t given = fields.size();
    fields.resize(header.size());
    auto get = [&](const char *name) -> std::string {
      auto it = column.find(name);
      return it == column.end() ? std::string() : fields[it->second];
    };
    AiterCsvRow row;
    row.file = path;
    row.line = lineNumber;
    rt::AiterRowInfo &r = row.info;
    r.line = static_cast<uint32_t>(lineNumber);
    struct Number {
      const char *name;
      uint32_t *out;
      bool optional;
    } numbers[] = {{"cu_num", &r.cuNum, false},
                   {"token", &r.token, false},
                   {"model_dim", &r.modelDim, false},
                   {"inter_dim", &r.interDim, false},
                   {"expert", &r.expert, false},
                   {"topk", &r.topk, false},
                   {"use_g1u1", &r.useG1u1, false},
                   {"doweight_stage1", &r.doweightStage1, false},
                   {"block_m", &r.blockM, false},
                   {"ksplit", &r.ksplit, false},
                   {"run_1stage", &row.run1Stage, true},
                   {"xbf16", &row.xbf16, true},
                   {"flat", &row.flat, true},
                   {"shared_expert_id", &r.sharedExpertId, !fhmoe},
                   {"hidden_pad", &r.hiddenPad, !fhmoe},
                   {"intermediate_pad", &r.intermediatePad, !fhmoe}};
    for (const Number &n : numbers) {
      if (!column.count(n.name))
        continue;
      std::string text = get(n.name);
      if (n.optional && text.empty())
        continue;
      if (!parseUnsigned(text, *n.out)) {
        if (n.optional && !fhmoeColumnName(n.name)) {
          // A flag column AITER reads as a number: the row is refused, not
          // the file.
          row.problem = std::string("column '") + n.name + "': '" + text +
                        "' is not 0 or 1" +
                        (given < header.size()
                             ? " (a short row: " + std::to_string(given) +
                                   " fields of " +
                                   std::to_string(header.size()) +
                                   ", read as pandas reads it)"
                             : "");
          continue;
        }
        error = where(path, lineNumber, n.name) + "'" + text +
                "' is not an unsigned integer";
        return false;
      }
    }
    r.gfx = get("gfx");
    r.actType = get("act_type");
    r.dtype = get("dtype");
    r.qDtypeA = get("q_dtype_a");
    r.qDtypeW = get("q_dtype_w");
    r.qType = get("q_type");
    r.kernelName1 = get("kernelName1");
    r.kernelName2 = get("kernelName2");
    r.fhmoe = fhmoe;
    if (fhmoe)
      r.gateMode = get("gate_mode");
    row.tag = get("_tag");
    row.us1 = get("us1");
    row.us2 = get("us2");
    row.us = get("us");
    row.err1 = get("err1");
    row.err2 = get("err2");
    // An empty kernel name (kernelName2 of a one-stage row) refuses the
    // row, not the file: buildAiterTable names it.
    for (const char *c : {"act_type", "dtype", "q_dtype_a", "q_dtype_w",
                          "q_type"})
      if (get(c).empty()) {
        error = where(path, lineNumber, c) + "empty";
        return false;
      }
    // AITER's _ensure_gfx_column: no column, or a placeholder, takes the
    // arch from cu_num.
    if (r.gfx.empty() || r.gfx == "0" || r.gfx == "nan" || r.gfx == "None")
      r.gfx = gfxOfCuNum(r.cuNum);
    rows.push_back(std::move(row));
  }
  return true;
}

bool readAiterCsvs(const std::vector<std::string> &paths,
                   std::vector<AiterCsvRow> &rows, AiterMergeReport &report,
                   std::string &error) {
  std::vector<AiterCsvRow> all;
  for (size_t p = 0; p < paths.size(); ++p) {
    const std::string &path = paths[p];
    const size_t before = all.size();
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      error = path + ": cannot open the AITER CSV (" + std::strerror(errno) + ")";
      return false;
    }
    std::stringstream text;
    text << in.rdbuf();
    if (!parseAiterCsv(path, text.str(), all, error))
      return false;
    for (size_t r = before; r < all.size(); ++r)
      all[r].info.source = static_cast<uint32_t>(p);
  }
  rows.clear();
  std::map<std::string, size_t> firstOfKey;
  for (AiterCsvRow &row : all) {
    const std::string at = row.file + ":" + std::to_string(row.line) + ": ";
    if (row.tag == "flydsl_fallback") {
      report.dropped.push_back(at + "_tag flydsl_fallback: dropped, as AITER "
                                    "drops it before the lookup");
      ++report.fallbackTags;
      continue;
    }
    auto [it, inserted] = firstOfKey.emplace(keyText(row.info), rows.size());
    if (!inserted) {
      const AiterCsvRow &kept = rows[it->second];
      const std::string keptAt = kept.file + ":" + std::to_string(kept.line);
      if (row.info.fhmoe) {
        error = at + "duplicate FHMoE key of " + keptAt +
                " (AITER refuses duplicate dedicated FHMoE rows)";
        return false;
      }
      report.dropped.push_back(at + "duplicate key of " + keptAt +
                               ": dropped, AITER keeps the first row");
      ++report.duplicates;
      continue;
    }
    rows.push_back(std::move(row));
  }
  return true;
}

/// `_xcd{n}`: FlyDSL renumbers workgroups over the 8 XCDs, then orders
/// the renumbered ids in groups of n M tiles: moec's xcd_swizzle followed
/// by group_m = n. `_xcd1` (registered for A16W4) groups single M tiles,
/// which is no grouping: xcd_swizzle alone.
template <typename Fail>
static bool xcdSchedule(int64_t groups, std::map<std::string, std::string> &knobs,
                        Fail &fail) {
  if (groups == 1) {
    knobs["xcd_swizzle"] = "true";
    return true;
  }
  if (groups != 2 && groups != 4 && groups != 8 && groups != 16)
    return fail("_xcd" + std::to_string(groups),
                "a group-M order of " + std::to_string(groups) +
                    " M tiles (moec's group_m is 2, 4, 8 or 16)");
  knobs["xcd_swizzle"] = "true";
  knobs["group_m"] = std::to_string(groups);
  return true;
}

/// The parts of `text` between underscores.
static std::vector<std::string> underscoreParts(const std::string &text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t us = text.find('_', start);
    parts.push_back(text.substr(start, us == std::string::npos
                                           ? std::string::npos
                                           : us - start));
    if (us == std::string::npos)
      return parts;
    start = us + 1;
  }
}

/// `{a}x{b}x...` with exactly `count` unsigned fields.
static bool tileFields(const std::string &text, size_t count,
                       std::vector<int64_t> &out) {
  out.clear();
  size_t start = 0;
  while (true) {
    size_t x = text.find('x', start);
    uint32_t value = 0;
    if (!parseUnsigned(text.substr(start, x == std::string::npos
                                              ? std::string::npos
                                              : x - start),
                       value))
      return false;
    out.push_back(value);
    if (x == std::string::npos)
      return out.size() == count;
    start = x + 1;
  }
}

/// AITER's CK two-stage names (csrc/ck_gemm_moe_2stages_codegen/
/// gemm_moe_ck2stages_common.py, kernelInstanceGEMM1/2 `name`):
///   moe_ck2stages_gemm{S}_{BLOCK_SIZE}x{MPerBlock}x{NPerBlock}x{KPerBlock}
///   _{MWaves}x{NWaves}_{CDEElementOp}_v{pipeline}_Nswizzle{0|1}_Quant{Q}
///   _MulRoutedWeight{0|1}[_{act}, stage 1 only]_{A}_{B}_{C}
/// A stage-2 name with moec's dtypes (A F8 or FP4X2, B FP4X2, C B16) and
/// Quant3 (QuantType.per_1x32) is served by moec's W2 (FP8 or MXFP4
/// activations) with m = MPerBlock, n = NPerBlock, k = KPerBlock and
/// MWaves x NWaves waves. The A4W4 stage 1 (FP4X2 x FP4X2, MulABScaleShuffled,
/// silu, MulRoutedWeight0, one M-wave) is served by moec's A4W4 W13 with n =
/// NPerBlock intermediate columns (gate and up separated) and NWaves waves.
template <typename Refuse>
static bool parseCkName(const std::string &name, int stage,
                        AiterStageKnobs &out, Refuse &refuse) {
  const std::vector<std::string> p = underscoreParts(name);
  // moe, ck2stages, gemm{S}, tile, waves, op, v{n}, Nswizzle, Quant,
  // MulRoutedWeight, [act], A, B, C.
  std::vector<int64_t> tile, waves;
  const size_t expected = p.size() > 2 && p[2] == "gemm1" ? 14 : 13;
  if (p.size() != expected || (p[2] != "gemm1" && p[2] != "gemm2") ||
      !tileFields(p[3], 4, tile) || !tileFields(p[4], 2, waves) ||
      p[6].size() < 2 || p[6][0] != 'v' || p[7].rfind("Nswizzle", 0) != 0 ||
      p[8].rfind("Quant", 0) != 0 || p[9].rfind("MulRoutedWeight", 0) != 0)
    return refuse("family ck2stages: malformed",
                  "not a CK two-stage name as AITER spells it "
                  "(moe_ck2stages_gemm{S}_{BS}x{M}x{N}x{K}_{MW}x{NW}_{op}_v{P}_"
                  "Nswizzle{n}_Quant{Q}_MulRoutedWeight{n}[_{act}]_{A}_{B}_{C})");
  const std::string &a = p[p.size() - 3], &b = p[p.size() - 2],
                    &c = p[p.size() - 1];
  if (p[2] != "gemm" + std::to_string(stage))
    return refuse("family ck2stages: other stage",
                  "a CK " + p[2] + " kernel named as stage " +
                      std::to_string(stage));
  if (a != "F8" && a != "FP4X2")
    return refuse("family ck2stages: A " + a,
                  "CK kernel with A " + a +
                      ": moec's GEMMs take FP8 or MXFP4 (FP4X2) activations, "
                      "so no moec kernel of the same dtypes serves it");
  // The row's check that stage 2 reads what stage 1 writes applies as to
  // FlyDSL names.
  out.aFormat = out.midFormat = a == "FP4X2" ? "fp4" : "fp8";
  if (b != "FP4X2" || c != "B16" || p[8] != "Quant3")
    return refuse("family ck2stages: dtypes",
                  "CK kernel with B " + b + ", C " + c + ", " + p[8] +
                      ": moec's GEMMs take FP4X2 weights, per_1x32 (Quant3) "
                      "scales and write B16");
  if (tile[0] != 64 * waves[0] * waves[1])
    return refuse("family ck2stages: malformed",
                  "BLOCK_SIZE " + std::to_string(tile[0]) + " is not 64 x " +
                      p[4] + " waves");
  if (stage == 1) {
    // Stage 1 (gemm_moe_ck2stages_common_mxfp4.cuh, ck_moe_stage1_gemm:
    // DeviceMoeGemmMXBPreShuffle with IsInputGemm; CK's
    // gridwise_moe_mx_gemm_bpreshuffle.hpp): expert stride 2 N K with N =
    // inter_dim, the up rows at + N K, so a workgroup's NPerBlock columns
    // read gate rows [n0, n0 + NPerBlock) and the same up rows + I: moec's
    // W13 with gate_up_interleave 0 and n = NPerBlock.
    if (a != "FP4X2" || p[5] != "MulABScaleShuffled")
      return refuse(a != "FP4X2" ? "family ck2stages: stage 1 A " + a
                                 : "family ck2stages: stage 1 " + p[5],
                    "a CK stage-1 kernel with A " + a + " and " + p[5] +
                        ": only the A4W4 preshuffled stage 1 "
                        "(MulABScaleShuffled, FP4X2 x FP4X2) is mapped to "
                        "moec's W13");
    if (p[9] != "MulRoutedWeight0")
      return refuse("family ck2stages: stage 1 MulRoutedWeight1",
                    "a CK stage 1 that applies the routing weights "
                    "(doweight_stage1); moec applies them after W2");
    if (p[10] != "silu")
      return refuse("family ck2stages: stage 1 " + p[10],
                    "CK activation op '" + p[10] +
                        "' (ActOP " + (p[10] == "swiglu" ? "3" : "0") +
                        "): only silu (ActivationType.Silu) is mapped to "
                        "moec's W13");
    if (waves[0] != 1)
      return refuse("family ck2stages: stage 1 MWaves " + p[4],
                    "MWaves x NWaves " + p[4] +
                        ": CK splits M over the waves, moec's W13 waves "
                        "split the N tile only");
    if (tile[2] % waves[1] != 0)
      return refuse("family ck2stages: malformed",
                    "NPerBlock " + std::to_string(tile[2]) +
                        " is not a multiple of NWaves");
    out.tileM = tile[1];
    out.aFormat = out.midFormat = "fp4";
    out.actType = "ActivationType.Silu";
    out.knobs = {{"m", std::to_string(tile[1])},
                 {"n", std::to_string(tile[2])},
                 {"k", std::to_string(tile[3])},
                 {"waves", std::to_string(waves[1])},
                 {"orientation", "b_major"},
                 {"b_cache", "cached"}};
    out.substitutedFrom = name;
    out.notes.push_back(
        "substituted: AITER's CK stage 1 " + name + " is served by moec's "
        "W13 with its tile (m " + std::to_string(tile[1]) + ", n " +
        std::to_string(tile[2]) + " intermediate columns, gate row j and up "
        "row I + j as CK's IsInputGemm reads them, k " +
        std::to_string(tile[3]) + ", " + std::to_string(waves[1]) +
        " waves); CK writes a BF16 intermediate that AITER quantises to "
        "MXFP4 for stage 2 (fused_dynamic_mxfp4_quant_moe_sort), moec's W13 "
        "quantises in its epilogue; CK's pipeline " + p[6] + " and " + p[7] +
        " are its own schedule");
    return true;
  }
  out.tileM = tile[1];
  out.knobs = {{"m", std::to_string(tile[1])},
               {"n", std::to_string(tile[2])},
               {"k", std::to_string(tile[3])},
               {"waves", std::to_string(waves[0] * waves[1])},
               {"orientation", "b_major"}};
  out.substitutedFrom = name;
  out.notes.push_back(
      "substituted: AITER's CK kernel " + name + " is served by moec's W2 "
      "with its tile (m " + std::to_string(tile[1]) + ", n " +
      std::to_string(tile[2]) + ", k " + std::to_string(tile[3]) + ", " +
      std::to_string(waves[0] * waves[1]) + " waves); CK's pipeline, " +
      p[7] + " and " + p[9] + " are CK's own schedule and epilogue (moec's "
      "combine applies the routing weights)");
  return true;
}

/// AITER's opus A8W4 stage 1 (csrc/opus_moe/opus_moe_common.py, the
/// OPUS_A8W4_STAGE1_INSTANCES catalogue; the traits and pipelines in
/// csrc/opus_moe/include/gfx950/a8w4/stage1/):
///   opus_moe1_afp8_wfp4_bf16_t{M}x{N}_{pair|gs}[_{setting}...][_fp8]
/// Both pipelines read the FlyDSL _gui weight layout (gate and up
/// interleaved in 16-row blocks), step K by 256 (two 16x16x128 scaled
/// MFMAs), clamp by the caller's runtime swiglu_limit, apply the row's
/// activation (the caller's, not the name's) in FP32 and write the FP8
/// intermediate with one E8M0 scale per 32 columns, 2^ceil(log2(amax /
/// 448)) (the trailing _fp8 is the tuner's profile suffix; the kernel
/// always writes FP8). `pair` with kw{n}: a
/// workgroup of 32 intermediate columns, two waves (one 16-column half
/// each) per K group, H cut over n groups whose FP32 sums are reduced in
/// LDS: moec's W13 n 32, waves 2, k_waves n. `gs` (gate/up group split):
/// N counts gate and up rows, N / 2 intermediate columns per workgroup,
/// bt{n} threads (256 without it), one K group: moec's W13 n N / 2, waves
/// bt / 64. The other settings are launch and schedule choices.
template <typename Refuse>
static bool parseOpusStage1Name(const std::string &name, AiterStageKnobs &out,
                                Refuse &refuse) {
  std::vector<std::string> p =
      underscoreParts(name.substr(std::string("opus_moe1_").size()));
  std::vector<int64_t> tile;
  if (p.size() < 5 || p[0] != "afp8" || p[1] != "wfp4" || p[2] != "bf16" ||
      p[3].size() < 2 || p[3][0] != 't' ||
      !tileFields(p[3].substr(1), 2, tile) ||
      (p[4] != "pair" && p[4] != "gs"))
    return refuse("family opus: stage 1 not A8W4",
                  "not an opus A8W4 stage-1 name (opus_moe1_afp8_wfp4_bf16_"
                  "t{M}x{N}_{pair|gs}...); moec's W13 takes FP8 x MXFP4");
  const bool groupSplit = p[4] == "gs";
  if (p.back() == "fp8")
    p.pop_back();
  int64_t kWaves = 1, threads = 256, value = 0;
  std::string schedule;
  for (size_t i = 5; i < p.size(); ++i) {
    const std::string &part = p[i];
    if (!groupSplit && numberedPart(part, "kw", value)) {
      kWaves = value;
    } else if (groupSplit && numberedPart(part, "bt", value)) {
      threads = value;
    } else if (part == "stream" || part == "k1lead" || part == "mmajor" ||
               part == "reverse" || numberedPart(part, "m", value) ||
               numberedPart(part, "qgb", value) ||
               numberedPart(part, "k", value) ||
               numberedPart(part, "aff", value) ||
               numberedPart(part, "p", value)) {
      schedule += "_" + part;
    } else {
      return refuse("family opus: stage 1 part '_" + part + "'",
                    "part '_" + part + "' is not an opus stage-1 setting "
                    "moec knows (kw, bt, m, qgb, stream, k, aff, p, k1lead, "
                    "mmajor, reverse)");
    }
  }
  const int64_t columns = groupSplit ? tile[1] / 2 : 32;
  const int64_t waves = groupSplit ? threads / 64 : 2;
  if (kWaves < 1 || kWaves > 8)
    return refuse("family opus: stage 1 kw" + std::to_string(kWaves),
                  "opus 'pair' with " + std::to_string(kWaves) +
                      " K-wave groups (" + std::to_string(2 * kWaves) +
                      " waves): moec's W13 splits K over 1 to 8 wave "
                      "groups");
  if (columns < 32 || columns > 512 || columns % 32 != 0)
    return refuse("family opus: stage 1 N " + std::to_string(tile[1]),
                  "opus 'gs' with N " + std::to_string(tile[1]) +
                      " gate/up rows is " + std::to_string(columns) +
                      " intermediate columns per workgroup: moec's W13 "
                      "tile.n is a multiple of 32 from 32 to 512");
  if (threads % 64 != 0 || !llvm::is_contained({1, 2, 4, 8}, waves) ||
      (columns / waves) % 16 != 0)
    return refuse("family opus: stage 1 bt" + std::to_string(threads),
                  std::to_string(threads) + " threads over " +
                      std::to_string(columns) +
                      " columns: moec's W13 gives each of 1, 2, 4 or 8 "
                      "waves a multiple of 16 columns");
  out.tileM = tile[0];
  out.knobs = {{"m", std::to_string(tile[0])},
               {"n", std::to_string(columns)},
               {"k", "256"},
               {"waves", std::to_string(waves)},
               {"gate_up_interleave", "16"},
               {"orientation", "b_major"},
               {"b_cache", "cached"}};
  if (kWaves > 1)
    out.knobs["k_waves"] = std::to_string(kWaves);
  out.substitutedFrom = name;
  out.notes.push_back(
      "substituted: AITER's opus stage 1 " + name + " is served by moec's "
      "W13 with its tile (m " + std::to_string(tile[0]) + ", " +
      std::to_string(columns) + " intermediate columns of the 16-row "
      "interleaved gate/up weight, K steps of 256, " + std::to_string(waves) +
      " waves" +
      (kWaves > 1 ? " per K group, " + std::to_string(kWaves) + " K groups"
                  : std::string()) +
      ")" +
      (schedule.empty() ? std::string()
                        : "; opus's settings " + schedule +
                              " (launch bounds, cache policy, K-loop start, "
                              "tile order) are not reproduced, so FP32 sums "
                              "may be added in another order"));
  return true;
}

/// AITER's opus names (csrc/opus_moe/opus_moe_common.py, the Stage1/Stage2
/// instance tables). Stage 2:
///   opus_moe2_a{A}_w{W}_{atomic|bf16|fp8}_t{M}x{N}x{K}_sbm{n}[_...]
/// where the parts after _sbm are opus launch settings (occ{n}, cache_b{n},
/// ws{n}, bt{n}, rbn{n}, small, ring{n}). atomic and bf16 (per-route BF16
/// rows, then opus's route reduction) are served by moec's W2 (per-route
/// BF16 rows, then the combine); fp8 writes the route rows in FP8 and is
/// refused. Stage 1: parseOpusStage1Name.
template <typename Refuse>
static bool parseOpusName(const std::string &name, int stage,
                          AiterStageKnobs &out, Refuse &refuse) {
  if (name.rfind("opus_moe2_layout_", 0) == 0)
    return refuse("family opus: layout",
                  "opus's _layout_ stage 2 reads its own intermediate layout "
                  "(like flydsl_moe2_layout_); no moec W2 reads it");
  const std::string prefix = stage == 1 ? "opus_moe1_" : "opus_moe2_";
  if (name.rfind(prefix, 0) != 0)
    return refuse("family opus: other stage",
                  "not an opus stage-" + std::to_string(stage) + " name (" +
                      prefix + "...)");
  if (stage == 1)
    return parseOpusStage1Name(name, out, refuse);
  const std::vector<std::string> p =
      underscoreParts(name.substr(prefix.size()));
  std::vector<int64_t> tile;
  if (p.size() < 5 || p[0] != "afp8" || p[1] != "wfp4" ||
      !tileFields(p[3].empty() ? "" : p[3].substr(1), 3, tile) ||
      p[3][0] != 't')
    return refuse("family opus: not A8W4",
                  "not an opus A8W4 stage-2 name (opus_moe2_afp8_wfp4_{mode}_"
                  "t{M}x{N}x{K}_sbm{n}...); moec's W2 takes FP8 x MXFP4");
  const std::string &mode = p[2];
  // Mode fp8 (opus_moe_pipeline_stage2_a8w4_decode_main_gfx950.cuh,
  // route_out_fp8; opus_moe_stage2_route_output_reduce_gfx950.cuh): each
  // weighted route row rounded to BF16, then MXFP8 with one E8M0 scale per
  // 8 columns, 2^(floor(log2 amax) - 7), row [H FP8 | H/8 scales]; the
  // reduction dequantises and sums in FP32. moec's FP8 rows (the fused
  // stage 2's payload = fp8, combine fp8_peer_rows) are 1x32 blocks
  // scaled 2^ceil(log2(amax / 448)) from the FP32 value: another format.
  if (mode == "fp8")
    return refuse("family opus: fp8 route rows",
                  "opus mode fp8 writes each route's row in FP8 before its "
                  "FP32 route reduction: the weighted row rounded to BF16, "
                  "then E4M3 with one E8M0 scale per 8 columns, "
                  "2^(floor(log2 amax) - 7); moec's FP8 route rows (payload "
                  "fp8, combine fp8_peer_rows) are 1x32 blocks scaled "
                  "2^ceil(log2(amax / 448)) from the FP32 value, another "
                  "format, and its TP W2 writes BF16 rows");
  if (mode != "atomic" && mode != "bf16")
    return refuse("family opus: malformed",
                  "opus stage-2 mode '" + mode + "' (atomic, bf16 or fp8)");
  int64_t sbm = 0;
  if (!numberedPart(p[4], "sbm", sbm))
    return refuse("family opus: malformed", "expected _sbm{n} after the tile");
  std::string launch;
  for (size_t i = 5; i < p.size(); ++i)
    launch += "_" + p[i];
  out.tileM = tile[0];
  out.sortBlockM = sbm;
  out.knobs = {{"m", std::to_string(tile[0])},
               {"n", std::to_string(tile[1])},
               {"k", std::to_string(tile[2])},
               {"waves", "4"},
               {"orientation", "b_major"},
               {"b_cache", "cached"}};
  if (sbm != tile[0])
    out.knobs["sort_block_m"] = std::to_string(sbm);
  out.substitutedFrom = name;
  out.notes.push_back(
      "substituted: AITER's opus kernel " + name + " is served by moec's W2 "
      "with its tile (m " + std::to_string(tile[0]) + ", n " +
      std::to_string(tile[1]) + ", k " + std::to_string(tile[2]) +
      ", 4 waves as FlyDSL's stage 2); mode " + mode +
      ": moec's W2 writes each route's BF16 row and the combine sums them" +
      (launch.empty() ? std::string()
                      : "; opus's launch settings " + launch +
                            " are not reproduced"));
  return true;
}

/// AITER's CK-tile names, cktile_a8w4_bm{32|64}: written by AITER's tuner
/// (csrc/ck_gemm_moe_2stages_codegen/gemm_moe_tune.py) with the block M
/// only. fused_moe never passes the name to the kernel: for kernelName2 it
/// runs cktile_moe_stage2, whose C++ picks the instance from the dtypes and
/// block_m (csrc/ck_tile_gemm_moe_2stages/moe_cktile2stages_common.py, the
/// a8w4 heuristic: 32 -> instance 1, 64 -> instance 3, anything else a
/// check failure), and those instances are M x 256 x 256 with 256 threads,
/// four waves side by side along N, the 16x16x128 scaled MFMA. Stage 2
/// multiplies by the routing weight and adds BF16 into the output with
/// atomics. So stage 2 is moec's W2 of that tile. fused_moe has no CK-tile
/// branch for kernelName1 (aiter/fused_moe.py at e4048607a5: is_cktile2
/// only): such a row runs a heuristic FlyDSL pair for both stages instead
/// of its named kernels, so moec refuses it rather than guess.
template <typename Refuse>
static bool parseCktileName(const std::string &name, int stage,
                            AiterStageKnobs &out, Refuse &refuse) {
  if (stage == 1)
    return refuse("family cktile: stage 1",
                  "AITER's fused_moe does not run a CK-tile stage-1 name: "
                  "a row naming one runs a heuristic FlyDSL pair for both "
                  "stages instead of its named kernels (aiter/fused_moe.py "
                  "at e4048607a5), which moec does not guess");
  const std::vector<std::string> p =
      underscoreParts(name.substr(std::string("cktile_").size()));
  int64_t blockM = 0;
  if (p.size() != 2 || p[0] != "a8w4" || !numberedPart(p[1], "bm", blockM))
    return refuse("family cktile: not a8w4",
                  "not a CK-tile A8W4 name (cktile_a8w4_bm{M}): AITER's "
                  "tuner writes no other, and moec maps only that one");
  if (blockM != 32 && blockM != 64)
    return refuse("family cktile: block m",
                  "block M " + std::to_string(blockM) +
                      ": AITER's A8W4 CK-tile heuristic has instances for "
                      "block M 32 and 64 only");
  out.tileM = blockM;
  out.knobs = {{"m", std::to_string(blockM)},
               {"n", "256"},
               {"k", "256"},
               {"waves", "4"},
               {"orientation", "b_major"},
               {"b_cache", "cached"}};
  out.substitutedFrom = name;
  out.notes.push_back(
      "substituted: AITER's CK-tile stage 2 " + name + " runs the A8W4 "
      "instance of block M " + std::to_string(blockM) + " (tile " +
      std::to_string(blockM) + " x 256 x 256, four waves along N), served by "
      "moec's W2 of that tile; CK-tile adds each routing-weighted row into "
      "the output with BF16 atomics, moec's W2 writes each route's BF16 row "
      "and the combine applies the weights and sums in FP32; moec's W2 "
      "applies the intermediate's E8M0 scales (the CK-tile source read for "
      "this mapping, a later CK than AITER's pin, does not read A scales in "
      "its MXFP4 pipeline, and AITER's tuner times it with unit scales)");
  return true;
}

/// AITER's FlyDSL "v2" stage 2 (aiter/ops/flydsl/mxfp4_kname.py,
/// _FLYDSL_V2_GEMM2_RE; the kernel is aiter/ops/flydsl/kernels/mega_moe/
/// gemm2.py):
///   flydsl_moe2_layout_a{A}_w{W}_{out}_t{M}x{N}x{K}_{atomic|reduce}
///   [_persist][_nt][_sbm{n}][_bf16lds][_sp{n}]
/// It reads the intermediate by sorted row (its stage 1 writes with
/// v2_output_layout: row = the sorted position, not token * topk + slot).
/// moec's W13 and W2 both index the intermediate by route, so the layer is
/// the same: a name with moec's dtypes is served by moec's W2 with its tile
/// (_nt: b_cache nt; _sbm: sort_block_m); _persist, _bf16lds and _sp{n}
/// (the tile order of the spatial partition, group sp / 100, m01 sp % 100)
/// are its own schedule.
template <typename Refuse>
static bool parseLayoutName(const std::string &name, AiterStageKnobs &out,
                            Refuse &refuse) {
  const std::vector<std::string> p =
      underscoreParts(name.substr(std::strlen("flydsl_moe2_layout_")));
  std::vector<int64_t> tile;
  if (p.size() < 5 || p[3].size() < 2 || p[3][0] != 't' ||
      !tileFields(p[3].substr(1), 3, tile) ||
      (p[4] != "atomic" && p[4] != "reduce"))
    return refuse("family flydsl_moe2_layout: malformed",
                  "not a flydsl_moe2_layout_ name as AITER spells it "
                  "(a{A}_w{W}_{out}_t{M}x{N}x{K}_{atomic|reduce}[_persist]"
                  "[_nt][_sbm{n}][_bf16lds][_sp{n}])");
  if (p[0] != "afp8" && p[0] != "afp4")
    return refuse("part '_" + p[0] + "'",
                  "part '_" + p[0] + "': moec's GEMMs take FP8 E4M3 (afp8) "
                  "or MXFP4 (afp4) activations");
  out.aFormat = out.midFormat = p[0] == "afp4" ? "fp4" : "fp8";
  if (p[1] != "wfp4" || p[2] != "bf16")
    return refuse("family flydsl_moe2_layout: dtypes",
                  "weights " + p[1] + ", output " + p[2] +
                      ": moec's W2 takes wfp4 and writes bf16");
  size_t i = 5;
  bool persist = false, nt = false, bf16Lds = false;
  int64_t sbm = 0, sp = 0;
  if (i < p.size() && p[i] == "persist")
    persist = true, ++i;
  if (i < p.size() && p[i] == "nt")
    nt = true, ++i;
  if (i < p.size() && numberedPart(p[i], "sbm", sbm))
    ++i;
  if (i < p.size() && p[i] == "bf16lds")
    bf16Lds = true, ++i;
  if (i < p.size() && numberedPart(p[i], "sp", sp))
    ++i;
  if (i < p.size())
    return refuse("family flydsl_moe2_layout: malformed",
                  "part '_" + p[i] + "' is not of the flydsl_moe2_layout_ "
                  "grammar");
  out.tileM = tile[0];
  out.sortBlockM = sbm;
  out.knobs = {{"m", std::to_string(tile[0])},
               {"n", std::to_string(tile[1])},
               {"k", std::to_string(tile[2])},
               {"waves", "4"},
               {"orientation", "b_major"},
               {"b_cache", nt ? "nt" : "cached"}};
  if (sbm > 0 && sbm != tile[0])
    out.knobs["sort_block_m"] = std::to_string(sbm);
  out.substitutedFrom = name;
  std::string own;
  if (persist)
    own += " _persist";
  if (bf16Lds)
    own += " _bf16lds";
  if (sp > 0)
    own += " _sp" + std::to_string(sp);
  out.notes.push_back(
      "substituted: AITER's FlyDSL layout (v2) stage 2 " + name +
      " is served by moec's W2 with its tile (m " + std::to_string(tile[0]) +
      ", n " + std::to_string(tile[1]) + ", k " + std::to_string(tile[2]) +
      ", 4 waves): it reads the intermediate by sorted row, moec's W13 and "
      "W2 by route, the same layer; _" + p[4] +
      ": moec's W2 writes each route's row and the combine sums them" +
      (own.empty() ? std::string()
                   : ";" + own + " (its schedule) not reproduced"));
  return true;
}

/// AITER's FlyDSL mxmoe names (aiter/ops/flydsl/mxfp4_kname.py, parsed
/// without regard to the order of the parts after the tile):
///   flydsl_mxmoe_g{1|2}_a4w4_{BM}x256x256[_f16in][_nt][_atomic][_f4out]
///   [_cshuffle][_sk{n}][_xcd{n}]
/// g1 (kernels/mxfp4_gemm1.py): MXFP4 tokens x MXFP4 W1, 4 waves; its BN of
/// 256 counts rows of the [2I] weight: 128 gate rows and the same 128 up
/// rows + I (GateMode.SEPARATED, AITER's default for these tables), SiLU
/// and MXFP4 quantisation of the intermediate in its epilogue, written by
/// sorted row. g2 (kernels/mxfp4_gemm2.py): MXFP4 intermediate x MXFP4 W2,
/// BN 256 hidden columns over 4 waves, BK 256. Served by moec's A4W4 W13
/// (n = 128) and MXFP4 W2 (n = 256) with the same BM and K step.
template <typename Refuse>
static bool parseMxmoeName(const std::string &name, int stage,
                           AiterStageKnobs &out, Refuse &refuse) {
  const std::string prefix =
      stage == 1 ? "flydsl_mxmoe_g1_a4w4_" : "flydsl_mxmoe_g2_a4w4_";
  if (name.rfind(prefix, 0) != 0)
    return refuse("family flydsl_mxmoe: other stage",
                  "not an mxmoe stage-" + std::to_string(stage) + " name (" +
                      prefix + "...)");
  const std::vector<std::string> p =
      underscoreParts(name.substr(prefix.size()));
  std::vector<int64_t> tile;
  if (!tileFields(p[0], 3, tile))
    return refuse("family flydsl_mxmoe: malformed",
                  "expected {BM}x256x256 after '" + prefix + "'");
  if (tile[1] != 256 || tile[2] != 256)
    return refuse("family flydsl_mxmoe: malformed",
                  "mxmoe kernels take BN = BK = 256 only (mxfp4_gemm" +
                      std::to_string(stage) + ".py asserts it)");
  bool f16in = false, nt = false, atomic = false, f4out = false,
       cshuffle = false;
  for (size_t i = 1; i < p.size(); ++i) {
    const std::string &part = p[i];
    int64_t value = 0;
    if (stage == 1 && part == "f16in")
      f16in = true;
    else if (part == "nt")
      nt = true;
    else if (stage == 2 && part == "atomic")
      atomic = true;
    else if (stage == 2 && part == "f4out")
      f4out = true;
    else if (stage == 2 && part == "cshuffle")
      cshuffle = true;
    else if (numberedPart(part, "sk", value))
      return refuse("family flydsl_mxmoe: _sk",
                    "part '_" + part + "': mxmoe's split-K (kSplitK) has no "
                    "moec counterpart");
    else if (numberedPart(part, "xcd", value))
      return refuse("family flydsl_mxmoe: _xcd",
                    "part '_" + part + "': mxmoe's own tile order "
                    "(xcd_swizzle groups of M tiles) is not mapped to moec's "
                    "schedule");
    else
      return refuse("family flydsl_mxmoe: malformed",
                    "part '_" + part + "' is not of the mxmoe g" +
                        std::to_string(stage) + " grammar");
  }
  if (atomic && (f4out || cshuffle))
    return refuse("family flydsl_mxmoe: malformed",
                  std::string("_atomic with _") +
                      (f4out ? "f4out" : "cshuffle") +
                      " (AITER refuses the name)");
  const std::string bm = std::to_string(tile[0]);
  out.tileM = tile[0];
  out.aFormat = out.midFormat = "fp4";
  out.knobs = {{"m", bm},
               {"n", stage == 1 ? "128" : "256"},
               {"k", "256"},
               {"waves", "4"},
               {"orientation", "b_major"},
               {"b_cache", nt ? "nt" : "cached"}};
  out.substitutedFrom = name;
  if (stage == 1) {
    out.notes.push_back(
        "substituted: AITER's FlyDSL mxmoe stage 1 " + name +
        " is served by moec's W13 with its tile (m " + bm +
        ", n 128 intermediate columns: BN 256 rows of gate and up, k 256, 4 "
        "waves); it writes the MXFP4 intermediate by sorted row, moec's W13 "
        "by route, the same layer; its E8M0 scale is the RoundUp of amax / "
        "6 (mxfp4_gemm_common.py _e8m0_roundup), moec's W13 uses its own "
        "rule (docs/numerics.md), one exponent lower for a block whose amax "
        "significand lies in (1.5, 1.75)" +
        (f16in ? std::string("; _f16in: the kernel quantises the BF16 "
                             "tokens itself (the same RoundUp rule), moec's "
                             "quant kernel does it with its own")
               : std::string()));
    return true;
  }
  out.notes.push_back(
      "substituted: AITER's FlyDSL mxmoe stage 2 " + name +
      " is served by moec's MXFP4 W2 with its tile (m " + bm +
      ", n 256, k 256, 4 waves); " +
      (atomic ? std::string("_atomic: AITER adds the weighted BF16 rows into "
                            "the output with atomics")
              : std::string("AITER writes BF16 rows by sorted row and sums "
                            "the weighted rows per token "
                            "(mxfp4_moe_scatter_reduce)")) +
      ", moec's W2 writes each route's row and the combine sums the weighted "
      "rows in FP32 in increasing k" +
      (f4out ? std::string("; _f4out: AITER drops it (BF16 rows) unless BM "
                           "128, H 7168, I 512, E 257 or 385 and "
                           "AITER_MXFP4_INTERMEDIATE=1 (off by default), "
                           "which round the rows to MXFP4 before the sum; "
                           "moec keeps BF16 rows")
             : std::string()) +
      (cshuffle ? std::string("; _cshuffle (its epilogue's staging) not "
                              "reproduced")
                : std::string()));
  return true;
}

bool parseAiterKernelName(const std::string &name, int stage,
                          AiterStageKnobs &out, std::string &reason) {
  out = AiterStageKnobs();
  const std::string prefix = stage == 1 ? "flydsl_moe1_" : "flydsl_moe2_";
  auto refuse = [&](const std::string &refusalClass, const std::string &why) {
    out.refusalClass = refusalClass;
    reason = "'" + name + "': " + why;
    return false;
  };
  if (name.empty())
    return refuse("empty (a one-stage row)",
                  "no stage-" + std::to_string(stage) +
                      " kernel (a one-stage row, run_1stage 1, names its "
                      "kernel in kernelName1 only): moec has no one-stage "
                      "kernel");
  // Other families, each its own backend: AITER's CK two-stage kernels
  // (moe_ck2stages_*) and opus, served by moec's own kernel where their
  // names give the tile and moec's dtypes; CK tile names give only the
  // block M; assembly kernels.
  if (name.rfind("moe_ck2stages_", 0) == 0)
    return parseCkName(name, stage, out, refuse);
  if (name.rfind("opus_", 0) == 0)
    return parseOpusName(name, stage, out, refuse);
  if (name.rfind("cktile_", 0) == 0)
    return parseCktileName(name, stage, out, refuse);
  for (auto [other, backend] :
       {std::pair<const char *, const char *>{"ck_", "ck"}, {"asm", "asm"}})
    if (name.rfind(other, 0) == 0)
      return refuse(std::string("family ") + backend,
                    std::string("backend ") + backend +
                        ", not FlyDSL (moec compiles FlyDSL names only)");
  if (name.rfind("flydsl_mxmoe_", 0) == 0)
    return parseMxmoeName(name, stage, out, refuse);
  if (name.rfind(prefix, 0) != 0)
    return refuse("family other", "not a FlyDSL stage-" +
                                      std::to_string(stage) + " name (" +
                                      prefix + "...)");
  if (stage == 2 && name.rfind("flydsl_moe2_layout_", 0) == 0)
    return parseLayoutName(name, out, refuse);
  // AITER's hand-tuned stage-2 production variant (moe_kernels.py,
  // _register_production_variants_stage2): registered only on top of
  // flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic, with persist, async
  // copies, waves_per_eu 4 and cu_num_mul 3. The tile and dtypes are the
  // base name's: served by moec's W2 of that name, its schedule named.
  const std::string production = "_persist_async_w4_cumul3";
  if (stage == 2 && name.size() > production.size() &&
      name.compare(name.size() - production.size(), production.size(),
                   production) == 0) {
    const std::string base = name.substr(0, name.size() - production.size());
    if (base != "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic")
      return refuse("part '" + production + "'",
                    "part '" + production + "': AITER registers this "
                    "production variant on "
                    "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic only");
    std::string baseReason;
    if (!parseAiterKernelName(base, 2, out, baseReason)) {
      reason = baseReason;
      return false;
    }
    out.substitutedFrom = name;
    out.notes.push_back(
        "substituted: AITER's FlyDSL production variant " + name +
        " is served by moec's W2 of " + base +
        " (m 64, n 128, k 256, 4 waves); its schedule is not reproduced: "
        "a persistent grid of 3 x cu_num workgroups (cu_num_mul 3) each "
        "over a contiguous run of M tiles, A copied to LDS asynchronously "
        "(use_async_copy) and rocdl.waves_per_eu 4; moec launches one "
        "workgroup per tile");
    return true;
  }
  std::vector<std::string> parts;
  {
    std::string rest = name.substr(prefix.size());
    size_t start = 0;
    while (true) {
      size_t us = rest.find('_', start);
      parts.push_back(rest.substr(start, us == std::string::npos ? std::string::npos
                                                                 : us - start));
      if (us == std::string::npos)
        break;
      start = us + 1;
    }
  }
  auto fail = [&](const std::string &part, const std::string &why) {
    return refuse(part == name ? std::string("malformed FlyDSL name")
                               : "part '" + part + "'",
                  "part '" + part + "': " + why);
  };
  if (parts.size() < 4)
    return fail(name, "expected a{A}_w{W}_{out}_t{M}x{N}x{K}");
  // FP8 E4M3 (A8W4), MXFP4 (A4W4) or BF16 (A16W4) activations.
  if (parts[0] != "afp8" && parts[0] != "afp4" && parts[0] != "abf16")
    return fail("_" + parts[0], "moec's GEMMs take FP8 E4M3 (afp8), MXFP4 "
                                "(afp4) or BF16 (abf16) activations");
  const bool fp4A = parts[0] == "afp4";
  const bool bf16A = parts[0] == "abf16";
  out.aFormat = fp4A ? "fp4" : bf16A ? "bf16" : "fp8";
  if (parts[1] != "wfp4")
    return fail("_" + parts[1], "moec's GEMMs take MXFP4 weights (wfp4)");
  if (parts[2] != "bf16")
    return fail("_" + parts[2], "moec writes BF16 layer outputs (bf16)");
  int64_t tm = 0, tn = 0, tk = 0;
  {
    const std::string &t = parts[3];
    unsigned m = 0, n = 0, k = 0;
    char tail = 0;
    if (t.empty() || t[0] != 't' ||
        std::sscanf(t.c_str(), "t%ux%ux%u%c", &m, &n, &k, &tail) != 3)
      return fail("_" + t, "expected t{M}x{N}x{K}");
    tm = m, tn = n, tk = k;
  }
  out.tileM = tm;
  size_t i = 4;
  auto next = [&]() -> const std::string * {
    return i < parts.size() ? &parts[i] : nullptr;
  };
  int64_t value = 0;
  std::map<std::string, std::string> &knobs = out.knobs;
  knobs["m"] = std::to_string(tm);
  knobs["k"] = std::to_string(tk);
  knobs["orientation"] = "b_major";
  if (stage == 1) {
    // Registry order (get_flydsl_stage1_kernels): _w{wpe} _kb{n} _bnt{n}
    // _go _gui _xcd{n} _kw{n}, then the suffixes _fp4/_fp8 _sbm{n}.
    int64_t wpe = 1, bnt = 2, xcd = 0;
    bool gui = false, fp8 = false;
    if (next() && numberedPart(*next(), "w", value))
      wpe = value, ++i;
    if (next() && numberedPart(*next(), "kb", value))
      return fail("_" + *next(), "stage-1 split-K (k_batch) is registered "
                                 "for FP4 activations only and moec's W13 has "
                                 "no split-K");
    if (next() && numberedPart(*next(), "bnt", value)) {
      if (value != 0 && value != 2)
        return fail("_" + *next(), "b_nt must be 0 or 2");
      bnt = value, ++i;
    }
    if (next() && *next() == "go")
      return fail("_go", "the mock gate-only split-K mode has no moec "
                         "counterpart");
    if (next() && *next() == "gui")
      gui = true, ++i;
    if (next() && numberedPart(*next(), "xcd", value))
      xcd = value, ++i;
    if (next() && numberedPart(*next(), "kw", value)) {
      // k_wave: tile.k_waves, with get_flydsl_stage1_kernels' rules (split-K
      // and _go were refused above): tile m 32, at most 8 waves in all, 4 N
      // <= K, and for FP8 activations at least 2 N-waves.
      const int64_t nWaves = std::min<int64_t>(4, tn / 32);
      const std::string part = "_" + *next();
      if (value != 1 && value != 2 && value != 4)
        return fail(part, "k_wave must be 1, 2 or 4");
      if (value > 1 && tm != 32)
        return fail(part, "k_wave is registered for tile m 32 only");
      if (value > 1 && nWaves * value > 8)
        return fail(part, "k_wave " + std::to_string(value) + " x " +
                              std::to_string(nWaves) +
                              " N-waves exceeds 8 waves");
      if (value > 1 && 4 * tn > tk)
        return fail(part, "k_wave needs 4 N <= K");
      if (value > 1 && parts[0] == "afp8" && nWaves < 2)
        return fail(part, "k_wave with FP8 activations needs at least 2 "
                          "N-waves (N >= 64)");
      if (value > 1)
        knobs["k_waves"] = std::to_string(value);
      ++i;
    }
    bool fp4Mid = false;
    if (next() && *next() == "fp4")
      fp4Mid = true, ++i;
    else if (next() && *next() == "fp8")
      fp8 = true, ++i;
    // The intermediate stage 2 reads: MXFP4 with _fp4; an A4W4 stage 1
    // without a suffix writes BF16 that AITER quantises to MXFP4 for its
    // FP4 stage 2, so moec's W13 writes MXFP4 in its epilogue.
    out.midFormat = fp4Mid || (fp4A && !fp8) ? "fp4" : "fp8";
    // A16W4 (a16wmix gemm1): a BF16 intermediate, no requantisation.
    if (bf16A && (fp4Mid || fp8))
      return fail(fp4Mid ? "_fp4" : "_fp8",
                  "an A16W4 stage 1 writes a BF16 intermediate");
    if (bf16A)
      out.midFormat = "bf16";
    if (next() && numberedPart(*next(), "sbm", value))
      return fail("_" + *next(), "a stage-1 sort block other than its tile m");
    if (next())
      return fail("_" + *next(), "not part of AITER's stage-1 grammar here");
    if (!gui && !fp4A && !bf16A)
      return fail(parts[3], "FP8-activation stage-1 names always carry _gui "
                            "in AITER's registry (gate/up interleaved)");
    if (!gui) {
      // GateMode.SEPARATED (A4W4, A16W4): N counts intermediate columns,
      // gate row j and up row I + j (mixed_moe_gemm_2stage_common: up_row_w
      // = gate_row_w + inter_dim); min(4, N/32) waves (A16W4: 4 / k_wave).
      if (tn % 32 != 0)
        return fail(parts[3], "tile n must be a multiple of 32");
      knobs["n"] = std::to_string(tn);
      knobs["waves"] = std::to_string(std::min<int64_t>(4, tn / 32));
      if (bf16A) {
        // The a16wmix gemm1 splits its 4 waves into 4 / k_wave N-waves and
        // k_wave K-waves (moec: tile.waves and tile.k_waves).
        const int64_t kWaves =
            knobs.count("k_waves") ? std::stoll(knobs["k_waves"]) : 1;
        knobs["waves"] = std::to_string(4 / kWaves);
      }
      knobs["b_cache"] = bnt == 2 ? "nt" : "cached";
      if (!fp4Mid && !fp8 && !bf16A)
        out.notes.push_back("stage 1 without _fp4: AITER writes a BF16 "
                            "intermediate and quantises it to MXFP4 for "
                            "stage 2; moec's W13 quantises in its epilogue");
      knobs["residency_cap"] = std::to_string(wpe);
      out.wavesPerEu = wpe;
      if (xcd > 0 && !xcdSchedule(xcd, knobs, fail))
        return false;
      return true;
    }
    // With _gui the N tile counts rows of the interleaved [2I] weight:
    // tile_n / 2 intermediate columns (mixed_moe_gemm_2stage_common: col =
    // (by_n + n_tile_base) / 2 + ...), blocks of 16 gate then 16 up rows.
    if (tn % 32 != 0)
      return fail(parts[3], "tile n must be a multiple of 32");
    // t{M}x32 (registered for tile m 32): 16 intermediate columns, half an
    // FP8 1x32 scale block; moec's W13 finds each block's amax inside one
    // tile, so a tile holds whole blocks (tile.n >= 32).
    if (tn < 64)
      return fail(parts[3], "an interleaved N of " + std::to_string(tn) +
                                " is " + std::to_string(tn / 2) +
                                " intermediate columns, half a 1x32 FP8 "
                                "scale block: moec's W13 quantises whole "
                                "blocks within a tile (tile.n >= 32)");
    knobs["n"] = std::to_string(tn / 2);
    knobs["gate_up_interleave"] = "16";
    knobs["waves"] = std::to_string(std::min<int64_t>(4, tn / 32));
    knobs["b_cache"] = bnt == 2 ? "nt" : "cached";
    if (!fp8)
      out.notes.push_back("stage 1 without _fp8: AITER writes a BF16 "
                          "intermediate and quantises it to FP8 1x32 for "
                          "stage 2; moec's W13 quantises in its epilogue");
    // _w{n}: FlyDSL pads the kernel's LDS to more than 160 KiB / (n + 1),
    // capping residency at n workgroups per CU (no _w: 1); its FHMoE
    // kernel also passes n to the register allocator (set by the caller,
    // which knows the row's kind).
    knobs["residency_cap"] = std::to_string(wpe);
    out.wavesPerEu = wpe;
    if (xcd > 0 && !xcdSchedule(xcd, knobs, fail))
      return false;
    return true;
  }
  // Stage 2 (get_flydsl_stage2_kernels): _{atomic|reduce} _bnt{n} _xcd{n}
  // _persist, then the suffixes _kw{n} _fp4/_fp8 _sbm{n}.
  if (!next() || (*next() != "atomic" && *next() != "reduce"))
    return fail(next() ? "_" + *next() : std::string("(end)"),
                "expected _atomic or _reduce");
  const std::string mode = *next();
  ++i;
  int64_t bnt = 0, xcd = 0, sbm = 0;
  bool persist = false;
  if (next() && numberedPart(*next(), "bnt", value)) {
    if (value != 2)
      return fail("_" + *next(), "stage 2 registers b_nt 2 only (0 is the "
                                 "default, written without a part)");
    bnt = value, ++i;
  }
  if (next() && numberedPart(*next(), "xcd", value))
    xcd = value, ++i;
  if (next() && *next() == "persist")
    persist = true, ++i;
  if (next() && numberedPart(*next(), "kw", value))
    return fail("_" + *next(), "no stage-2 k_wave in moec");
  if (next() && (*next() == "fp4" || *next() == "fp8"))
    return fail("_" + *next(), "a stage-2 output other than BF16");
  // Stage 2 reads the intermediate in its activation format.
  out.midFormat = out.aFormat;
  if (next() && numberedPart(*next(), "sbm", value))
    sbm = value, ++i;
  if (next())
    return fail("_" + *next(), "not part of AITER's stage-2 grammar here");
  out.sortBlockM = sbm;
  knobs["n"] = std::to_string(tn);
  knobs["waves"] = "4"; // FlyDSL stage 2: num_waves = 4
  knobs["b_cache"] = bnt == 2 ? "nt" : "cached";
  out.notes.push_back(
      "_" + mode + ": moec's W2 writes each route's row and the combine "
      "sums the weighted rows in FP32 in increasing k (deterministic)");
  if (persist && bf16A)
    out.notes.push_back("_persist: moec launches one workgroup per tile "
                        "(tile.persist_cu is not set from the name)");
  else if (persist && fp4A)
    out.notes.push_back("_persist: AITER's MXFP4 stage 2 runs a persistent "
                        "grid of cu_num workgroups, each over a contiguous "
                        "run of M tiles; moec launches one workgroup per "
                        "tile (tile.persist_cu is not set from the name)");
  else if (persist)
    out.notes.push_back("_persist: AITER ignores it for FP8 activations "
                        "(persist_m from the grid limit); moec launches one "
                        "workgroup per tile as AITER does");
  if (xcd > 0 && !xcdSchedule(xcd, knobs, fail))
    return false;
  if (sbm > 0 && sbm != tm)
    knobs["sort_block_m"] = std::to_string(sbm);
  return true;
}

namespace {

/// Why moec cannot compile a row whose names parsed for `part`, or "";
/// `refusalClass` gets the reason's class for the per-reason counts.
std::string rowSupport(const AiterCsvRow &row, const target::TargetInfo &part,
                       std::string &refusalClass) {
  const rt::AiterRowInfo &r = row.info;
  auto refuse = [&](std::string cls, std::string reason) {
    refusalClass = std::move(cls);
    return reason;
  };
  if (!row.problem.empty())
    return refuse("flag column not 0 or 1", row.problem);
  if (r.gfx.empty())
    return refuse("cu_num without gfx",
                  "cu_num " + std::to_string(r.cuNum) +
                      " and no gfx column: AITER would take the arch of the "
                      "machine that loads the table; give a gfx column");
  if (r.gfx != part.arch)
    return refuse("gfx " + r.gfx, "gfx " + r.gfx + ": the compile is for " +
                                      target::describePart(part) +
                                      " (--target)");
  // AITER keys its rows on cu_num (aiter #5342): a row tuned for another
  // CU count is not compiled for this part.
  if (r.cuNum != part.computeUnits)
    return refuse("cu_num " + std::to_string(r.cuNum),
                  "cu_num " + std::to_string(r.cuNum) +
                      ": the compile is for " + target::describePart(part) +
                      ", and a " + std::to_string(part.computeUnits) +
                      "-CU part never takes a row tuned for " +
                      std::to_string(r.cuNum) + " CUs (--target)");
  if (row.run1Stage != 0)
    return refuse("run_1stage 1 (one-stage kernel)",
                  "run_1stage 1: AITER's one-stage kernel; moec has no "
                  "one-stage kernel");
  if (r.actType != kSilu && r.actType != kSwiglu && r.actType != kSituv2)
    return refuse("act_type " + r.actType,
                  "act_type " + r.actType +
                      ": moec's W13 implements ActivationType.Silu, "
                      "ActivationType.Swiglu and ActivationType.Situv2 only");
  if (r.dtype != "torch.bfloat16")
    return refuse("dtype " + r.dtype,
                  "dtype " + r.dtype +
                      ": moec's layers take torch.bfloat16 tokens");
  if (r.qDtypeA != "torch.float8_e4m3fn" &&
      r.qDtypeA != "torch.float4_e2m1fn_x2" && r.qDtypeA != "torch.bfloat16")
    return refuse("q_dtype_a " + r.qDtypeA,
                  "q_dtype_a " + r.qDtypeA +
                      ": moec quantises to torch.float8_e4m3fn or "
                      "torch.float4_e2m1fn_x2, or takes torch.bfloat16 "
                      "tokens unquantised (A16W4)");
  if (r.qDtypeW != "torch.float4_e2m1fn_x2")
    return refuse("q_dtype_w " + r.qDtypeW,
                  "q_dtype_w " + r.qDtypeW +
                      ": moec's routed weights are torch.float4_e2m1fn_x2");
  if (r.qType != "QuantType.per_1x32")
    return refuse("q_type " + r.qType,
                  "q_type " + r.qType + ": moec quantises QuantType.per_1x32");
  if (r.useG1u1 != 1)
    return refuse("use_g1u1 " + std::to_string(r.useG1u1),
                  "use_g1u1 " + std::to_string(r.useG1u1) +
                      ": moec's W13 is gated (gate and up)");
  if (r.doweightStage1 != 0)
    return refuse("doweight_stage1 1", "doweight_stage1 1: moec applies the "
                                       "routing weights after W2");
  if (r.ksplit != 0)
    return refuse("ksplit " + std::to_string(r.ksplit),
                  "ksplit " + std::to_string(r.ksplit) +
                      ": not mapped to a moec knob");
  if (row.xbf16 != 0)
    return refuse("xbf16 1", "xbf16 1: BF16 activations into stage 1");
  if (row.flat != 0)
    return refuse("flat 1", "flat 1: AITER's flat asm kernel");
  if (r.fhmoe) {
    if (r.sharedExpertId + 1 != r.expert)
      return refuse("shared_expert_id not last",
                    "shared_expert_id " + std::to_string(r.sharedExpertId) +
                        ": moec's FHMoE shared expert is the last of the " +
                        std::to_string(r.expert) + " experts");
    if (r.hiddenPad != 0 || r.intermediatePad != 0)
      return refuse("hidden_pad/intermediate_pad",
                    "hidden_pad/intermediate_pad: moec's problems are "
                    "unpadded");
    if (r.gateMode != "GateMode.INTERLEAVE")
      return refuse("gate_mode " + r.gateMode,
                    "gate_mode " + r.gateMode +
                        ": the FlyDSL FP8 names interleave gate/up "
                        "(GateMode.INTERLEAVE)");
  }
  return "";
}

/// A double as the shortest text that reads back to it ("4", "2.5").
std::string decimalText(double value) {
  std::ostringstream os;
  os.precision(17);
  os << value;
  std::string text = os.str();
  for (int digits = 1; digits <= 17; ++digits) {
    std::ostringstream shorter;
    shorter.precision(digits);
    shorter << value;
    if (std::strtod(shorter.str().c_str(), nullptr) == value)
      return shorter.str();
  }
  return text;
}

std::string problemName(const rt::AiterRowInfo &r, const AiterStageKnobs &s1) {
  return "aiter_h" + std::to_string(r.modelDim) + "_i" +
         std::to_string(r.interDim) + "_e" + std::to_string(r.expert) + "_k" +
         std::to_string(r.topk) + (r.fhmoe ? "_fhmoe" : "") +
         (s1.aFormat == "fp4" ? "_a4" : "") +
         (s1.midFormat == "fp4" ? "_m4" : "") +
         (s1.aFormat == "bf16" ? "_a16" : "");
}

std::string knobsText(const std::map<std::string, std::string> &knobs) {
  std::string text;
  for (const auto &[k, v] : knobs)
    text += k + "=" + v + " ";
  return text;
}

/// Parses the row's two kernel names into `s1` and `s2` and checks their M
/// tiles against block_m: each refusal is added to `reason` ("; " between
/// them) and its class to `refusalClasses`.
void checkKernelNames(const rt::AiterRowInfo &info, AiterStageKnobs &s1,
                      AiterStageKnobs &s2, std::string &reason,
                      std::vector<std::string> &refusalClasses) {
  auto addReason = [&](const std::string &cls, const std::string &text) {
    refusalClasses.push_back(cls);
    reason += (reason.empty() ? "" : "; ") + text;
  };
  std::string reason1, reason2;
  if (!parseAiterKernelName(info.kernelName1, 1, s1, reason1))
    addReason("kernelName1 " + s1.refusalClass, "kernelName1 " + reason1);
  if (!parseAiterKernelName(info.kernelName2, 2, s2, reason2))
    addReason("kernelName2 " + s2.refusalClass, "kernelName2 " + reason2);
  if (reason1.empty() && s1.tileM != info.blockM)
    addReason("kernelName1 tile m is not block_m",
              "kernelName1 tile m " + std::to_string(s1.tileM) +
                  " differs from block_m " + std::to_string(info.blockM) +
                  " (AITER sorts in blocks of block_m; a tile is never "
                  "changed)");
  // The names' activation formats: stage 1 reads q_dtype_a, stage 2 what
  // stage 1 writes.
  const std::string rowFormat =
      info.qDtypeA == "torch.float4_e2m1fn_x2" ? "fp4"
      : info.qDtypeA == "torch.bfloat16"       ? "bf16"
                                               : "fp8";
  if (reason1.empty() && s1.aFormat != rowFormat)
    addReason("kernelName1 activation format is not q_dtype_a",
              "kernelName1 reads a" + s1.aFormat + " activations, q_dtype_a is " +
                  info.qDtypeA);
  // A stage-1 name that spells its activation (CK's _silu) computes that one.
  if (reason1.empty() && !s1.actType.empty() && s1.actType != info.actType)
    addReason("kernelName1 activation is not act_type",
              "kernelName1 computes " + s1.actType + ", act_type is " +
                  info.actType);
  if (reason1.empty() && reason2.empty() && s2.aFormat != s1.midFormat)
    addReason("kernelName2 reads another intermediate format",
              "kernelName2 reads a" + s2.aFormat + " activations, kernelName1 "
              "writes an " + s1.midFormat + " intermediate");
  if (reason2.empty()) {
    // A stage-2 tile m inside larger sort blocks (_sbm) compiles as W2's
    // sort_block_m; the dialect checks that the block is a multiple.
    const int64_t sortBlock = s2.sortBlockM ? s2.sortBlockM : s2.tileM;
    if (sortBlock != info.blockM)
      addReason("kernelName2 sort block is not block_m",
                "kernelName2 sorts in blocks of " + std::to_string(sortBlock) +
                    ", block_m is " + std::to_string(info.blockM));
  }
}

/// Adds the problem of AITER row `info` to `table` unless it holds one
/// named `problem` already.
void addProblem(TuningTable &table, const std::string &problem,
                const rt::AiterRowInfo &info, const AiterStageKnobs &s1,
                const SourceLine &where) {
  if (table.findProblem(problem))
    return;
  TableProblem p;
  p.name = problem;
  p.family = info.fhmoe ? "fhmoe" : "tp";
  p.hidden = info.modelDim;
  p.intermediate = info.interDim;
  p.experts = info.expert;
  p.topK = info.topk;
  p.ep = 1;
  p.aFormat = s1.aFormat;
  p.midFormat = s1.midFormat;
  p.where = where;
  table.problems.push_back(p);
}

/// The knobs of a row's W13 and W2 kernels: its kernel names' (`s1`,
/// `s2`) plus the row's activation, FHMoE shared expert and bias.
struct GemmKnobs {
  std::map<std::string, std::string> w13, w2;
};

GemmKnobs gemmKnobsOf(const rt::AiterRowInfo &info, const AiterStageKnobs &s1,
                      const AiterStageKnobs &s2,
                      const AiterCompileOptions &options) {
  GemmKnobs knobs{s1.knobs, s2.knobs};
  std::map<std::string, std::string> &w13 = knobs.w13, &w2 = knobs.w2;
  const bool swiglu = info.actType == kSwiglu;
  w13["swiglu_limit"] = std::to_string(
      swiglu ? swigluLimitOf(options) : options.swigluLimit);
  if (swiglu)
    w13["gpt_oss_swiglu"] = "true";
  // SiTUv2: the betas are AITER's runtime arguments, not in the CSV; the
  // ODS defaults are its tuner's (DEFAULT_SITUV2_BETA 4, _LINEAR_BETA 25).
  // Like Silu, no clamp unless --swiglu-limit (runtime_swiglu_limit).
  if (info.actType == kSituv2) {
    w13["situ_v2"] = "true";
    // Written only away from the ODS defaults (4, 25), as --aiter-bias
    // writes bias: the CSV itself maps neither.
    if (options.situBeta != 4.0)
      w13["situ_beta"] = decimalText(options.situBeta);
    if (options.situLinearBeta != 25.0)
      w13["situ_linear_beta"] = decimalText(options.situLinearBeta);
  }
  if (info.fhmoe) {
    w13["shared_fp8_expert"] = w2["shared_fp8_expert"] = "true";
    // FlyDSL's heterogeneous-B (FHMoE) stage 1 also hands _w{n} to the
    // register allocator (rocdl.waves_per_eu).
    w13["waves_per_eu"] = std::to_string(s1.wavesPerEu);
  }
  if (options.bias)
    w13["bias"] = w2["bias"] = "true";
  return knobs;
}

/// Builds and verifies the row's W13 and W2 ops in `scratch` (which names
/// the part): the dialect is the one judge of legality, and a tile it
/// refuses makes the row unsupported (never another tile). Returns why,
/// empty when both are legal, and adds each refusal's class.
std::string refusedTiles(mlir::ModuleOp scratch, const rt::AiterRowInfo &info,
                         const AiterStageKnobs &s1, const GemmKnobs &knobs,
                         const SourceLine &where,
                         std::vector<std::string> &refusalClasses) {
  std::string why;
  for (auto [stage, stageKnobs, nameField] :
       {std::tuple<abi::Stage, const std::map<std::string, std::string> *,
                   const char *>{abi::Stage::W13, &knobs.w13, "kernelName1"},
        {abi::Stage::W2, &knobs.w2, "kernelName2"}}) {
    const std::string stageText = abi::stageName(stage);
    StageSpec spec{stage, *stageKnobs, where};
    spec.fields["hidden"] = std::to_string(info.modelDim);
    spec.fields["intermediate"] = std::to_string(info.interDim);
    spec.fields["experts"] = std::to_string(info.expert);
    spec.fields["top_k"] = std::to_string(info.topk);
    spec.fields["ep"] = "1";
    // MXFP4 activations: the stage problem's element types, as the table
    // compiler's stageSpecOf sets them from a_format and mid_format.
    auto type = [](const std::string &format) {
      return format == "fp4"    ? "f4E2M1FN"
             : format == "bf16" ? "bf16"
                                : "f8E4M3FN";
    };
    if (stage == abi::Stage::W13 &&
        (s1.aFormat != "fp8" || s1.midFormat != "fp8")) {
      spec.fields["activation"] = type(s1.aFormat);
      spec.fields["output"] = type(s1.midFormat);
    }
    if (stage == abi::Stage::W2 && s1.midFormat != "fp8")
      spec.fields["activation"] = type(s1.midFormat);
    StageDescription description;
    std::string opError;
    mlir::OpBuilder builder(scratch.getContext());
    builder.setInsertionPointToEnd(scratch.getBody());
    mlir::Operation *op = buildStageOp(builder, spec, description, opError);
    if (op) {
      op->erase();
      continue;
    }
    // "FILE:LINE: message": keep the message.
    size_t colon = opError.find(": ", opError.find(':') + 1);
    refusalClasses.push_back(std::string(nameField) +
                             " tile refused by moec's " + stageText);
    why += (why.empty() ? "" : "; ") + std::string(nameField) + " '" +
           (stage == abi::Stage::W13 ? info.kernelName1 : info.kernelName2) +
           "': moec's " + stageText + " refuses its tile: " +
           (colon == std::string::npos ? opError : opError.substr(colon + 2));
  }
  return why;
}

/// One selection table per group of rows that differ only in the token
/// count (`groups`: key -> (problem, token -> config), in `order`), so moec
/// select --network and moec selftest reach every configuration.
void addSelections(
    const std::vector<std::string> &order,
    const std::map<std::string,
                   std::pair<std::string, std::map<int64_t, std::string>>>
        &groups,
    TuningTable &table) {
  for (size_t g = 0; g < order.size(); ++g) {
    const auto &[problem, tokens] = groups.at(order[g]);
    TableSelection selection;
    selection.network = "aiter-" + std::to_string(g);
    selection.family = table.findProblem(problem)->family;
    selection.transport = "none";
    selection.aboveMax = "error";
    selection.ep = 1;
    selection.workspace = tokens.rbegin()->first;
    for (const auto &[token, config] : tokens)
      selection.rows.push_back(
          {token, config, table.findProblem(problem)->where});
    selection.where = table.findProblem(problem)->where;
    table.selections.push_back(selection);
  }
}

} // namespace

bool buildAiterTable(const std::vector<AiterCsvRow> &rows,
                     const target::TargetInfo &part,
                     const AiterCompileOptions &options, TuningTable &table,
                     std::vector<rt::AiterRowInfo> &manifestRows,
                     std::vector<std::string> &unsupported, std::string &error,
                     std::map<std::string, size_t> *refusalsByReason) {
  table = TuningTable();
  manifestRows.clear();
  unsupported.clear();
  std::map<std::string, std::string> kernelByKey; // problem|stage|knobs -> name
  std::map<std::string, std::string> configByKernels;
  // Selection groups (the key without token) -> (token -> config).
  std::map<std::string, std::pair<std::string, std::map<int64_t, std::string>>>
      groups;
  std::vector<std::string> groupOrder;
  std::map<std::string, std::string> tokenSideProblem;
  mlir::DialectRegistry registry;
  registerMoecDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  mlir::ScopedDiagnosticHandler quiet(&context,
                                      [](mlir::Diagnostic &) { return mlir::success(); });
  mlir::OwningOpRef<mlir::ModuleOp> scratch =
      mlir::ModuleOp::create(mlir::UnknownLoc::get(&context));
  // Each row's stages are verified against the part, as the compile will.
  (*scratch)->setAttr(moe::kTargetAttrName,
                      mlir::StringAttr::get(&context, part.name));
  auto addKernel = [&](const std::string &problem, abi::Stage stage,
                       std::map<std::string, std::string> knobs,
                       const SourceLine &at) {
    const std::string stageText = abi::stageName(stage);
    std::string key = problem + "|" + stageText + "|" + knobsText(knobs);
    auto it = kernelByKey.find(key);
    if (it != kernelByKey.end())
      return it->second;
    TableKernel kernel;
    kernel.name =
        problem + "_" + stageText + "_" + std::to_string(kernelByKey.size());
    kernel.stage = stage;
    kernel.problem = problem;
    kernel.knobs = std::move(knobs);
    kernel.where = at;
    table.kernels.push_back(kernel);
    kernelByKey[key] = kernel.name;
    return kernel.name;
  };
  for (const AiterCsvRow &row : rows) {
    rt::AiterRowInfo info = row.info;
    const std::string at = row.file + ":" + std::to_string(row.line) + ": ";
    // A row counts under each of its reasons' classes.
    std::vector<std::string> refusalClasses;
    auto refuse = [&](const std::string &reason) {
      info.skipped = reason;
      unsupported.push_back(at + reason);
      manifestRows.push_back(std::move(info));
      if (refusalsByReason)
        for (const std::string &cls : refusalClasses)
          ++(*refusalsByReason)[cls];
    };
    std::string rowClass;
    std::string reason = rowSupport(row, part, rowClass);
    if (!reason.empty())
      refusalClasses.push_back(rowClass);
    AiterStageKnobs s1, s2;
    checkKernelNames(info, s1, s2, reason, refusalClasses);
    if (!reason.empty()) {
      refuse(reason);
      continue;
    }
    const SourceLine where{row.file, row.line};
    const std::string problem = problemName(info, s1);
    addProblem(table, problem, info, s1, where);
    const GemmKnobs knobs = gemmKnobsOf(info, s1, s2, options);
    if (std::string why = refusedTiles(*scratch, info, s1, knobs, where,
                                       refusalClasses);
        !why.empty()) {
      refuse(why);
      continue;
    }
    // quant, sort and combine do not read I, and their symbols leave it out:
    // one kernel per (H, E, top-k), owned by the first problem with them.
    const std::string tokenSide =
        "h" + std::to_string(info.modelDim) + "_e" + std::to_string(info.expert) +
        "_k" + std::to_string(info.topk) + (info.fhmoe ? "_fhmoe" : "") +
        (s1.aFormat == "fp4" ? "_a4" : "") +
        (s1.aFormat == "bf16" ? "_a16" : "");
    const std::string sideProblem =
        tokenSideProblem.emplace(tokenSide, problem).first->second;
    // The sort reads neither H nor I: one per (E, top-k).
    const std::string sortProblem =
        tokenSideProblem
            .emplace("sort_e" + std::to_string(info.expert) + "_k" +
                         std::to_string(info.topk) + (info.fhmoe ? "_fhmoe" : ""),
                     problem)
            .first->second;
    std::vector<std::string> kernels;
    // A16W4 reads the BF16 tokens unquantised: no quant stage.
    if (s1.aFormat != "bf16")
      kernels.push_back(
          addKernel(sideProblem, abi::Stage::Quant, {{"waves", "4"}}, where));
    kernels.push_back(addKernel(
        sortProblem, abi::Stage::Sort,
        {{"m_tile", std::to_string(info.blockM)}, {"waves", "4"}}, where));
    kernels.push_back(addKernel(problem, abi::Stage::W13, knobs.w13, where));
    kernels.push_back(addKernel(problem, abi::Stage::W2, knobs.w2, where));
    kernels.push_back(
        addKernel(sideProblem, abi::Stage::Combine, {{"waves", "4"}}, where));
    std::string joined;
    for (const std::string &k : kernels)
      joined += k + ",";
    auto cfg = configByKernels.find(joined);
    if (cfg == configByKernels.end()) {
      TableConfig config;
      config.name = "aiter_c" + std::to_string(configByKernels.size());
      config.kernels = kernels;
      config.provenance = "measured";
      config.where = where;
      table.configs.push_back(config);
      cfg = configByKernels.emplace(joined, config.name).first;
    }
    if (info.actType == kSwiglu)
      info.notes.push_back(
          "act_type ActivationType.Swiglu: GPT-OSS's g * sigmoid(1.702 g) * "
          "(u + 1) with the clamp at " + std::to_string(swigluLimitOf(options)) +
          " (AITER's default 7 unless --swiglu-limit); " +
          (options.bias ? std::string("with gate/up bias (--aiter-bias)")
                        : std::string("no gate/up bias")));
    if (info.actType == kSituv2)
      info.notes.push_back(
          "act_type ActivationType.Situv2: " + decimalText(options.situBeta) +
          " tanh(g / " + decimalText(options.situBeta) + ") sigmoid(g) * " +
          decimalText(options.situLinearBeta) + " tanh(u / " +
          decimalText(options.situLinearBeta) + ") (" +
          (options.situBeta == 4.0 && options.situLinearBeta == 25.0
               ? std::string("the betas of AITER's tuner; AITER passes 1 and "
                             "1 to FlyDSL when the caller gives none")
               : std::string("--situ-beta, --situ-linear-beta")) +
          "), " +
          (options.swigluLimit > 0
               ? "clamp at " + std::to_string(options.swigluLimit)
               : std::string("no clamp")));
    if (options.bias)
      info.notes.push_back(
          "--aiter-bias: AITER's bias1 (FP32 [E, 2I], gate then up) and "
          "bias2 (FP32 [E, H]) are the W13 and W2 kernels' argument bias");
    info.substitutedFrom1 = s1.substitutedFrom;
    info.substitutedFrom2 = s2.substitutedFrom;
    for (const std::string &note : s1.notes)
      info.notes.push_back("kernelName1: " + note);
    for (const std::string &note : s2.notes)
      info.notes.push_back("kernelName2: " + note);
    info.config = static_cast<uint32_t>(
        std::find_if(table.configs.begin(), table.configs.end(),
                     [&](const TableConfig &c) { return c.name == cfg->second; }) -
        table.configs.begin());
    // A moec selection table per key (token aside), so moec select
    // --network and moec selftest reach every configuration.
    rt::AiterRowInfo groupKey = info;
    groupKey.token = 0;
    const std::string group = keyText(groupKey);
    if (!groups.count(group)) {
      groups[group].first = problem;
      groupOrder.push_back(group);
    }
    groups[group].second[info.token] = cfg->second;
    manifestRows.push_back(std::move(info));
  }
  if (!unsupported.empty() && !options.skipUnsupported) {
    error = std::to_string(unsupported.size()) +
            " AITER row(s) moec cannot compile (--skip-unsupported skips "
            "them):\n  " ;
    for (size_t i = 0; i < unsupported.size(); ++i)
      error += (i ? "\n  " : "") + unsupported[i];
    return false;
  }
  addSelections(groupOrder, groups, table);
  if (table.configs.empty()) {
    error = "no AITER row moec can compile";
    return false;
  }
  return true;
}

namespace {

/// A decimal as the tuner writes it ("113.1"); false for anything else.
bool parseDecimal(const std::string &text, double &out) {
  if (text.empty())
    return false;
  char *end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

std::string rowAt(const AiterCsvRow &row) {
  return row.file + ":" + std::to_string(row.line);
}

std::string shapeText(const rt::AiterRowInfo &r) {
  return "token " + std::to_string(r.token) + ", model_dim " +
         std::to_string(r.modelDim) + ", inter_dim " +
         std::to_string(r.interDim) + ", expert " + std::to_string(r.expert) +
         ", topk " + std::to_string(r.topk);
}

} // namespace

AiterAudit auditAiterRows(const std::vector<AiterCsvRow> &rows,
                          const AiterAuditOptions &options) {
  AiterAudit audit;
  // us against token, per key without the token.
  std::map<std::string, std::map<uint32_t, const AiterCsvRow *>> byKey;
  std::map<std::string, const AiterCsvRow *> byTimings;
  for (const AiterCsvRow &row : rows) {
    const std::string at = rowAt(row) + ": ";
    for (auto [column, text] :
         {std::pair<const char *, const std::string *>{"err1", &row.err1},
          {"err2", &row.err2}}) {
      double percent = 0;
      if (text->size() < 2 || text->back() != '%' ||
          !parseDecimal(text->substr(0, text->size() - 1), percent) ||
          percent <= options.maxErrorPercent)
        continue;
      std::ostringstream limit;
      limit << options.maxErrorPercent;
      audit.warnings.push_back(
          at + "column '" + column + "': " + *text + " error above " +
          limit.str() + " % (AITER's tuner rejects a kernel above its --errRatio, 0.05 by "
          "default)");
      ++audit.highError;
    }
    double us = 0;
    if (!parseDecimal(row.us, us))
      continue;
    rt::AiterRowInfo key = row.info;
    key.token = 0;
    byKey[keyText(key)][row.info.token] = &row;
    // Equal us1, us2 and us (as written) on two keys: one was copied.
    std::string columns = "'us'", timings = row.us;
    if (!row.us1.empty() && !row.us2.empty()) {
      columns = "'us1', 'us2', 'us'";
      timings = row.us1 + ", " + row.us2 + ", " + row.us;
    }
    auto [first, inserted] = byTimings.emplace(timings, &row);
    if (!inserted) {
      audit.warnings.push_back(
          at + "columns " + columns + ": " + timings + " as at " +
          rowAt(*first->second) + " (" + shapeText(first->second->info) +
          "), a row of another shape (" + shapeText(row.info) +
          "): timings copied, not measured");
      ++audit.copiedTimings;
    }
  }
  for (const auto &[key, tokens] : byKey) {
    const AiterCsvRow *previous = nullptr;
    double previousUs = 0;
    for (const auto &[token, row] : tokens) {
      double us = 0;
      parseDecimal(row->us, us);
      if (previous && us < previousUs) {
        audit.warnings.push_back(
            rowAt(*row) + ": columns 'token', 'us': us " + row->us +
            " at token " + std::to_string(token) + " is below us " +
            previous->us + " at token " +
            std::to_string(previous->info.token) + " (" + rowAt(*previous) +
            ") of the same key: more tokens should not run faster");
        ++audit.fallingUs;
      }
      previous = row;
      previousUs = us;
    }
  }
  return audit;
}

CompileStatus compileAiterCsvsToBundle(const std::vector<std::string> &paths,
                                       const std::string &bundlePath,
                                       const CompileOptions &options,
                                       const AiterCompileOptions &aiterOptions,
                                       CompileSummary &summary,
                                       AiterCompileSummary &aiterSummary,
                                       std::string &error) {
  std::vector<AiterCsvRow> rows;
  if (!readAiterCsvs(paths, rows, aiterSummary.merge, error))
    return CompileStatus::BadInput;
  aiterSummary.audit = auditAiterRows(rows);
  if (!options.target) {
    error = "compileAiterCsvsToBundle: no target part (CompileOptions::target)";
    return CompileStatus::BadInput;
  }
  TuningTable table;
  std::vector<rt::AiterRowInfo> manifestRows;
  if (!buildAiterTable(rows, options.target->chip, aiterOptions, table,
                       manifestRows, aiterSummary.unsupported, error,
                       &aiterSummary.refusalsByReason))
    return CompileStatus::BadInput;
  aiterSummary.rows = manifestRows.size();
  for (const rt::AiterRowInfo &row : manifestRows) {
    (row.compiled() ? aiterSummary.compiledRows : aiterSummary.skippedRows)++;
    if (!row.substitutedFrom1.empty() || !row.substitutedFrom2.empty())
      ++aiterSummary.substitutedRows;
  }
  table.path = paths.front();
  for (const std::string &path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    table.text += text.str();
  }
  if (options.rewriteTable)
    options.rewriteTable(table);
  if (!checkBundleWritable(bundlePath, error))
    return CompileStatus::BadInput;
  CompiledTable compiled;
  CompileStatus status = compileTable(table, options, compiled, error);
  if (status != CompileStatus::Ok)
    return status;
  BundleContents bundle = buildBundleContents(table, compiled);
  // One source per CSV given, in order: the rows' `source` indexes them.
  bundle.manifest.sources.clear();
  for (const std::string &path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string content = text.str();
    const size_t slash = path.find_last_of('/');
    bundle.manifest.sources.push_back(
        {slash == std::string::npos ? path : path.substr(slash + 1),
         hashHex(content.data(), content.size())});
  }
  bundle.manifest.aiterRows = std::move(manifestRows);
  if (!rt::writeBundle(bundlePath, rt::serializeManifest(bundle.manifest),
                       bundle.objects, error))
    return CompileStatus::CheckFailed;
  summary.tableKernels = table.kernels.size();
  summary.uniqueKernels = compiled.kernels.size();
  std::ifstream written(bundlePath, std::ios::binary | std::ios::ate);
  summary.bundleBytes = written ? static_cast<uint64_t>(written.tellg()) : 0;
  return CompileStatus::Ok;
}

} // namespace moec
