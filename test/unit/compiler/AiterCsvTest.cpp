// AITER's kernel-name grammar and CSV merge rules (docs/aiter-tables.md).
// Expected knobs are AITER's definitions applied by hand to each name.
#include "moec/Compiler/AiterCsv.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

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
}

TEST_CASE("AITER stage-1 names: parts moec cannot honour are named",
          "[aiter]") {
  AiterStageKnobs k;
  std::string reason;
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x64x256_w4_gui_kw4_fp8", 1, k,
      reason));
  CHECK(reason.find("part '_kw4'") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w4_gui_xcd3_fp8", 1, k,
      reason));
  CHECK(reason.find("part '_xcd3'") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName("opus_moe1_afp8_wfp4_bf16_t32x384_pair_kw7_m3_fp8",
                                   1, k, reason));
  CHECK(reason.find("backend opus") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName("cktile_a8w4_bm64", 1, k, reason));
  CHECK(reason.find("backend cktile") != std::string::npos);
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
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe2_layout_afp8_wfp4_bf16_t32x256x256_atomic_nt_sbm32", 2,
      k, reason));
  CHECK(reason.find("flydsl_moe2_layout_") != std::string::npos);
  CHECK_FALSE(parseAiterKernelName(
      "flydsl_moe2_afp4_wfp4_bf16_t64x128x256_atomic_persist_async_w4_cumul3",
      2, k, reason));
  CHECK(reason.find("part '_afp4'") != std::string::npos);
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
