// AITER's lookup over a bundle's recorded rows (moec/aiter_select.h) and the
// manifest's aiter_rows round trip. Expected values are AITER's rules
// applied by hand to the rows below (docs/aiter-tables.md).
#include "moec/aiter_select.h"
#include "moec/bundle.h"
#include "moec/manifest.h"
#include "moec/moec_runtime.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace moec::rt;

namespace {

AiterRowInfo makeRow(uint32_t token, const char *act, uint32_t topk,
                     uint32_t line, uint32_t config) {
  AiterRowInfo r;
  r.gfx = "gfx950";
  r.cuNum = 256;
  r.token = token;
  r.modelDim = 7168;
  r.interDim = 512;
  r.expert = 384;
  r.topk = topk;
  r.actType = act;
  r.dtype = "torch.bfloat16";
  r.qDtypeA = "torch.float8_e4m3fn";
  r.qDtypeW = "torch.float4_e2m1fn_x2";
  r.qType = "QuantType.per_1x32";
  r.useG1u1 = 1;
  r.kernelName1 = "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8";
  r.kernelName2 = "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic";
  r.blockM = 32;
  r.line = line;
  r.config = config;
  return r;
}

AiterKey keyOf(const char *act, uint32_t topk) {
  AiterKey k;
  k.gfx = "gfx950";
  k.cuNum = 256;
  k.modelDim = 7168;
  k.interDim = 512;
  k.expert = 384;
  k.topk = topk;
  k.actType = act;
  k.dtype = "torch.bfloat16";
  k.qDtypeA = "torch.float8_e4m3fn";
  k.qDtypeW = "torch.float4_e2m1fn_x2";
  k.qType = "QuantType.per_1x32";
  k.useG1u1 = 1;
  return k;
}

const char *kSilu = "ActivationType.Silu";
const char *kSwiglu = "ActivationType.Swiglu";

} // namespace

TEST_CASE("AITER token buckets: next power of two below 32768, then tiers",
          "[aiter]") {
  CHECK(aiterPaddedToken(0) == 1);
  CHECK(aiterPaddedToken(1) == 1);
  CHECK(aiterPaddedToken(2) == 2);
  CHECK(aiterPaddedToken(3) == 4);
  CHECK(aiterPaddedToken(1025) == 2048);
  CHECK(aiterPaddedToken(32767) == 32768);
  CHECK(aiterPaddedToken(32768) == 32768);
  CHECK(aiterPaddedToken(131071) == 32768);
  CHECK(aiterPaddedToken(131072) == 131072);
  CHECK(aiterPaddedToken(uint64_t(1) << 40) == 131072);
}

TEST_CASE("AITER lookup: every row is selected by every M of its bucket",
          "[aiter]") {
  std::vector<AiterRowInfo> rows;
  const uint32_t tokens[] = {1, 2, 4, 8, 16, 1024, 32768, 131072};
  for (uint32_t i = 0; i < 8; ++i)
    rows.push_back(makeRow(tokens[i], kSilu, 6, 2 + i, i));
  const AiterKey key = keyOf(kSilu, 6);
  for (uint32_t i = 0; i < 8; ++i) {
    const uint32_t t = tokens[i];
    std::vector<uint64_t> ms = {t};
    if (t > 1 && t <= 32768)
      ms.push_back(t / 2 + 1);
    if (t == 1)
      ms.push_back(0);
    if (t == 32768)
      ms.push_back(131071);
    if (t == 131072)
      ms.push_back(1000000);
    for (uint64_t m : ms) {
      INFO("m " << m);
      AiterSelection s = selectAiter(rows, key, m);
      CHECK(s.status == AiterStatus::Hit);
      CHECK(s.rule == AiterRule::Exact);
      CHECK(s.row == i);
    }
  }
}

TEST_CASE("AITER lookup: duplicates keep the first row", "[aiter]") {
  std::vector<AiterRowInfo> rows = {makeRow(4, kSilu, 6, 7, 0),
                                    makeRow(4, kSilu, 6, 9, 1)};
  AiterSelection s = selectAiter(rows, keyOf(kSilu, 6), 3);
  REQUIRE(s.status == AiterStatus::Hit);
  CHECK(rows[s.row].line == 7);
}

TEST_CASE("AITER lookup: act_type fallback never serves another activation",
          "[aiter]") {
  std::vector<AiterRowInfo> rows = {makeRow(4, kSilu, 6, 5, 0)};
  AiterSelection s = selectAiter(rows, keyOf(kSwiglu, 6), 4);
  CHECK(s.rule == AiterRule::ActTypeFallback);
  CHECK(s.status == AiterStatus::WrongActivation);
  CHECK(s.row == 0);
  // The exact activation comes first when both exist.
  rows.push_back(makeRow(4, kSwiglu, 6, 6, 1));
  s = selectAiter(rows, keyOf(kSwiglu, 6), 4);
  CHECK(s.rule == AiterRule::Exact);
  CHECK(s.status == AiterStatus::Hit);
  CHECK(s.row == 1);
}

TEST_CASE("AITER lookup: above 32768 falls back to the smaller tier",
          "[aiter]") {
  std::vector<AiterRowInfo> rows = {makeRow(32768, kSilu, 6, 3, 0)};
  AiterSelection s = selectAiter(rows, keyOf(kSilu, 6), 200000);
  CHECK(s.token == 131072);
  CHECK(s.rule == AiterRule::TierFallback);
  CHECK(s.status == AiterStatus::Hit);
  // 20000 pads to 32768 itself (an exact hit); 10000 pads to 16384, and
  // below the first tier there is no tier fallback.
  s = selectAiter(rows, keyOf(kSilu, 6), 20000);
  CHECK(s.rule == AiterRule::Exact);
  CHECK(s.status == AiterStatus::Hit);
  s = selectAiter(rows, keyOf(kSilu, 6), 10000);
  CHECK(s.status == AiterStatus::Miss);
}

TEST_CASE("AITER lookup: FHMoE has neither act_type nor tier fallback",
          "[aiter]") {
  AiterRowInfo r = makeRow(32768, kSilu, 7, 4, 0);
  r.expert = 385;
  r.fhmoe = true;
  r.sharedExpertId = 384;
  r.gateMode = "GateMode.INTERLEAVE";
  std::vector<AiterRowInfo> rows = {r};
  AiterKey k = keyOf(kSilu, 7);
  k.expert = 385;
  k.fhmoe = true;
  k.sharedExpertId = 384;
  k.gateMode = "GateMode.INTERLEAVE";
  CHECK(selectAiter(rows, k, 32768).status == AiterStatus::Hit);
  CHECK(selectAiter(rows, k, 200000).status == AiterStatus::Miss);
  AiterKey swiglu = k;
  swiglu.actType = kSwiglu;
  CHECK(selectAiter(rows, swiglu, 32768).status == AiterStatus::Miss);
  // A fused-MoE key never matches an FHMoE row.
  AiterKey plain = k;
  plain.fhmoe = false;
  CHECK(selectAiter(rows, plain, 32768).status == AiterStatus::Miss);
}

TEST_CASE("AITER lookup: a skipped row is refused, never passed over",
          "[aiter]") {
  AiterRowInfo skipped = makeRow(4, kSilu, 6, 8, 0);
  skipped.config = AiterRowInfo::kNoConfig;
  skipped.skipped = "kernelName2 'opus_...': backend opus";
  std::vector<AiterRowInfo> rows = {skipped};
  AiterSelection s = selectAiter(rows, keyOf(kSilu, 6), 3);
  CHECK(s.status == AiterStatus::Skipped);
  CHECK(s.row == 0);
}

TEST_CASE("AITER miss: topk off by one lists the nearest keys", "[aiter]") {
  std::vector<AiterRowInfo> rows = {makeRow(4, kSilu, 6, 2, 0)};
  AiterKey k = keyOf(kSilu, 7);
  AiterSelection s = selectAiter(rows, k, 4);
  REQUIRE(s.status == AiterStatus::Miss);
  const std::string text = describeAiterMiss(rows, k, s.token);
  CHECK(text.find("topk=7") != std::string::npos);
  CHECK(text.find("nearest keys that exist: topk=6 (key has 7)") !=
        std::string::npos);
  // Same key, another bucket: the buckets are named.
  const std::string buckets = describeAiterMiss(rows, keyOf(kSilu, 6), 64);
  CHECK(buckets.find("the key has rows for token 4") != std::string::npos);
}

TEST_CASE("manifest aiter_rows round-trip byte for byte", "[aiter]") {
  Manifest m;
  m.target = {"gfx950", "", 6};
  m.compiler = {"moec", "0.1.0", "22", "0123456789abcdef"};
  m.sources = {{"tuned_fmoe.csv", "0123456789abcdef"}};
  m.configs = {};
  AiterRowInfo skipped = makeRow(4, kSilu, 6, 8, 0);
  skipped.config = AiterRowInfo::kNoConfig;
  skipped.skipped = "backend opus";
  AiterRowInfo fh = skipped;
  fh.fhmoe = true;
  fh.sharedExpertId = 384;
  fh.hiddenPad = 0;
  fh.intermediatePad = 0;
  fh.gateMode = "GateMode.INTERLEAVE";
  fh.notes = {"kernelName2: _atomic: ..."};
  m.aiterRows = {skipped, fh};
  const std::string text = serializeManifest(m);
  Manifest back;
  std::string error;
  INFO(error);
  REQUIRE(parseCanonicalManifest(text, 0, back, error));
  REQUIRE(back.aiterRows.size() == 2);
  CHECK(back.aiterRows[1].gateMode == "GateMode.INTERLEAVE");
  CHECK(back.aiterRows[1].notes.size() == 1);
  CHECK(serializeManifest(back) == text);
  // A row that points at a configuration the bundle lacks is refused.
  Manifest bad = m;
  bad.aiterRows[0].config = 3;
  bad.aiterRows[0].skipped.clear();
  CHECK_FALSE(parseManifest(serializeManifest(bad), 0, back, error));
  CHECK(error.find("aiter_rows[0].config") != std::string::npos);
}

namespace {

/// A bundle (sampleManifest's kernels and configs) with AITER rows: token 4
/// Silu topk 6 -> config 1 (line 2), token 8 skipped (line 3), token 16 Silu
/// topk 6 -> config 2 (line 4).
std::string aiterBundle(const moec::test::TempDir &dir) {
  Manifest m;
  std::string error;
  REQUIRE(parseManifest(moec::test::sampleManifest().dump(), 2, m, error));
  m.sources = {{"dsv4_tuned_fmoe.csv", "0123456789abcdef"}};
  AiterRowInfo skipped = makeRow(8, kSilu, 6, 3, AiterRowInfo::kNoConfig);
  skipped.skipped = "kernelName2 'opus_moe2_x': backend opus";
  m.aiterRows = {makeRow(4, kSilu, 6, 2, 1), skipped, makeRow(16, kSilu, 6, 4, 2)};
  const std::string path = dir.file("aiter.moeb");
  REQUIRE(writeBundle(path, serializeManifest(m), moec::test::sampleCodeObjects(),
                      error));
  return path;
}

std::vector<moec_aiter_column_t> cKey(const char *act, const char *topk) {
  return {{"gfx", "gfx950"},
          {"cu_num", "256"},
          {"model_dim", "7168"},
          {"inter_dim", "512"},
          {"expert", "384"},
          {"topk", topk},
          {"act_type", act},
          {"dtype", "torch.bfloat16"},
          {"q_dtype_a", "torch.float8_e4m3fn"},
          {"q_dtype_w", "torch.float4_e2m1fn_x2"},
          {"q_type", "QuantType.per_1x32"},
          {"use_g1u1", "1"},
          {"doweight_stage1", "0"}};
}

} // namespace

TEST_CASE("AITER key columns: CSV names and spellings, nothing defaulted",
          "[aiter]") {
  AiterKeyColumns columns;
  using Error = AiterKeyColumns::Error;
  CHECK(columns.set("token", "4") == Error::UnknownColumn);
  CHECK(columns.set("topk", "6x") == Error::NotAnInteger);
  CHECK(columns.set("topk", "-6") == Error::NotAnInteger);
  CHECK(columns.set("topk", "4294967296") == Error::NotAnInteger);
  CHECK(columns.set("topk", "") == Error::NotAnInteger);
  CHECK(columns.set("topk", "6") == Error::None);
  CHECK(columns.set("topk", "6") == Error::Repeated);
  CHECK(columns.key().topk == 6);
  CHECK(columns.firstMissing() == 0);
  CHECK(columns.missingColumns() ==
        "gfx cu_num model_dim inter_dim expert act_type dtype q_dtype_a "
        "q_dtype_w q_type use_g1u1 doweight_stage1");
  for (const moec_aiter_column_t &c : cKey(kSilu, "6"))
    if (std::string_view(c.column) != "topk")
      REQUIRE(columns.set(c.column, c.value) == Error::None);
  CHECK(columns.firstMissing() == SIZE_MAX);
  CHECK_FALSE(columns.fhmoe());
  const AiterKey expected = keyOf(kSilu, 6);
  CHECK(describeAiterKey(columns.key(), 4) == describeAiterKey(expected, 4));
  // One FHMoE column makes the key FHMoE: the other three are then needed.
  REQUIRE(columns.set("gate_mode", "GateMode.INTERLEAVE") == Error::None);
  CHECK(columns.fhmoe());
  CHECK(columns.missingColumns() ==
        "shared_expert_id hidden_pad intermediate_pad");
}

TEST_CASE("C API moec_bundle_select_aiter: hit, miss, skipped row, bad keys",
          "[aiter][c-api]") {
  moec::test::TempDir dir;
  const std::string path = aiterBundle(dir);
  moec_bundle_t *bundle = nullptr;
  REQUIRE(moec_bundle_open(path.c_str(), &bundle) == MOEC_STATUS_OK);
  auto key = cKey(kSilu, "6");
  moec_aiter_selection_t s;
  std::memset(&s, 0xab, sizeof s);

  // m 3 -> token 4 -> line 2, config 1.
  REQUIRE(moec_bundle_select_aiter(bundle, 3, key.data(), uint32_t(key.size()), &s) ==
          MOEC_STATUS_OK);
  CHECK(std::string(s.kernel_name1) ==
        "flydsl_moe1_afp8_wfp4_bf16_t32x128x256_w3_gui_fp8");
  CHECK(std::string(s.kernel_name2) == "flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic");
  CHECK(s.block_m == 32);
  CHECK(s.ksplit == 0);
  CHECK(s.source_row == 2);
  CHECK(std::string(s.file) == "dsv4_tuned_fmoe.csv");
  CHECK(std::string(s.rule) == "exact");
  CHECK(s.token == 4);
  CHECK(s.row_token == 4);
  CHECK(s.row == 0);
  CHECK(s.config == 1);
  moec_config_info_t config;
  REQUIRE(moec_bundle_config_info(bundle, 1, &config) == MOEC_STATUS_OK);
  REQUIRE(s.kernel_count == config.kernel_count);
  CHECK(std::equal(s.kernels, s.kernels + s.kernel_count, config.kernels));
  // Every M of token 16's bucket selects line 4.
  for (uint64_t m = 9; m <= 16; ++m) {
    REQUIRE(moec_bundle_select_aiter(bundle, m, key.data(), uint32_t(key.size()), &s) ==
            MOEC_STATUS_OK);
    CHECK(s.source_row == 4);
    CHECK(s.config == 2);
  }

  // The skipped row (token 8) is refused naming it; it never falls through.
  CHECK(moec_bundle_select_aiter(bundle, 5, key.data(), uint32_t(key.size()), &s) ==
        MOEC_STATUS_ROW_NOT_COMPILED);
  std::string message = moec_last_error_message();
  CHECK(message.find("dsv4_tuned_fmoe.csv:3") != std::string::npos);
  CHECK(message.find("backend opus") != std::string::npos);
  CHECK(std::string(moec_status_name(MOEC_STATUS_ROW_NOT_COMPILED)) ==
        "MOEC_STATUS_ROW_NOT_COMPILED");

  // Another activation: AITER would borrow the Silu row; refused.
  auto swiglu = cKey(kSwiglu, "6");
  CHECK(moec_bundle_select_aiter(bundle, 4, swiglu.data(), uint32_t(swiglu.size()), &s) ==
        MOEC_STATUS_ROW_NOT_COMPILED);
  message = moec_last_error_message();
  CHECK(message.find("act_type_fallback") != std::string::npos);
  CHECK(message.find("no kernel compiled for ActivationType.Swiglu") != std::string::npos);

  // A miss: a bucket with no row names the buckets the key has.
  CHECK(moec_bundle_select_aiter(bundle, 100, key.data(), uint32_t(key.size()), &s) ==
        MOEC_STATUS_SELECTION_MISS);
  message = moec_last_error_message();
  CHECK(message.find("token=128") != std::string::npos);
  CHECK(message.find("the key has rows for token 4,8,16") != std::string::npos);

  // topk off by one (an EP engine's fake-expert slot): the nearest keys.
  auto topk7 = cKey(kSilu, "7");
  CHECK(moec_bundle_select_aiter(bundle, 4, topk7.data(), uint32_t(topk7.size()), &s) ==
        MOEC_STATUS_SELECTION_MISS);
  message = moec_last_error_message();
  CHECK(message.find("nearest keys that exist: topk=6 (key has 7)") != std::string::npos);
  auto expert = cKey(kSilu, "6");
  expert[4].value = "385";
  CHECK(moec_bundle_select_aiter(bundle, 4, expert.data(), uint32_t(expert.size()), &s) ==
        MOEC_STATUS_SELECTION_MISS);
  CHECK(std::string(moec_last_error_message()).find("expert=384 (key has 385)") !=
        std::string::npos);

  // Bad keys: missing, unknown, repeated columns, a non-integer value.
  auto shortKey = cKey(kSilu, "6");
  shortKey.pop_back();
  CHECK(moec_bundle_select_aiter(bundle, 4, shortKey.data(), uint32_t(shortKey.size()),
                                 &s) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(moec_last_error_message()).find("needs doweight_stage1") !=
        std::string::npos);
  auto unknown = cKey(kSilu, "6");
  unknown.push_back({"token", "4"});
  CHECK(moec_bundle_select_aiter(bundle, 4, unknown.data(), uint32_t(unknown.size()), &s) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(moec_last_error_message()).find("key column token=4") !=
        std::string::npos);
  auto repeated = cKey(kSilu, "6");
  repeated.push_back({"topk", "6"});
  CHECK(moec_bundle_select_aiter(bundle, 4, repeated.data(), uint32_t(repeated.size()),
                                 &s) == MOEC_STATUS_INVALID_ARGUMENT);
  auto notNumber = cKey(kSilu, "six");
  CHECK(moec_bundle_select_aiter(bundle, 4, notNumber.data(), uint32_t(notNumber.size()),
                                 &s) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(moec_last_error_message()).find("topk=six") != std::string::npos);
  CHECK(moec_bundle_select_aiter(bundle, 4, nullptr, 3, &s) == MOEC_STATUS_INVALID_ARGUMENT);
  CHECK(moec_bundle_select_aiter(nullptr, 4, key.data(), uint32_t(key.size()), &s) ==
        MOEC_STATUS_INVALID_ARGUMENT);
  moec_bundle_close(bundle);

  // A bundle compiled from a moec tuning table has no AITER rows.
  std::string error;
  REQUIRE(writeBundle(dir.file("plain.moeb"), moec::test::sampleManifest().dump(),
                      moec::test::sampleCodeObjects(), error));
  REQUIRE(moec_bundle_open(dir.file("plain.moeb").c_str(), &bundle) == MOEC_STATUS_OK);
  CHECK(moec_bundle_select_aiter(bundle, 4, key.data(), uint32_t(key.size()), &s) ==
        MOEC_STATUS_NOT_FOUND);
  moec_bundle_close(bundle);
}

// AITER keys its rows on cu_num (aiter #5342): on a bundle for MI355X (256
// CUs) a 128-CU device's key finds no row, and the refusal says why, naming
// cu_num and both counts; on a bundle for MI350P the reverse.
TEST_CASE("a device of another CU count never takes the bundle's rows",
          "[aiter][part]") {
  Manifest mi355x;
  mi355x.target = {"gfx950", "", 6, 256};
  mi355x.aiterRows = {makeRow(4, kSilu, 6, 2, 0)};
  AiterKey key = keyOf(kSilu, 6);
  CHECK(selectAiter(mi355x.aiterRows, key, 4).status == AiterStatus::Hit);
  key.cuNum = 128;
  AiterSelection selection = selectAiter(mi355x.aiterRows, key, 4);
  REQUIRE(selection.status == AiterStatus::Miss);
  const std::string refusal = describeAiterRefusal(mi355x, key, selection, 4);
  CHECK_THAT(refusal,
             Catch::StartsWith("m 4: cu_num 128: the bundle's rows are for "
                               "gfx950 (MI355X, 256 CUs), and a 128-CU "
                               "device never takes a row tuned for 256 CUs"));
  CHECK_THAT(refusal, Catch::Contains("cu_num=256 (key has 128)"));

  // A bundle written before manifests recorded the part means 256 CUs.
  Manifest old = mi355x;
  old.target.computeUnits = 0;
  CHECK(describeAiterRefusal(old, key, selection, 4) == refusal);

  Manifest mi350p;
  mi350p.target = {"gfx950", "", 6, 128};
  AiterRowInfo row = makeRow(4, kSilu, 6, 2, 0);
  row.cuNum = 128;
  mi350p.aiterRows = {row};
  CHECK(selectAiter(mi350p.aiterRows, key, 4).status == AiterStatus::Hit);
  key.cuNum = 256;
  selection = selectAiter(mi350p.aiterRows, key, 4);
  REQUIRE(selection.status == AiterStatus::Miss);
  CHECK_THAT(describeAiterRefusal(mi350p, key, selection, 4),
             Catch::Contains("the bundle's rows are for mi350p (MI350P, 128 "
                             "CUs), and a 256-CU device never takes a row "
                             "tuned for 128 CUs"));
}
