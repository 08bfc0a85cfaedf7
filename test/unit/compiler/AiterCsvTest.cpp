// AITER's kernel-name grammar and CSV merge rules (docs/aiter-tables.md).
// Expected knobs are AITER's definitions applied by hand to each name.
#include "moec/Compiler/AiterCsv.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <map>

using namespace moec;

namespace {

/// A tuned CSV's columns, a supported Silu key after act_type, and a pair of
/// FlyDSL kernel names moec compiles.
constexpr const char *kHeader =
    "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,"
    "q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,"
    "kernelName1,kernelName2";
constexpr const char *kSiluKey =
    "ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,"
    "torch.float4_e2m1fn_x2,QuantType.per_1x32,1,0";
constexpr const char *kNames =
    "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8,"
    "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic";

/// What buildAiterTable makes of a CSV with --skip-unsupported on gfx950.
struct SkippingBuild {
  TuningTable table;
  std::vector<rt::AiterRowInfo> manifestRows;
  std::vector<std::string> unsupported;
};

/// Parses CSV (FILE names it in messages) and builds it skipping the rows
/// moec cannot compile; REQUIREs both, with the error and every refusal
/// printed when the build fails.
SkippingBuild buildSkipping(const char *file, const std::string &csv) {
  std::vector<AiterCsvRow> rows;
  std::string error;
  REQUIRE(parseAiterCsv(file, csv, rows, error));
  AiterCompileOptions options;
  options.skipUnsupported = true;
  SkippingBuild out;
  const bool built = buildAiterTable(rows, target::kGfx950, options, out.table,
                                     out.manifestRows, out.unsupported, error);
  INFO(error);
  for (const std::string &u : out.unsupported)
    UNSCOPED_INFO(u);
  REQUIRE(built);
  return out;
}

/// Parses NAME as a stage-STAGE kernel name (REQUIREd to be served) and
/// checks the knobs named in EXPECTED; other knobs are not looked at.
AiterStageKnobs knobsOf(const std::string &name, int stage,
                        const std::map<std::string, std::string> &expected) {
  AiterStageKnobs k;
  std::string reason;
  const bool parsed = parseAiterKernelName(name, stage, k, reason);
  INFO(name << ": " << reason);
  REQUIRE(parsed);
  for (const auto &[knob, value] : expected) {
    INFO(name << " knob " << knob);
    CHECK((k.knobs.count(knob) ? k.knobs.at(knob) : "(absent)") == value);
  }
  return k;
}

} // namespace

TEST_CASE("AITER stage-1 names: the interleaved N tile is 2x the columns",
          "[aiter]") {
  AiterStageKnobs k;
  std::string reason;
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t64x256x256_w3_bnt0_gui_xcd4_fp8", 1,
      k, reason));
  CHECK(k.tileM == 64);
  CHECK(k.knobs.at("m") == "64");
  CHECK(k.knobs.at("n") == "128");
  CHECK(k.knobs.at("k") == "256");
  CHECK(k.knobs.at("waves") == "4");
  CHECK(k.knobs.at("gate_up_interleave") == "16");
  CHECK(k.knobs.at("b_cache") == "cached");
  CHECK(k.knobs.at("xcd_swizzle") == "true");
  // _xcd4: the XCD renumbering, then groups of 4 M tiles.
  CHECK(k.knobs.at("group_m") == "4");
  // _w3: at most 3 workgroups per CU (FlyDSL's LDS padding).
  CHECK(k.knobs.at("residency_cap") == "3");
  CHECK(k.wavesPerEu == 3);
  // No _bnt part: AITER's stage-1 default b_nt 2, non-temporal.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w4_gui",
                               1, k, reason));
  CHECK(k.knobs.at("b_cache") == "nt");
  CHECK(k.knobs.at("n") == "64");
  CHECK(k.knobs.at("residency_cap") == "4");
  CHECK(k.notes.size() == 1); // the BF16 intermediate
  // No _w part: AITER's waves_per_eu 1, one workgroup per CU.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp8_wfp4_bf16_t32x128x256_gui_fp8",
                               1, k, reason));
  CHECK(k.knobs.at("residency_cap") == "1");
  CHECK(k.notes.empty());
  // _gui with N 64: 32 intermediate columns over 2 waves.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_fp8",
                               1, k, reason));
  CHECK(k.knobs.at("n") == "32");
  CHECK(k.knobs.at("waves") == "2");
  CHECK(k.knobs.count("k_waves") == 0);
  // _kw{n}: tile.k_waves; N-waves as without it.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_kw4_fp8", 1, k, reason));
  CHECK(k.knobs.at("k_waves") == "4");
  CHECK(k.knobs.at("n") == "32");
  CHECK(k.knobs.at("waves") == "2");
  CHECK(k.knobs.at("gate_up_interleave") == "16");
  CHECK(k.refusalClass.empty());
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_xcd4_kw2_fp8", 1, k,
      reason));
  CHECK(k.knobs.at("k_waves") == "2");
}

TEST_CASE("AITER stage-1 names: parts moec cannot honour are named",
          "[aiter]") {
  AiterStageKnobs k;
  std::string reason;
  // _kw{n} outside get_flydsl_stage1_kernels' rules, by rule.
  const std::pair<const char *, const char *> kwRefused[] = {
      {"flydsl_moe1_afp8_wfp4_bf16_t64x128x256_gui_kw2_fp8",
       "part '_kw2': k_wave is registered for tile m 32 only"},
      {"flydsl_moe1_afp4_wfp4_bf16_t32x128x512_kw4_fp4",
       "part '_kw4': k_wave 4 x 4 N-waves exceeds 8 waves"},
      {"flydsl_moe1_afp4_wfp4_bf16_t32x128x256_kw2_fp4",
       "part '_kw2': k_wave needs 4 N <= K"},
      {"flydsl_moe1_afp8_wfp4_bf16_t32x32x256_gui_kw2_fp8",
       "part '_kw2': k_wave with FP8 activations needs at least 2 N-waves"},
      {"flydsl_moe1_afp4_wfp4_bf16_t32x32x256_kw3_fp4",
       "part '_kw3': k_wave must be 1, 2 or 4"},
  };
  for (const auto &[name, why] : kwRefused) {
    INFO(name << ": " << reason);
    CHECK_FALSE(parseAiterKernelName(name, 1, k, reason));
    CHECK(reason.find(why) != std::string::npos);
    CHECK(k.refusalClass.find("part '_kw") == 0);
  }
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w4_gui_xcd3_fp8", 1, k,
      reason));
  CHECK(reason.find("part '_xcd3'") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName("opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw9_m3_fp8",
                                   1, k, reason));
  CHECK(reason.find("opus 'pair' with 9 K-wave groups (18 waves)") !=
        std::string::npos);
  // t32x32 with _gui (registered for tile m 32): 16 columns, half a block.
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x32x256_gui_fp8", 1, k, reason));
  CHECK(k.refusalClass == "part 't32x32x256'");
  CHECK(reason.find("an interleaved N of 32 is 16 intermediate columns, half "
                    "a 1x32 FP8 scale block") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName("cktile_a8w4_bm64", 1, k, reason));
  CHECK(reason.find("does not run a CK-tile stage-1 name") !=
        std::string::npos);
  // Out of the registry's order: _gui before _bnt0 is not an AITER name.
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_gui_bnt0_fp8", 1, k,
      reason));
  CHECK(reason.find("part '_bnt0'") != std::string::npos);
}

TEST_CASE("AITER stage-2 names", "[aiter]") {
  AiterStageKnobs k;
  std::string reason;
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_afp8_wfp4_bf16_t32x256x128_reduce_bnt2_persist", 2,
      k, reason));
  CHECK(k.knobs.at("m") == "32");
  CHECK(k.knobs.at("n") == "256");
  CHECK(k.knobs.at("k") == "128");
  CHECK(k.knobs.at("waves") == "4");
  CHECK(k.knobs.at("b_cache") == "nt");
  CHECK(k.sortBlockM == 0);
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_afp8_wfp4_bf16_t64x128x256_atomic_persist_sbm128", 2,
      k, reason));
  CHECK(k.tileM == 64);
  CHECK(k.sortBlockM == 128);
  CHECK(k.knobs.at("sort_block_m") == "128");
  CHECK(k.knobs.at("b_cache") == "cached");
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_afp8_wfp4_bf16_t32x256x256_atomic_bnt2_xcd4", 2, k,
      reason));
  CHECK(k.knobs.at("xcd_swizzle") == "true");
  CHECK(k.knobs.at("group_m") == "4");
  CHECK(k.knobs.count("residency_cap") == 0); // stage 2 has no _w
  // The layout (v2) stage 2 with moec's dtypes: moec's W2 of its tile.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_layout_afp8_wfp4_bf16_t32x256x256_atomic_nt_sbm32", 2,
      k, reason));
  CHECK(k.substitutedFrom ==
        "flydsl_moe2_layout_afp8_wfp4_bf16_t32x256x256_atomic_nt_sbm32");
  CHECK(k.tileM == 32);
  CHECK(k.sortBlockM == 32);
  CHECK(k.knobs.at("n") == "256");
  CHECK(k.knobs.at("k") == "256");
  CHECK(k.knobs.at("b_cache") == "nt");
  CHECK(k.knobs.count("sort_block_m") == 0);
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_layout_afp8_wfp4_bf16_t64x256x128_reduce_sbm128_sp801", 2,
      k, reason));
  CHECK(k.knobs.at("sort_block_m") == "128");
  CHECK(k.knobs.at("b_cache") == "cached");
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe2_layout_afp8_wfp4_bf16_t32x256x256_atomic_sbm32_nt", 2, k,
      reason)); // _nt after _sbm is not AITER's order
  CHECK(k.refusalClass == "family flydsl_moe2_layout: malformed");
  // A4W4 (afp4): the stage reads MXFP4.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_layout_afp4_wfp4_bf16_t64x256x128_reduce_sbm64_sp801", 2,
      k, reason));
  CHECK(k.aFormat == "fp4");
  CHECK(k.substitutedFrom ==
        "flydsl_moe2_layout_afp4_wfp4_bf16_t64x256x128_reduce_sbm64_sp801");
  // The production variant is registered on t64x128x256_atomic only.
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe2_afp4_wfp4_bf16_t64x256x256_atomic_persist_async_w4_cumul3",
      2, k, reason));
  CHECK(reason.find("part '_persist_async_w4_cumul3'") != std::string::npos);
}

TEST_CASE("AITER CSV merge: tags, duplicates, gfx from cu_num", "[aiter]") {
  const std::string dir = "aiter_csv_test_tmp";
  std::remove((dir + "_a.csv").c_str());
  const std::string key = kSiluKey;
  const std::string names = kNames;
  {
    std::ofstream a(dir + "_a.csv");
    a << kHeader << ",_tag\n"
      << "gfx950,256,8,7168,512,384,6," << key << ",32,0," << names
      << ",flydsl_fallback\n"
      << "gfx950,256,8,7168,512,384,6," << key << ",32,0," << names << ",\n";
    std::ofstream b(dir + "_b.csv");
    b << "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,"
         "q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,"
         "kernelName1,kernelName2\n"
      << "256,8,7168,512,384,6," << key << ",32,0," << names << "\n"
      << "304,8,7168,512,384,6," << key << ",32,0," << names << "\n";
  }
  std::vector<AiterCsvRow> rows;
  AiterMergeReport report;
  std::string error;
  INFO(error);
  REQUIRE(readAiterCsvs({dir + "_a.csv", dir + "_b.csv"}, rows, report, error));
  // a:2 dropped by its tag, a:3 kept, b:2 (gfx950 from cu_num 256) a
  // duplicate of a:3, b:3 gfx942 from cu_num 304.
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].file == dir + "_a.csv");
  CHECK(rows[0].line == 3);
  CHECK(rows[1].info.gfx == "gfx942");
  CHECK(rows[1].line == 3);
  CHECK(rows[1].info.source == 1);
  CHECK(report.fallbackTags == 1);
  CHECK(report.duplicates == 1);
  REQUIRE(report.dropped.size() == 2);
  CHECK(report.dropped[1].find("duplicate key of " + dir + "_a.csv:3") !=
        std::string::npos);
  CHECK(isAiterCsvFile(dir + "_b.csv"));
  std::remove((dir + "_a.csv").c_str());
  std::remove((dir + "_b.csv").c_str());
}

// AITER keys its tuned rows on cu_num (aiter #5342): a compile for MI350P
// (gfx950, 128 CUs) takes the cu_num 128 row and refuses the 256 one, and a
// compile for MI355X the reverse, each naming cu_num and both counts.
TEST_CASE("AITER rows compile for the part with their cu_num only",
          "[aiter][part]") {
  const std::string key = kSiluKey;
  const std::string csv =
      std::string(kHeader) + "\n" + "gfx950,256,8,7168,512,384,6," + key +
      ",32,0," + kNames + "\n" + "gfx950,128,8,7168,512,384,6," + key +
      ",32,0," + kNames + "\n";
  std::vector<AiterCsvRow> rows;
  std::string error;
  REQUIRE(parseAiterCsv("parts.csv", csv, rows, error));
  REQUIRE(rows.size() == 2);

  AiterCompileOptions options;
  options.skipUnsupported = true;
  auto build = [&](const target::TargetInfo &part,
                   std::vector<rt::AiterRowInfo> &manifestRows,
                   std::vector<std::string> &unsupported) {
    TuningTable table;
    INFO(error);
    REQUIRE(buildAiterTable(rows, part, options, table, manifestRows,
                            unsupported, error));
    REQUIRE(manifestRows.size() == 2);
    REQUIRE(unsupported.size() == 1);
  };

  std::vector<rt::AiterRowInfo> mi350p, mi355x;
  std::vector<std::string> refused350p, refused355x;
  build(target::kMi350p, mi350p, refused350p);
  build(target::kGfx950, mi355x, refused355x);
  // The key keeps each row's cu_num; only the part's own compiles.
  CHECK(mi350p[0].cuNum == 256);
  CHECK_FALSE(mi350p[0].compiled());
  CHECK(mi350p[1].cuNum == 128);
  CHECK(mi350p[1].compiled());
  CHECK(mi355x[0].compiled());
  CHECK_FALSE(mi355x[1].compiled());
  CHECK_THAT(refused350p[0],
             Catch::Contains("parts.csv:2: ") &&
                 Catch::Contains("cu_num 256") &&
                 Catch::Contains("mi350p (MI350P, 128 CUs)") &&
                 Catch::Contains("a 128-CU part never takes a row tuned for "
                                 "256 CUs"));
  CHECK_THAT(mi350p[0].skipped, Catch::Contains("cu_num 256"));
  CHECK_THAT(refused355x[0],
             Catch::Contains("parts.csv:3: ") &&
                 Catch::Contains("cu_num 128") &&
                 Catch::Contains("a 256-CU part never takes a row tuned for "
                                 "128 CUs"));
}

// A one-stage row (run_1stage 1, empty kernelName2) and rows of other kernel
// families are rows like any other: read, then refused by name, each counted
// under its reasons.
TEST_CASE("AITER one-stage and other-family rows are refused by name",
          "[aiter]") {
  const std::string key = std::string("gfx950,256,TOKEN,7168,512,384,6,") +
                          kSiluKey + ",32,0,";
  auto row = [&](int token, const std::string &names, int oneStage) {
    std::string text = key;
    text.replace(text.find("TOKEN"), 5, std::to_string(token));
    return text + names + "," + std::to_string(oneStage) + "\n";
  };
  const std::string stage1 = "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8";
  const std::string stage2 = "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic";
  const std::string csv =
      std::string(kHeader) + ",run_1stage\n" + row(1, kNames, 0) +
      row(2, "fmoe_one_stage,", 1) +
      row(4, stage1 + ",moe_ck2stages_gemm2_64x32x32x128_1x1_v1", 0) +
      row(8, "cktile_moe1_t32," + stage2, 0) +
      row(16, stage1 + ",opus_moe2_t64x256x256", 0) +
      row(32, "asm_moe1_g1u1," + stage2, 0);
  std::vector<AiterCsvRow> rows;
  std::string error;
  INFO(error);
  REQUIRE(parseAiterCsv("families.csv", csv, rows, error));
  REQUIRE(rows.size() == 6);
  CHECK(rows[1].info.kernelName2.empty());
  CHECK(rows[1].run1Stage == 1);

  AiterStageKnobs knobs;
  std::string reason;
  CHECK_FALSE(parseAiterKernelName("", 2, knobs, reason));
  CHECK(knobs.refusalClass == "empty (a one-stage row)");
  CHECK_THAT(reason, Catch::Contains("moec has no one-stage kernel"));
  for (auto [name, cls] :
       {std::pair<const char *, const char *>{
            "moe_ck2stages_gemm2_64x32x32x128_1x1_v1",
            "family ck2stages: malformed"},
        {"cktile_moe2_t32", "family cktile: not a8w4"},
        {"opus_moe2_t64", "family opus: not A8W4"},
        {"asm_moe2", "family asm"},
        {"triton_moe2", "family other"},
        {"flydsl_mxmoe_g2_a4w4_16x256x256_atomic_sk2",
         "family flydsl_mxmoe: _sk"},
        {"flydsl_moe2_aint8_wfp4_bf16_t32x128x256_atomic", "part '_aint8'"}}) {
    INFO(name);
    CHECK_FALSE(parseAiterKernelName(name, 2, knobs, reason));
    CHECK(knobs.refusalClass == cls);
    CHECK_THAT(reason, Catch::StartsWith(std::string("'") + name + "': "));
  }

  AiterCompileOptions options;
  options.skipUnsupported = true;
  TuningTable table;
  std::vector<rt::AiterRowInfo> manifestRows;
  std::vector<std::string> unsupported;
  std::map<std::string, size_t> byReason;
  REQUIRE(buildAiterTable(rows, target::kGfx950, options, table, manifestRows,
                          unsupported, error, &byReason));
  REQUIRE(manifestRows.size() == 6);
  CHECK(manifestRows[0].compiled());
  REQUIRE(unsupported.size() == 5);
  CHECK_THAT(unsupported[0],
             Catch::StartsWith("families.csv:3: run_1stage 1") &&
                 Catch::Contains("kernelName2 '': no stage-2 kernel"));
  CHECK_THAT(unsupported[1],
             Catch::Contains("not a CK two-stage name as AITER spells it"));
  CHECK_THAT(unsupported[4], Catch::StartsWith("families.csv:7: kernelName1 "
                                               "'asm_moe1_g1u1': backend asm"));
  const std::map<std::string, size_t> expected = {
      {"run_1stage 1 (one-stage kernel)", 1},
      {"kernelName1 family other", 1}, // fmoe_one_stage
      {"kernelName2 empty (a one-stage row)", 1},
      {"kernelName2 family ck2stages: malformed", 1},
      {"kernelName1 family cktile: stage 1", 1},
      {"kernelName2 family opus: not A8W4", 1},
      {"kernelName1 family asm", 1}};
  CHECK(byReason == expected);
}

namespace {

/// Rows of one key with the tuner's figures: {token, expert, us1, us2, us,
/// err1, err2}.
std::vector<AiterCsvRow>
auditRows(const std::vector<std::vector<std::string>> &figures) {
  std::string csv = "gfx,cu_num,token,model_dim,inter_dim,expert,topk,act_type,"
                    "dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,"
                    "doweight_stage1,block_m,ksplit,kernelName1,kernelName2,"
                    "us1,us2,us,err1,err2\n";
  for (const auto &f : figures)
    csv += "gfx950,256," + f[0] + ",7168,512," + f[1] + ",6," + kSiluKey +
           ",32,0," + kNames + "," + f[2] + "," + f[3] + "," + f[4] + "," +
           f[5] + "," + f[6] + "\n";
  std::vector<AiterCsvRow> rows;
  std::string error;
  INFO(error);
  REQUIRE(parseAiterCsv("audit.csv", csv, rows, error));
  return rows;
}

} // namespace

TEST_CASE("AITER audit: us falling as the token rises", "[aiter][audit]") {
  // E 384: 113.1 us at token 16, 82.1 at 32 (line 3); E 256 has its own
  // curve and is not compared with E 384.
  AiterAudit audit =
      auditAiterRows(auditRows({{"8", "384", "1", "1", "90.0", "0%", "0%"},
                                {"16", "384", "2", "2", "113.1", "0%", "0%"},
                                {"32", "384", "3", "3", "82.1", "0%", "0%"},
                                {"64", "256", "4", "4", "50.0", "0%", "0%"},
                                {"64", "384", "5", "5", "120.0", "0%", "0%"}}));
  CHECK(audit.fallingUs == 1);
  CHECK(audit.highError == 0);
  CHECK(audit.copiedTimings == 0);
  REQUIRE(audit.warnings.size() == 1);
  CHECK(audit.warnings[0] ==
        "audit.csv:4: columns 'token', 'us': us 82.1 at token 32 is below us "
        "113.1 at token 16 (audit.csv:3) of the same key: more tokens should "
        "not run faster");
}

TEST_CASE("AITER audit: err1/err2 above 5 %", "[aiter][audit]") {
  AiterAudit audit = auditAiterRows(
      auditRows({{"8", "384", "1", "1", "10", "5.0%", "18.7%"},
                 {"16", "384", "2", "2", "20", "5.1%", "0.0%"},
                 {"32", "384", "3", "3", "30", "", ""}}));
  CHECK(audit.highError == 2);
  CHECK(audit.fallingUs == 0);
  REQUIRE(audit.warnings.size() == 2);
  CHECK_THAT(audit.warnings[0],
             Catch::StartsWith("audit.csv:2: column 'err2': 18.7% error "
                               "above 5 %"));
  CHECK_THAT(audit.warnings[1],
             Catch::StartsWith("audit.csv:3: column 'err1': 5.1% error"));
  AiterAuditOptions strict;
  strict.maxErrorPercent = 1;
  CHECK(auditAiterRows(auditRows({{"8", "384", "1", "1", "10", "1.5%", "0%"}}),
                       strict)
            .highError == 1);
}

TEST_CASE("AITER audit: timings copied across shapes", "[aiter][audit]") {
  AiterAudit audit = auditAiterRows(
      auditRows({{"8", "384", "11.3537", "7.5406", "18.8943", "0%", "0%"},
                 {"8", "256", "11.3537", "7.5406", "18.8943", "0%", "0%"},
                 // Same us, other us1/us2: measured, not copied.
                 {"16", "256", "12.0", "6.8943", "18.8943", "0%", "0%"}}));
  CHECK(audit.copiedTimings == 1);
  CHECK(audit.fallingUs == 0);
  REQUIRE(audit.warnings.size() == 1);
  CHECK_THAT(audit.warnings[0],
             Catch::StartsWith("audit.csv:3: columns 'us1', 'us2', 'us': "
                               "11.3537, 7.5406, 18.8943 as at audit.csv:2 "
                               "(token 8, model_dim 7168, inter_dim 512, "
                               "expert 384, topk 6)"));
  // A table without the columns (tuned_fhmoe.csv) is not audited.
  CHECK(auditAiterRows(auditRows({{"8", "384", "", "", "", "", ""},
                                  {"16", "384", "", "", "", "", ""}}))
            .warnings.empty());
}

TEST_CASE("AITER names of other families: moec's own kernel of the same tile "
          "and dtypes, or a refusal by name",
          "[aiter][substitution]") {
  AiterStageKnobs k;
  std::string reason;
  // opus stage 2, atomic and bf16 (route rows): moec's W2 of the tile.
  const std::string atomic =
      "opus_moe2_afp8_wfp4_atomic_t32x128x256_sbm32_occ1_cache_b3_ws2";
  REQUIRE(parseAiterKernelName(atomic, 2, k, reason));
  CHECK(k.substitutedFrom == atomic);
  CHECK(k.tileM == 32);
  CHECK(k.sortBlockM == 32);
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "32"}, {"n", "128"}, {"k", "256"},
                       {"waves", "4"}, {"orientation", "b_major"},
                       {"b_cache", "cached"}});
  REQUIRE(k.notes.size() == 1);
  CHECK_THAT(k.notes[0], Catch::Contains("_occ1_cache_b3_ws2 are not reproduced"));
  REQUIRE(parseAiterKernelName(
      "opus_moe2_afp8_wfp4_bf16_t64x256x256_sbm128_small", 2, k, reason));
  CHECK(k.knobs.at("sort_block_m") == "128");
  CHECK(k.knobs.at("n") == "256");
  // opus refusals: FP8 route rows, stage 1, the layout form.
  CHECK_FALSE(parseAiterKernelName(
      "opus_moe2_afp8_wfp4_fp8_t64x256x256_sbm64_rbn3584", 2, k, reason));
  CHECK(k.refusalClass == "family opus: fp8 route rows");
  CHECK(k.substitutedFrom.empty());
  CHECK_FALSE(parseAiterKernelName(
      "opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw9_m3_fp8", 1, k, reason));
  CHECK(k.refusalClass == "family opus: stage 1 kw9");
  CHECK_FALSE(parseAiterKernelName(
      "opus_moe2_layout_afp8_wfp4_atomic_t32x128x256_sbm32", 2, k, reason));
  CHECK(k.refusalClass == "family opus: layout");
  CHECK_FALSE(parseAiterKernelName(atomic, 1, k, reason));
  CHECK(k.refusalClass == "family opus: other stage");

  // CK two-stage: BLOCK_SIZE x MPerBlock x NPerBlock x KPerBlock, MWaves x
  // NWaves; A F8 or FP4X2 x B FP4X2 -> B16 with Quant3 has moec's dtypes.
  const std::string ckFp8 =
      "moe_ck2stages_gemm2_256x32x128x128_1x4_MulABScaleExpertWeightShuffled_"
      "v3_Nswizzle0_Quant3_MulRoutedWeight1_F8_FP4X2_B16";
  REQUIRE(parseAiterKernelName(ckFp8, 2, k, reason));
  CHECK(k.substitutedFrom == ckFp8);
  CHECK(k.tileM == 32);
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "32"}, {"n", "128"}, {"k", "128"},
                       {"waves", "4"}, {"orientation", "b_major"}});
  const std::string ckFp4 =
      "moe_ck2stages_gemm2_64x32x32x128_1x1_MulABScaleExpertWeightShuffled_"
      "v1_Nswizzle0_Quant3_MulRoutedWeight1_FP4X2_FP4X2_B16";
  CHECK(k.aFormat == "fp8");
  // MXFP4 activations (A4W4): moec's W2 with FP4 A tiles, one 1x1 wave.
  REQUIRE(parseAiterKernelName(ckFp4, 2, k, reason));
  CHECK(k.substitutedFrom == ckFp4);
  CHECK(k.aFormat == "fp4");
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "32"}, {"n", "32"}, {"k", "128"},
                       {"waves", "1"}, {"orientation", "b_major"}});
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm2_64x32x32x128_1x1_MulABScaleExpertWeightShuffled_"
      "v1_Nswizzle0_Quant3_MulRoutedWeight1_I8_FP4X2_B16",
      2, k, reason));
  CHECK(k.refusalClass == "family ck2stages: A I8");
  // CK stage 1, A4W4 preshuffled (DeepSeek V3's FP4 table): moec's A4W4
  // W13 with n = NPerBlock intermediate columns (gate j, up I + j), NWaves
  // waves, the MXFP4 intermediate stage 2 reads; the name's silu is the
  // row's act_type.
  const std::string ckStage1 =
      "moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16";
  REQUIRE(parseAiterKernelName(ckStage1, 1, k, reason));
  CHECK(k.substitutedFrom == ckStage1);
  CHECK(k.tileM == 128);
  CHECK(k.aFormat == "fp4");
  CHECK(k.midFormat == "fp4");
  CHECK(k.actType == "ActivationType.Silu");
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "128"}, {"n", "128"}, {"k", "128"},
                       {"waves", "4"}, {"orientation", "b_major"},
                       {"b_cache", "cached"}});
  REQUIRE(k.notes.size() == 1);
  CHECK_THAT(k.notes[0], Catch::Contains("gate row j and up row I + j"));
  // Refused: FP8 activations (CK's A8W4 stage 1 is not mapped), another
  // activation op, the routing weight in stage 1, M split over waves.
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_silu_F8_FP4X2_B16",
      1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: stage 1 A F8");
  CHECK(k.substitutedFrom.empty());
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_swiglu_FP4X2_FP4X2_B16",
      1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: stage 1 swiglu");
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight1_silu_FP4X2_FP4X2_B16",
      1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: stage 1 MulRoutedWeight1");
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm1_256x64x64x128_2x2_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16",
      1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: stage 1 MWaves 2x2");
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm1_256x64x64x128_2x2_MulABScale_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16",
      1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: stage 1 MulABScale");
  CHECK_FALSE(parseAiterKernelName(ckFp8, 1, k, reason));
  CHECK(k.refusalClass == "family ck2stages: other stage");
  // BLOCK_SIZE must be 64 x the waves.
  CHECK_FALSE(parseAiterKernelName(
      "moe_ck2stages_gemm2_128x32x128x128_1x4_MulABScaleExpertWeightShuffled_"
      "v3_Nswizzle0_Quant3_MulRoutedWeight1_F8_FP4X2_B16",
      2, k, reason));
  CHECK(k.refusalClass == "family ck2stages: malformed");
  CHECK_FALSE(parseAiterKernelName("cktile_a8w4_bm32", 1, k, reason));
  CHECK(k.refusalClass == "family cktile: stage 1");

  // opus FP8 route rows: 1x8 E8M0 blocks of BF16-rounded rows, not moec's
  // 1x32 FP8 rows.
  CHECK_FALSE(parseAiterKernelName(
      "opus_moe2_afp8_wfp4_fp8_t32x256x256_sbm32_occ5_rbn2304", 2, k, reason));
  CHECK(k.refusalClass == "family opus: fp8 route rows");
  CHECK_THAT(reason, Catch::Contains("one E8M0 scale per 8 columns"));
  CHECK_THAT(reason, Catch::Contains("1x32 blocks"));

  // FlyDSL mxmoe (GLM-5's FP4 table): g1 {BM}x256x256 is moec's A4W4 W13
  // with 128 intermediate columns, g2 its MXFP4 W2 with n 256, k 256.
  const std::string g1 = "flydsl_mxmoe_g1_a4w4_16x256x256_f16in_nt";
  REQUIRE(parseAiterKernelName(g1, 1, k, reason));
  CHECK(k.substitutedFrom == g1);
  CHECK(k.tileM == 16);
  CHECK(k.aFormat == "fp4");
  CHECK(k.midFormat == "fp4");
  CHECK(k.actType.empty());
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "16"}, {"n", "128"}, {"k", "256"},
                       {"waves", "4"}, {"orientation", "b_major"},
                       {"b_cache", "nt"}});
  REQUIRE(k.notes.size() == 1);
  CHECK_THAT(k.notes[0], Catch::Contains("_e8m0_roundup"));
  CHECK_THAT(k.notes[0], Catch::Contains("_f16in"));
  const std::string g2 = "flydsl_mxmoe_g2_a4w4_128x256x256_f4out";
  REQUIRE(parseAiterKernelName(g2, 2, k, reason));
  CHECK(k.substitutedFrom == g2);
  CHECK(k.aFormat == "fp4");
  CHECK(k.sortBlockM == 0);
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "128"}, {"n", "256"}, {"k", "256"},
                       {"waves", "4"}, {"orientation", "b_major"},
                       {"b_cache", "cached"}});
  REQUIRE(k.notes.size() == 1);
  CHECK_THAT(k.notes[0], Catch::Contains("_f4out: AITER drops it"));
  REQUIRE(parseAiterKernelName("flydsl_mxmoe_g2_a4w4_16x256x256_atomic", 2, k,
                               reason));
  CHECK_THAT(k.notes[0], Catch::Contains("_atomic: AITER adds"));
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_mxmoe_g2_a4w4_128x256x256_atomic_f4out", 2, k, reason));
  CHECK(k.refusalClass == "family flydsl_mxmoe: malformed");
  CHECK_FALSE(parseAiterKernelName("flydsl_mxmoe_g1_a4w4_32x256x256_sk2", 1, k,
                                   reason));
  CHECK(k.refusalClass == "family flydsl_mxmoe: _sk");
  CHECK_FALSE(parseAiterKernelName("flydsl_mxmoe_g1_a4w4_128x256x256_xcd4", 1,
                                   k, reason));
  CHECK(k.refusalClass == "family flydsl_mxmoe: _xcd");
  CHECK_FALSE(parseAiterKernelName("flydsl_mxmoe_g1_a4w4_32x128x256", 1, k,
                                   reason));
  CHECK(k.refusalClass == "family flydsl_mxmoe: malformed");
  CHECK_FALSE(parseAiterKernelName(g2, 1, k, reason));
  CHECK(k.refusalClass == "family flydsl_mxmoe: other stage");

  // FlyDSL's production stage-2 variant: the W2 of its base name.
  const std::string cumul =
      "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic_persist_async_w4_cumul3";
  REQUIRE(parseAiterKernelName(cumul, 2, k, reason));
  CHECK(k.substitutedFrom == cumul);
  CHECK(k.aFormat == "fp4");
  CHECK(k.tileM == 64);
  CHECK(k.knobs.at("m") == "64");
  CHECK(k.knobs.at("n") == "128");
  CHECK(k.knobs.at("k") == "256");
  CHECK(k.knobs.at("waves") == "4");
  CHECK(k.knobs.count("persist_cu") == 0);
  CHECK_THAT(k.notes.back(), Catch::Contains("cu_num_mul 3"));
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe2_afp4_wfp4_bf16_t32x128x256_atomic_persist_async_w4_cumul3",
      2, k, reason));
  CHECK(k.refusalClass == "part '_persist_async_w4_cumul3'");
  CHECK(k.substitutedFrom.empty());

  // A whole row: the substituted name reaches the manifest row.
  const std::string csv =
      std::string(kHeader) + "\n" + "gfx950,256,1,7168,512,384,6," +
      kSiluKey + ",32,0,flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8," +
      atomic + "\n";
  std::vector<AiterCsvRow> rows;
  std::string error;
  REQUIRE(parseAiterCsv("s.csv", csv, rows, error));
  TuningTable table;
  std::vector<rt::AiterRowInfo> manifestRows;
  std::vector<std::string> unsupported;
  REQUIRE(buildAiterTable(rows, target::kGfx950, AiterCompileOptions(), table,
                          manifestRows, unsupported, error));
  REQUIRE(manifestRows.size() == 1);
  CHECK(manifestRows[0].compiled());
  CHECK(manifestRows[0].substitutedFrom1.empty());
  CHECK(manifestRows[0].substitutedFrom2 == atomic);
}

TEST_CASE("AITER A4W4 rows of other families: CK stage 1, mxmoe, the "
          "production stage 2",
          "[aiter][substitution]") {
  // The sample tables' rows (DeepSeek V3 and GLM-5 FP4): each compiles with
  // both names recorded; a CK silu stage 1 on a Swiglu row is refused.
  auto key = [](const char *act) {
    return std::string(act) +
           ",torch.bfloat16,torch.float4_e2m1fn_x2,torch.float4_e2m1fn_x2,"
           "QuantType.per_1x32,1,0";
  };
  const std::string ck =
      "moe_ck2stages_gemm1_256x128x128x128_1x4_MulABScaleShuffled_v3_"
      "Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16";
  const std::string cumul =
      "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic_persist_async_w4_cumul3";
  const std::string csv =
      std::string(kHeader) + "\n" + "gfx950,256,4096,7168,256,257,9," +
      key("ActivationType.Silu") + ",128,0," + ck +
      ",flydsl_moe2_afp4_wfp4_bf16_t64x256x256_reduce_persist_sbm128\n" +
      "gfx950,256,8192,7168,2048,33,8," + key("ActivationType.Silu") +
      ",64,0,flydsl_moe1_afp4_wfp4_bf16_t64x128x256_w4_bnt0_fp4," + cumul +
      "\n" + "gfx950,256,2,6144,512,257,9," + key("ActivationType.Silu") +
      ",16,0,flydsl_mxmoe_g1_a4w4_16x256x256_f16in_nt,"
      "flydsl_mxmoe_g2_a4w4_16x256x256_atomic\n" +
      "gfx950,256,16384,6144,512,257,9," + key("ActivationType.Silu") +
      ",128,0,flydsl_mxmoe_g1_a4w4_128x256x256,"
      "flydsl_mxmoe_g2_a4w4_128x256x256_f4out\n" +
      "gfx950,256,1,7168,256,257,9," + key("ActivationType.Swiglu") +
      ",128,0," + ck +
      ",flydsl_moe2_afp4_wfp4_bf16_t64x256x256_reduce_persist_sbm128\n";
  SkippingBuild built = buildSkipping("other.csv", csv);
  TuningTable &table = built.table;
  std::vector<rt::AiterRowInfo> &manifestRows = built.manifestRows;
  REQUIRE(manifestRows.size() == 5);
  for (size_t r = 0; r < 4; ++r)
    CHECK(manifestRows[r].compiled());
  CHECK(manifestRows[0].substitutedFrom1 == ck);
  CHECK(manifestRows[0].substitutedFrom2.empty());
  CHECK(manifestRows[1].substitutedFrom1.empty());
  CHECK(manifestRows[1].substitutedFrom2 == cumul);
  CHECK(manifestRows[2].substitutedFrom1 ==
        "flydsl_mxmoe_g1_a4w4_16x256x256_f16in_nt");
  CHECK(manifestRows[2].substitutedFrom2 ==
        "flydsl_mxmoe_g2_a4w4_16x256x256_atomic");
  CHECK(manifestRows[3].substitutedFrom2 ==
        "flydsl_mxmoe_g2_a4w4_128x256x256_f4out");
  REQUIRE(built.unsupported.size() == 1);
  CHECK_THAT(built.unsupported[0],
             Catch::Contains("kernelName1 computes ActivationType.Silu, "
                             "act_type is ActivationType.Swiglu"));
  // The CK row's W13: the MXFP4 problem, n 128 without interleave.
  const TableProblem *problem =
      table.findProblem("aiter_h7168_i256_e257_k9_a4_m4");
  REQUIRE(problem);
  bool sawCkW13 = false;
  for (const TableKernel &kernel : table.kernels)
    if (kernel.problem == problem->name && kernel.stage == abi::Stage::W13) {
      sawCkW13 = true;
      CHECK(kernel.knobs.at("n") == "128");
      CHECK(kernel.knobs.at("k") == "128");
      CHECK(kernel.knobs.count("gate_up_interleave") == 0);
    }
  CHECK(sawCkW13);
}

TEST_CASE("AITER A4W4 names: MXFP4 activations, separated gate/up, n = 32",
          "[aiter][a4w4]") {
  AiterStageKnobs k;
  std::string reason;
  // Stage 1 without _gui: GateMode.SEPARATED, N intermediate columns
  // (gate row j, up row I + j), min(4, N/32) waves; _fp4: MXFP4 out.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp4_wfp4_bf16_t32x128x256_w2_fp4",
                               1, k, reason));
  CHECK(k.aFormat == "fp4");
  CHECK(k.midFormat == "fp4");
  CHECK(k.knobs.at("n") == "128");
  CHECK(k.knobs.at("waves") == "4");
  CHECK(k.knobs.count("gate_up_interleave") == 0);
  CHECK(k.knobs.at("residency_cap") == "2");
  // t32x32x256: n = 32 over one wave.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp4_wfp4_bf16_t32x32x256_w4_fp4",
                               1, k, reason));
  CHECK(k.knobs.at("n") == "32");
  CHECK(k.knobs.at("waves") == "1");
  // Without a suffix AITER quantises a BF16 intermediate to MXFP4.
  REQUIRE(parseAiterKernelName("flydsl_moe1_afp4_wfp4_bf16_t64x128x256_w3",
                               1, k, reason));
  CHECK(k.midFormat == "fp4");
  REQUIRE(k.notes.size() == 1);
  // A4W4 _kw{n}: one N-wave is enough (t32x32: 1 wave x 4 groups).
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_afp4_wfp4_bf16_t32x32x256_w4_kw4_fp4", 1, k, reason));
  CHECK(k.knobs.at("k_waves") == "4");
  CHECK(k.knobs.at("n") == "32");
  CHECK(k.knobs.at("waves") == "1");
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_afp4_wfp4_bf16_t32x64x256_w4_kw2_fp4", 1, k, reason));
  CHECK(k.knobs.at("k_waves") == "2");
  CHECK(k.knobs.at("waves") == "2");
  CHECK(k.midFormat == "fp4");

  // Whole rows (Kimi K3 A4W4 shapes): the t32x32 stage 1 with the layout
  // stage 2 compiles, the problem MXFP4 in and between; a stage 2 reading
  // FP8 after an FP4 stage 1 is refused by name.
  const std::string key =
      "ActivationType.Situv2,torch.bfloat16,torch.float4_e2m1fn_x2,"
      "torch.float4_e2m1fn_x2,QuantType.per_1x32,1,0";
  const std::string csv =
      std::string(kHeader) + "\n" + "gfx950,256,1,3584,384,896,16," + key +
      ",32,0,flydsl_moe1_afp4_wfp4_bf16_t32x32x256_w4_fp4,"
      "flydsl_moe2_layout_afp4_wfp4_bf16_t32x128x128_atomic_sbm32\n" +
      "gfx950,256,2,3584,384,896,16," + key +
      ",32,0,flydsl_moe1_afp4_wfp4_bf16_t32x32x256_w4_fp4,"
      "flydsl_moe2_afp8_wfp4_bf16_t32x128x128_atomic\n";
  SkippingBuild built = buildSkipping("a4.csv", csv);
  TuningTable &table = built.table;
  std::vector<rt::AiterRowInfo> &manifestRows = built.manifestRows;
  REQUIRE(manifestRows.size() == 2);
  CHECK(manifestRows[0].compiled());
  CHECK(manifestRows[0].substitutedFrom2 ==
        "flydsl_moe2_layout_afp4_wfp4_bf16_t32x128x128_atomic_sbm32");
  REQUIRE(built.unsupported.size() == 1);
  CHECK_THAT(built.unsupported[0],
             Catch::Contains("kernelName2 reads afp8 activations, "
                             "kernelName1 writes an fp4 intermediate"));
  const TableProblem *problem =
      table.findProblem("aiter_h3584_i384_e896_k16_a4_m4");
  REQUIRE(problem);
  CHECK(problem->aFormat == "fp4");
  CHECK(problem->midFormat == "fp4");
}

TEST_CASE("AITER A16W4 names: BF16 activations and intermediate, no quant",
          "[aiter][a16w4]") {
  AiterStageKnobs k;
  std::string reason;
  // Stage 1 (a16wmix gemm1): GateMode.SEPARATED, N intermediate columns,
  // 4 waves (4 / k_wave N-waves); a BF16 intermediate.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_abf16_wfp4_bf16_t32x128x256_w4_xcd4", 1, k, reason));
  CHECK(k.aFormat == "bf16");
  CHECK(k.midFormat == "bf16");
  CHECK(k.knobs.at("n") == "128");
  CHECK(k.knobs.at("waves") == "4");
  CHECK(k.knobs.count("gate_up_interleave") == 0);
  CHECK(k.knobs.at("residency_cap") == "4");
  CHECK(k.knobs.at("group_m") == "4");
  CHECK(k.notes.empty());
  // _xcd1 (registered for A16W4 only): the XCD renumbering alone.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe1_abf16_wfp4_bf16_t32x128x128_w3_bnt0_xcd1", 1, k, reason));
  CHECK(k.knobs.at("xcd_swizzle") == "true");
  CHECK(k.knobs.count("group_m") == 0);
  CHECK(k.knobs.at("b_cache") == "cached");
  CHECK(k.knobs.at("k") == "128");
  // _kw{n}: tile.k_waves = n over 4 / n N-waves (AITER's a16wmix gemm1
  // keeps 4 waves in all).
  knobsOf("flydsl_moe1_abf16_wfp4_bf16_t32x32x256_w3_xcd1_kw2", 1,
          {{"k_waves", "2"}, {"waves", "2"}, {"n", "32"}});
  knobsOf("flydsl_moe1_abf16_wfp4_bf16_t32x32x128_w4_kw4", 1,
          {{"k_waves", "4"}, {"waves", "1"}});
  // An A16W4 stage 1 never requantises.
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_abf16_wfp4_bf16_t32x128x256_w4_fp8", 1, k, reason));
  CHECK(reason.find("part '_fp8': an A16W4 stage 1 writes a BF16 "
                    "intermediate") != std::string::npos);
  // Stage 2 reads BF16.
  REQUIRE(parseAiterKernelName(
      "flydsl_moe2_abf16_wfp4_bf16_t32x128x128_atomic_bnt2_xcd4_persist", 2,
      k, reason));
  CHECK(k.aFormat == "bf16");
  CHECK(k.midFormat == "bf16");
  CHECK(k.knobs.at("n") == "128");
  CHECK(k.knobs.at("b_cache") == "nt");

  // Whole rows (Kimi K3 SiTUv2 shapes): the problem is BF16 in and
  // between, the config has no quant kernel; abf16 names with FP8 tokens
  // are refused by name.
  const std::string key =
      "ActivationType.Situv2,torch.bfloat16,torch.bfloat16,"
      "torch.float4_e2m1fn_x2,QuantType.per_1x32,1,0";
  const std::string fp8Key =
      "ActivationType.Situv2,torch.bfloat16,torch.float8_e4m3fn,"
      "torch.float4_e2m1fn_x2,QuantType.per_1x32,1,0";
  const std::string csv =
      std::string(kHeader) + "\n" + "gfx950,256,64,3584,512,896,16," + key +
      ",32,0,flydsl_moe1_abf16_wfp4_bf16_t32x128x256_w4_xcd1,"
      "flydsl_moe2_abf16_wfp4_bf16_t32x128x128_atomic_bnt2_persist\n" +
      "gfx950,256,128,3584,512,896,16," + fp8Key +
      ",32,0,flydsl_moe1_abf16_wfp4_bf16_t32x128x256_w4_xcd1,"
      "flydsl_moe2_abf16_wfp4_bf16_t32x128x128_atomic_bnt2_persist\n";
  SkippingBuild built = buildSkipping("a16.csv", csv);
  TuningTable &table = built.table;
  std::vector<rt::AiterRowInfo> &manifestRows = built.manifestRows;
  REQUIRE(manifestRows.size() == 2);
  CHECK(manifestRows[0].compiled());
  REQUIRE(built.unsupported.size() == 1);
  CHECK_THAT(built.unsupported[0],
             Catch::Contains("kernelName1 reads abf16 activations, q_dtype_a "
                             "is torch.float8_e4m3fn"));
  const TableProblem *problem = table.findProblem("aiter_h3584_i512_e896_k16_a16");
  REQUIRE(problem);
  CHECK(problem->aFormat == "bf16");
  CHECK(problem->midFormat == "bf16");
  REQUIRE(table.configs.size() == 1);
  REQUIRE(table.configs[0].kernels.size() == 4);
  for (const std::string &name : table.configs[0].kernels) {
    const TableKernel *kernel = table.findKernel(name);
    REQUIRE(kernel);
    CHECK(kernel->stage != abi::Stage::Quant);
  }
}

// CK-tile stage 2 (cktile_a8w4_bm{32|64}: AITER's A8W4 instance of that
// block M, tile M x 256 x 256, four waves along N) is moec's W2 of that
// tile; other block Ms and names are refused. Opus stage 1: 'pair' kw{n}
// is W13 n 32, 2 waves, k_waves n (the sample's kw7 included); 'gs' is
// W13 n N / 2, bt / 64 waves (the sample's N 384: 192 columns); 9 K groups
// or 200 columns have no moec tile.
TEST_CASE("AITER CK-tile stage 2 and opus stage 1 names",
          "[aiter][substitution]") {
  AiterStageKnobs k;
  std::string reason;
  for (int blockM : {32, 64}) {
    const std::string name = "cktile_a8w4_bm" + std::to_string(blockM);
    REQUIRE(parseAiterKernelName(name, 2, k, reason));
    CHECK(k.knobs == std::map<std::string, std::string>{
                         {"m", std::to_string(blockM)}, {"n", "256"},
                         {"k", "256"}, {"waves", "4"},
                         {"orientation", "b_major"}, {"b_cache", "cached"}});
    CHECK(k.tileM == blockM);
    CHECK(k.substitutedFrom == name);
    REQUIRE(k.notes.size() == 1);
    CHECK_THAT(k.notes[0], Catch::Contains("BF16 atomics"));
  }
  for (auto [name, cls] : {std::pair<const char *, const char *>{
                               "cktile_a8w4_bm16", "family cktile: block m"},
                           {"cktile_a8w4_bm128", "family cktile: block m"},
                           {"cktile_a16w4_bm32", "family cktile: not a8w4"},
                           {"cktile_a8w4_bm32_x", "family cktile: not a8w4"}}) {
    INFO(name);
    CHECK_FALSE(parseAiterKernelName(name, 2, k, reason));
    CHECK(k.refusalClass == cls);
    CHECK(k.substitutedFrom.empty());
  }

  REQUIRE(parseAiterKernelName(
      "opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw2_m3_fp8", 1, k, reason));
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "32"}, {"n", "32"}, {"k", "256"},
                       {"waves", "2"}, {"k_waves", "2"},
                       {"gate_up_interleave", "16"},
                       {"orientation", "b_major"}, {"b_cache", "cached"}});
  CHECK(k.midFormat == "fp8");
  CHECK(k.actType.empty()); // the row's act_type, as for FlyDSL names
  REQUIRE(k.notes.size() == 1);
  CHECK_THAT(k.notes[0], Catch::Contains("2 K groups") &&
                             Catch::Contains("_m3"));
  REQUIRE(parseAiterKernelName(
      "opus_moe1_afp8_wfp4_bf16_t64x256_gs_qgb3_stream_k8_bt128_fp8", 1, k,
      reason));
  CHECK(k.knobs == std::map<std::string, std::string>{
                       {"m", "64"}, {"n", "128"}, {"k", "256"},
                       {"waves", "2"}, {"gate_up_interleave", "16"},
                       {"orientation", "b_major"}, {"b_cache", "cached"}});
  CHECK(k.tileM == 64);
  knobsOf("opus_moe1_afp8_wfp4_bf16_t32x512_gs_aff32_p2_fp8", 1,
          {{"n", "256"}, {"waves", "4"}});
  // The sample table's own: 7 K groups of 2 waves (14 waves, 896
  // threads); 192 columns over 2 and over 4 waves.
  knobsOf("opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw7_m3_fp8", 1,
          {{"n", "32"}, {"waves", "2"}, {"k_waves", "7"}});
  knobsOf("opus_moe1_afp8_wfp4_bf16_t32x384_gs_qgb6_stream_k8_bt128_fp8", 1,
          {{"n", "192"}, {"waves", "2"}, {"k_waves", "(absent)"}});
  CHECK(knobsOf("opus_moe1_afp8_wfp4_bf16_t64x384_gs_qgb3_aff192_mmajor_fp8",
                1, {{"n", "192"}, {"waves", "4"}})
            .tileM == 64);
  for (auto [name, cls] :
       {std::pair<const char *, const char *>{
            "opus_moe1_afp8_wfp4_bf16_t32x400_gs_qgb6_fp8",
            "family opus: stage 1 N 400"},
        {"opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw9_m3_fp8",
         "family opus: stage 1 kw9"},
        {"opus_moe1_afp8_wfp4_bf16_t32x64_gs_bt256_fp8",
         "family opus: stage 1 bt256"},
        {"opus_moe1_afp8_wfp4_bf16_t32x256_gs_zz3_fp8",
         "family opus: stage 1 part '_zz3'"},
        {"opus_moe1_afp8_wfp4_bf16_t32x256_gs_kw2_fp8",
         "family opus: stage 1 part '_kw2'"},
        {"opus_moe1_abf16_wfp4_bf16_t32x256_gs_fp8",
         "family opus: stage 1 not A8W4"}}) {
    INFO(name);
    CHECK_FALSE(parseAiterKernelName(name, 1, k, reason));
    CHECK(k.refusalClass == cls);
  }
}
