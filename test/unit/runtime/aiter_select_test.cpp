// AITER's lookup over a bundle's recorded rows (moec/aiter_select.h) and the
// manifest's aiter_rows round trip. Expected values are AITER's rules
// applied by hand to the rows below (docs/aiter-tables.md).
#include "moec/aiter_select.h"
#include "moec/manifest.h"

#include <catch2/catch.hpp>

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
