//===- KnobNamingTest.cpp - every knob reaches the kernel's symbol --------===//
///
/// \file
/// The table compiler gives one binary to kernels with equal symbols (and
/// refuses two different kernels with one symbol), so every knob must show
/// in the symbol. This walks the knob table generated from ODS: a knob
/// added to the dialect without a token in moe::getKernelSymbol, or without
/// a value here to test it with, fails this test.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/Registration.h"
#include "moec/Compiler/StageBuilder.h"
#include "StageBuilderFixture.h"
#include "moec/Dialect/Moe/MoeKnobs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>

namespace {

/// The spec every variant starts from: a fused stage, so the peer knobs
/// apply too, at a shape every knob value below fits.
moec::StageSpec baseSpec(const std::string &stage) {
  moec::StageSpec spec;
  spec.stage = *moec::abi::parseStage(stage);
  spec.fields = {{"hidden", "1024"},     {"intermediate", "1024"},
                 {"experts", "8"},       {"top_k", "2"},
                 {"ep", "2"},            {"m", "32"},
                 {"n", "128"},           {"capacity", "256"},
                 {"max_tokens", "64"},   {"workgroups", "64"}};
  return spec;
}

/// Knob values away from the defaults that are legal with baseSpec, each
/// tried alone (with the knobs a value needs, after ';').
const std::map<std::string, std::map<std::string, std::string>> kVariants = {
    {"k", {{"k", "128"}}},
    {"waves", {{"waves", "8"}}},
    {"mfma", {{"mfma", "m32n32k64"}}},
    {"orientation", {{"orientation", "b_major"}}},
    {"b_cache", {{"b_cache", "nt"}}},
    {"waves_per_eu", {{"waves_per_eu", "2"}}},
    {"a_swizzle", {{"a_swizzle", "true"}}},
    {"b_prefetch", {{"b_prefetch", "true"}}},
    {"scale_prefetch", {{"scale_prefetch", "true"}}},
    {"async_a", {{"async_a", "true"}}},
    {"transport", {{"transport", "compact"}}},
    {"capacity", {{"capacity", "512"}}},
    {"max_tokens", {{"max_tokens", "32"}}},
    {"workgroups", {{"workgroups", "128"}}},
    {"work_shards", {{"work_shards", "2"}}},
    {"swiglu_limit", {{"swiglu_limit", "10"}}},
    {"gpt_oss_swiglu", {{"gpt_oss_swiglu", "true"}, {"swiglu_limit", "7"}}},
    {"situ_v2", {{"situ_v2", "true"}}},
    {"situ_beta", {{"situ_v2", "true"}, {"situ_beta", "2.5"}}},
    {"situ_linear_beta", {{"situ_v2", "true"}, {"situ_linear_beta", "10"}}},
    {"dispatch_cus", {{"dispatch_cus", "8"}}},
    {"plan_cus", {{"plan_cus", "2"}, {"transport", "compact"}}},
    {"chunk_routes", {{"chunk_routes", "2"}}},
    {"dispatch", {{"dispatch", "none"}}},
    {"residency_cap", {{"residency_cap", "2"}}},
    {"b_direct", {{"b_direct", "true"}}},
    {"payload", {{"payload", "fp8"}}},
};

/// Knobs whose variants need a stage without a peer transport.
const std::map<std::string, std::map<std::string, std::string>> kUnfusedVariants = {
    {"xcd_swizzle", {{"xcd_swizzle", "true"}}},
    // The fused stage 1 refuses tile.k_waves > 1.
    {"k_waves", {{"k_waves", "2"}}},
    {"persist_cu", {{"persist_cu", "64"}}},
    {"persist_strided", {{"persist_cu", "64"}, {"persist_strided", "true"}}},
    {"persist_skew", {{"persist_cu", "64"}, {"persist_skew", "1"}}},
    {"group_m", {{"group_m", "4"}}},
    {"sort_block_m", {{"sort_block_m", "64"}}},
    {"split_k", {{"split_k", "2"}}},
    {"bf16_lds", {{"bf16_lds", "true"}, {"orientation", "b_major"}}},
    {"gate_up_interleave", {{"gate_up_interleave", "64"}}},
    {"shared_fp8_expert", {{"shared_fp8_expert", "true"}, {"ep", "1"}}},
    {"bias", {{"bias", "true"}}},
};

} // namespace

TEST_CASE("every knob of the GEMM stages shows in the kernel symbol",
          "[stage][naming]") {
  moec::test::StageBuilderFixture fixture;
  mlir::OpBuilder &builder = fixture.builder;

  for (const char *stage : {"w13", "w2"}) {
    const moec::moe::StageKnobs *knobs = moec::moe::lookupStageKnobs(stage);
    REQUIRE(knobs);
    int checked = 0;
    for (const moec::moe::KnobInfo &knob : *knobs) {
      const std::string name = knob.name;
      // The problem is named by its own symbol part; m and n are the tile.
      if (std::string(knob.owner) == "problem" || name == "m" || name == "n")
        continue;
      const bool fused = kVariants.count(name) > 0;
      const bool unfused = kUnfusedVariants.count(name) > 0;
      INFO(stage << " knob " << name);
      REQUIRE((fused || unfused)); // a new knob needs a value here
      moec::StageSpec base = baseSpec(stage), variant;
      if (unfused)
        for (const char *peerKnob : {"capacity", "max_tokens", "workgroups"})
          base.fields.erase(peerKnob);
      variant = base;
      for (const auto &[key, value] : fused ? kVariants.at(name)
                                            : kUnfusedVariants.at(name))
        variant.fields[key] = value;
      moec::StageDescription baseDescription, variantDescription;
      std::string error;
      mlir::Operation *baseOp =
          moec::buildStageOp(builder, base, baseDescription, error);
      INFO(error);
      REQUIRE(baseOp);
      mlir::Operation *variantOp =
          moec::buildStageOp(builder, variant, variantDescription, error);
      if (std::string(stage) == "w2" &&
          (name == "dispatch_cus" || name == "plan_cus" ||
           name == "chunk_routes" || name == "dispatch")) {
        // Stage 1's producer knobs: stage 2 refuses them.
        CHECK_FALSE(variantOp);
        CHECK(error.find("to stage 1 (moe.w13) only") != std::string::npos);
        continue;
      }
      if ((std::string(stage) == "w2" && name == "k_waves") ||
          (std::string(stage) == "w13" && name == "payload")) {
        // k_waves is stage 1's, the combine payload stage 2's.
        CHECK_FALSE(variantOp);
        CHECK(error.find("only") != std::string::npos);
        continue;
      }
      INFO(error);
      REQUIRE(variantOp);
      CHECK(variantDescription.attributes != baseDescription.attributes);
      CHECK(variantDescription.symbol != baseDescription.symbol);
      ++checked;
    }
    CHECK(checked >= 15);
  }
}

TEST_CASE("every knob of the quant, sort and combine stages shows in the "
          "kernel symbol",
          "[stage][naming]") {
  moec::test::StageBuilderFixture fixture;
  // Per stage: the required knobs of the base kernel, and a value away from
  // the default for every other knob (a new knob needs one here).
  const std::map<std::string, std::map<std::string, std::string>> bases = {
      {"quant", {}}, {"sort", {{"m_tile", "16"}}}, {"combine", {}}};
  const std::map<std::string, std::map<std::string, std::string>> variants = {
      {"quant", {{"waves", "8"}}},
      {"sort", {{"m_tile", "32"}, {"waves", "8"}, {"shared_last_route", "true"}}},
      {"combine",
       {{"blocks", "256"}, {"waves", "8"}, {"split_k", "2"},
        {"peer_rows", "true"}, {"shared_last_route", "true"},
        {"fp8_peer_rows", "true"}}}};
  for (const auto &[stage, required] : bases) {
    const moec::moe::StageKnobs *knobs = moec::moe::lookupStageKnobs(stage);
    REQUIRE(knobs);
    int checked = 0;
    for (const moec::moe::KnobInfo &knob : *knobs) {
      const std::string name = knob.name;
      if (std::string(knob.owner) == "problem")
        continue;
      INFO(stage << " knob " << name);
      REQUIRE(variants.at(stage).count(name) > 0);
      moec::StageSpec base;
      base.stage = *moec::abi::parseStage(stage);
      base.fields = {{"hidden", "1024"}, {"intermediate", "1024"},
                     {"experts", "8"},   {"top_k", "2"},
                     {"ep", "2"}};
      for (const auto &[key, value] : required)
        base.fields[key] = value;
      // FHMoE's shared_last_route is tensor parallel only.
      if (name == "shared_last_route")
        base.fields["ep"] = "1";
      // FP8 peer rows are peer rows.
      if (name == "fp8_peer_rows")
        base.fields["peer_rows"] = "true";
      moec::StageSpec variant = base;
      variant.fields[name] = variants.at(stage).at(name);
      moec::StageDescription baseDescription, variantDescription;
      std::string error;
      mlir::Operation *baseOp =
          moec::buildStageOp(fixture.builder, base, baseDescription, error);
      INFO(error);
      REQUIRE(baseOp);
      mlir::Operation *variantOp = moec::buildStageOp(
          fixture.builder, variant, variantDescription, error);
      INFO(error);
      REQUIRE(variantOp);
      CHECK(variantDescription.symbol != baseDescription.symbol);
      ++checked;
    }
    CHECK(checked >= 1);
  }
}

TEST_CASE("the quant kernel's symbol, ABI and grid rule", "[stage][quant]") {
  moec::test::StageBuilderFixture fixture;
  moec::StageSpec spec;
  spec.stage = moec::abi::Stage::Quant;
  spec.fields = {{"hidden", "5120"}, {"intermediate", "2304"},
                 {"experts", "384"}, {"top_k", "6"},
                 {"ep", "4"}};
  moec::StageDescription description;
  std::string error;
  mlir::Operation *op =
      moec::buildStageOp(fixture.builder, spec, description, error);
  INFO(error);
  REQUIRE(op);
  CHECK(description.symbol == "moe_quant_bf16_fp8_e384_h5120_k6_w4");
  const moec::KernelAbi &abi = description.abi;
  REQUIRE(abi.args.size() == 4);
  const char *names[] = {"x", "out", "out_scale", "num_tokens"};
  const char *dtypes[] = {"bf16", "f8E4M3FN", "f8E8M0FNU", "i32"};
  const char *shapes[] = {"[num_tokens, H]", "[num_tokens, H]",
                          "[num_tokens, H/32]", "scalar"};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(abi.args[i].name == names[i]);
    CHECK(abi.args[i].dtype == dtypes[i]);
    CHECK(abi.args[i].shape == shapes[i]);
  }
  CHECK(abi.args[0].access == moec::KernelArg::Access::Read);
  CHECK(abi.args[1].access == moec::KernelArg::Access::Write);
  CHECK(abi.args[2].access == moec::KernelArg::Access::Write);
  CHECK(abi.args[3].kind == moec::KernelArg::Kind::I32);
  CHECK(abi.gridX == "max(1, ceil(num_tokens * H / 8192))");
  CHECK(abi.gridY == "1");
  CHECK(abi.gridZ == "1");
  CHECK(abi.workgroupSize == 256);
  CHECK(abi.weightLayout.empty());

  // The problem's element types are implied: a table cannot make quant
  // read FP8.
  spec.fields["activation"] = "f8E4M3FN";
  CHECK_FALSE(moec::buildStageOp(fixture.builder, spec, description, error));
  CHECK(error.find("problem.activation must be bf16 for quant") !=
        std::string::npos);
}

TEST_CASE("the activation format shows in the type tokens of the symbol",
          "[naming]") {
  // Formats other than FP8 change the type tokens; FP8 keeps the symbols
  // every shipped kernel has.
  moec::test::StageBuilderFixture fixture;
  auto symbolOf = [&](const char *stage,
                      std::map<std::string, std::string> types) {
    moec::StageSpec spec;
    spec.stage = *moec::abi::parseStage(stage);
    spec.fields = {{"hidden", "512"}, {"intermediate", "256"},
                   {"experts", "8"},  {"top_k", "2"}};
    if (std::string(stage) != "quant")
      spec.fields.insert({{"m", "32"}, {"n", "64"}});
    for (auto &[name, type] : types)
      spec.fields[name] = type;
    moec::StageDescription description;
    std::string error;
    mlir::Operation *op =
        moec::buildStageOp(fixture.builder, spec, description, error);
    INFO(stage << ": " << error);
    REQUIRE(op);
    return description.symbol;
  };
  CHECK(symbolOf("w13", {}).rfind("moe1_afp8_wfp4_fp8_e8_h512_i256_", 0) == 0);
  CHECK(symbolOf("w13", {{"activation", "f4E2M1FN"}, {"output", "f4E2M1FN"}})
            .rfind("moe1_afp4_wfp4_fp4_e8_h512_i256_", 0) == 0);
  CHECK(symbolOf("w13", {{"activation", "f4E2M1FN"}})
            .rfind("moe1_afp4_wfp4_fp8_e8_h512_i256_", 0) == 0);
  CHECK(symbolOf("w2", {}).rfind("moe2_afp8_wfp4_bf16_e8_h512_i256_", 0) == 0);
  CHECK(symbolOf("w2", {{"activation", "f4E2M1FN"}})
            .rfind("moe2_afp4_wfp4_bf16_e8_h512_i256_", 0) == 0);
  CHECK(symbolOf("quant", {}) == "moe_quant_bf16_fp8_e8_h512_k2_w4");
  CHECK(symbolOf("quant", {{"output", "f4E2M1FN"}}) ==
        "moe_quant_bf16_fp4_e8_h512_k2_w4");
}

TEST_CASE("SiTUv2: the betas show in the symbol and the verifier refuses "
          "bad pairs",
          "[stage][naming][situv2]") {
  moec::test::StageBuilderFixture fixture;
  auto build = [&](std::map<std::string, std::string> knobs,
                   std::string &symbol, std::string &error) {
    moec::StageSpec spec;
    spec.stage = moec::abi::Stage::W13;
    spec.fields = {{"hidden", "1024"}, {"intermediate", "1024"},
                   {"experts", "8"},   {"top_k", "2"},
                   {"ep", "2"},        {"m", "32"},
                   {"n", "128"}};
    for (const auto &[key, value] : knobs)
      spec.fields[key] = value;
    moec::StageDescription description;
    mlir::Operation *op =
        moec::buildStageOp(fixture.builder, spec, description, error);
    symbol = description.symbol;
    return op != nullptr;
  };
  std::string plain, situ, beta, linear, error;
  REQUIRE(build({}, plain, error));
  REQUIRE(build({{"situ_v2", "true"}}, situ, error));
  REQUIRE(build({{"situ_v2", "true"}, {"situ_beta", "2.5"}}, beta, error));
  REQUIRE(build({{"situ_v2", "true"}, {"situ_linear_beta", "10"}}, linear,
                error));
  // The defaults (4 and 25) leave the betas out; others are spelled.
  CHECK(plain.find("_situ") == std::string::npos);
  CHECK(situ.find("_k2_situ") != std::string::npos);
  CHECK(situ.find("_situ_") == std::string::npos);
  CHECK(beta.find("_situ_b2p500000") != std::string::npos);
  CHECK(linear.find("_situ_lb10") != std::string::npos);
  CHECK(beta != linear);

  std::string ignored;
  CHECK_FALSE(build({{"situ_v2", "true"}, {"gpt_oss_swiglu", "true"},
                     {"swiglu_limit", "7"}},
                    ignored, error));
  CHECK(error.find("situ_v2 and gpt_oss_swiglu are two activations") !=
        std::string::npos);
  CHECK_FALSE(build({{"situ_v2", "true"}, {"situ_beta", "0"}}, ignored, error));
  CHECK(error.find("situ_v2 needs situ_beta > 0 and situ_linear_beta > 0, "
                   "got 0") != std::string::npos);
  CHECK_FALSE(build({{"situ_v2", "true"}, {"situ_linear_beta", "-1"}}, ignored,
                    error));
  CHECK(error.find("got 4 and -1") != std::string::npos);
}
