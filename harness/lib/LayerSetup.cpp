//===- LayerSetup.cpp - a table's layer ranks on a device -----------------===//

#include "moec/Harness/LayerSetup.h"

#include "moec/Compiler/StageBuilder.h"
#include "moec/Harness/StageKernel.h"
#include "moec/reference/Generate.h"

#include <algorithm>

namespace moec::harness {

const char *activationName(bool gptOssSwiglu) {
  return gptOssSwiglu ? "gpt-oss-swiglu" : "silu";
}

bool tableFacts(const rt::Manifest &manifest, const rt::SelectionTable &table,
                TableFacts &facts, std::string &error) {
  facts = TableFacts();
  facts.problem.epSize = table.ep;
  bool found = false;
  std::string firstActivationKernel, firstGemmKernel, firstStage2Kernel;
  // One oracle serves the whole table, so the kernels it checks must agree;
  // `kinds` names them ("W13 kernels"), the details (may be empty) say how
  // each is built.
  auto disagree = [&](const std::string &kinds, const std::string &first,
                      const std::string &firstDetail, const std::string &second,
                      const std::string &secondDetail, const std::string &what) {
    auto named = [](const std::string &name, const std::string &detail) {
      return detail.empty() ? name : name + " (" + detail + ")";
    };
    error = "table " +
            rt::describeTableKey(table.network, table.ep, table.workspace) +
            ": " + kinds + " " + named(first, firstDetail) + " and " +
            named(second, secondDetail) + " differ in " + what;
    return false;
  };
  for (const rt::SelectionRow &row : table.rows)
    for (uint32_t k : manifest.configs[row.config].kernels) {
      const rt::KernelInfo &kernel = manifest.kernels[k];
      StageSpec spec = stageSpecOfAttributes(kernel.stage, kernel.attributes);
      if (!abi::isGemmStage(kernel.stage))
        continue;
      // One set of biases serves the table: its GEMM kernels all take them
      // or none does.
      const bool bias = emu::specFlag(spec, "bias");
      if (!firstGemmKernel.empty() && bias != facts.bias)
        return disagree("kernels", firstGemmKernel,
                        facts.bias ? "bias" : "no bias", kernel.name,
                        bias ? "bias" : "no bias", "the bias");
      if (firstGemmKernel.empty())
        firstGemmKernel = kernel.name;
      facts.bias = bias;
      if (kernel.stage == rt::Stage::W2 && emu::specIsFused(spec)) {
        // One oracle serves the table: its fused stage 2 kernels agree on
        // the combine rows' payload.
        const bool fp8 = emu::specText(spec, "payload") == "fp8";
        if (!firstStage2Kernel.empty() && fp8 != facts.fp8PeerPayload)
          return disagree("fused W2 kernels", firstStage2Kernel, "",
                          kernel.name, "", "the peer payload");
        if (firstStage2Kernel.empty())
          firstStage2Kernel = kernel.name;
        facts.fp8PeerPayload = fp8;
      }
      if (kernel.stage != rt::Stage::W13)
        continue;
      // SiTUv2 and its betas: one oracle serves the table, so its W13
      // kernels must agree on them too.
      const bool situ = emu::specFlag(spec, "situ_v2");
      const double situBeta = emu::specNumber(spec, "situ_beta", 4.0);
      const double situLinearBeta =
          emu::specNumber(spec, "situ_linear_beta", 25.0);
      if (found && (situ != facts.situV2 ||
                    (situ && (situBeta != facts.situBeta ||
                              situLinearBeta != facts.situLinearBeta))))
        return disagree("W13 kernels", firstActivationKernel, "", kernel.name,
                        "", "SiTUv2 (situ_v2 and its betas)");
      facts.situV2 = situ;
      facts.situBeta = situBeta;
      facts.situLinearBeta = situLinearBeta;
      // One oracle serves the whole table, so its W13 kernels must agree on
      // the activation.
      const bool gptOss = emu::specFlag(spec, "gpt_oss_swiglu");
      if (found && gptOss != facts.gptOssSwiglu)
        return disagree("W13 kernels", firstActivationKernel,
                        activationName(facts.gptOssSwiglu), kernel.name,
                        activationName(gptOss), "the activation");
      if (!found)
        firstActivationKernel = kernel.name;
      facts.gptOssSwiglu = gptOss;
      found = true;
      facts.problem.hidden = uint32_t(emu::specInteger(spec, "hidden", 0));
      facts.problem.intermediate =
          uint32_t(emu::specInteger(spec, "intermediate", 0));
      facts.shared = emu::specFlag(spec, "shared_fp8_expert");
      facts.problem.experts = uint32_t(emu::specInteger(spec, "experts", 0) -
                                       (facts.shared ? 1 : 0));
      facts.problem.topK =
          uint32_t(emu::specInteger(spec, "top_k", 0) - (facts.shared ? 1 : 0));
      // One oracle serves the table: its W13 kernels agree on the formats.
      const bool tokensFp4 = emu::specText(spec, "activation") == "f4E2M1FN";
      const bool intermediateFp4 = emu::specText(spec, "output") == "f4E2M1FN";
      const bool bf16 = emu::specText(spec, "activation") == "bf16";
      auto formats = [](bool a, bool mid) {
        return std::string("a ") + (a ? "fp4" : "fp8") + ", mid " +
               (mid ? "fp4" : "fp8");
      };
      if (firstActivationKernel != kernel.name && bf16 != facts.bf16Activations)
        return disagree("W13 kernels", firstActivationKernel, "", kernel.name,
                        "", "BF16 activations (A16W4)");
      facts.bf16Activations = bf16;
      if (firstActivationKernel != kernel.name &&
          (tokensFp4 != facts.tokensFp4 ||
           intermediateFp4 != facts.intermediateFp4))
        return disagree("W13 kernels", firstActivationKernel,
                        formats(facts.tokensFp4, facts.intermediateFp4),
                        kernel.name, formats(tokensFp4, intermediateFp4),
                        "the activation formats");
      facts.tokensFp4 = tokensFp4;
      facts.intermediateFp4 = intermediateFp4;
      facts.interleave = emu::specInteger(spec, "gate_up_interleave", 0);
      facts.swigluLimit = emu::specNumber(spec, "swiglu_limit", 0.0);
      if (emu::specIsFused(spec)) {
        facts.fused = true;
        facts.compact = emu::specText(spec, "transport") == "compact";
        facts.fixedSlotCapacity = emu::specInteger(spec, "capacity", 0);
      }
    }
  if (!found)
    error = "table " + rt::describeTableKey(table.network, table.ep,
                                            table.workspace) +
            ": no W13 kernel";
  return found;
}

DeviceMemory::~DeviceMemory() {
  for (void *pointer : owned_)
    (void)device_.hipApi().hipFree(pointer);
}

void *DeviceMemory::allocate(size_t bytes, std::string &error) {
  void *pointer = nullptr;
  if (!device_.makeCurrent(error))
    return nullptr;
  rt::hip::Error status =
      device_.hipApi().hipMalloc(&pointer, std::max<size_t>(bytes, 1));
  if (status != rt::hip::kSuccess) {
    error = "hipMalloc(" + std::to_string(bytes) + ") failed: " +
            device_.library().describe(status);
    return nullptr;
  }
  owned_.push_back(pointer);
  return pointer;
}

bool DeviceMemory::upload(void *dst, const void *src, size_t bytes,
                          std::string &error) {
  if (!bytes)
    return true;
  rt::hip::Error status = device_.hipApi().hipMemcpy(
      dst, src, bytes, rt::hip::kMemcpyHostToDevice);
  if (status != rt::hip::kSuccess)
    error = "hipMemcpy failed: " + device_.library().describe(status);
  return status == rt::hip::kSuccess;
}

bool DeviceMemory::download(void *dst, const void *src, size_t bytes,
                            std::string &error) {
  if (!bytes)
    return true;
  rt::hip::Error status = device_.hipApi().hipMemcpy(
      dst, src, bytes, rt::hip::kMemcpyDeviceToHost);
  if (status != rt::hip::kSuccess)
    error = "hipMemcpy failed: " + device_.library().describe(status);
  return status == rt::hip::kSuccess;
}

bool DeviceMemory::fill(void *dst, int value, size_t bytes, std::string &error,
                        rt::hip::Stream stream) {
  rt::hip::Error status =
      device_.hipApi().hipMemsetAsync(dst, value, bytes, stream);
  if (status != rt::hip::kSuccess)
    error = "hipMemsetAsync failed: " + device_.library().describe(status);
  return status == rt::hip::kSuccess;
}

bool setUpRank(Rank &rank, DeviceMemory &mem, const TableFacts &facts,
               uint32_t ep, uint32_t rankIndex, const HostLayerWeights &host,
               const rt::LayerMemory &layerMemory, std::string &error) {
  const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
  const int64_t E = facts.problem.experts;
  const int64_t local = facts.fused || ep > 1 ? E / ep : E;
  const int64_t first = ep > 1 ? int64_t(rankIndex) * local : 0;
  if (host.experts <= 0) {
    error = "no host weights";
    return false;
  }
  // The rank's local experts: one copy of a contiguous slice, or expert by
  // expert when the host set repeats.
  auto slice = [&](const std::vector<uint8_t> &all, int64_t perExpert,
                   void *&device) {
    if (all.size() < size_t(host.experts * perExpert)) {
      error = "host weights hold " + std::to_string(all.size()) +
              " bytes, expected " + std::to_string(host.experts * perExpert);
      return false;
    }
    device = mem.allocate(size_t(local * perExpert), error);
    if (!device)
      return false;
    if (first + local <= host.experts)
      return mem.upload(device, all.data() + first * perExpert,
                        size_t(local * perExpert), error);
    for (int64_t l = 0; l < local; ++l)
      if (!mem.upload(static_cast<uint8_t *>(device) + l * perExpert,
                      all.data() + ((first + l) % host.experts) * perExpert,
                      size_t(perExpert), error))
        return false;
    return true;
  };
  bool ok = slice(host.w13, 2 * I * H / 2, rank.w13) &&
            slice(host.w13Scales, 2 * I * H / 32, rank.w13Scale) &&
            slice(host.w2, H * I / 2, rank.w2) &&
            slice(host.w2Scales, H * I / 32, rank.w2Scale);
  auto whole = [&](const std::vector<uint8_t> &all, void *&device) {
    device = mem.allocate(all.size(), error);
    return device && mem.upload(device, all.data(), all.size(), error);
  };
  if (ok && facts.shared)
    ok = whole(host.sharedW13, rank.sharedW13) &&
         whole(host.sharedW13Scales, rank.sharedW13Scale) &&
         whole(host.sharedW2, rank.sharedW2) &&
         whole(host.sharedW2Scales, rank.sharedW2Scale);
  // Biases: the rank's local experts' rows (FHMoE, EP 1: every row, the
  // shared expert's last).
  const int64_t biasRows = E + (facts.shared ? 1 : 0);
  auto biasSlice = [&](const std::vector<float> &all, int64_t perExpert,
                       void *&device) {
    const int64_t rows = ep > 1 ? local : biasRows;
    if (all.size() < size_t((first + rows) * perExpert)) {
      error = "host biases hold " + std::to_string(all.size()) +
              " values, expected " + std::to_string((first + rows) * perExpert);
      return false;
    }
    device = mem.allocate(size_t(rows * perExpert) * 4, error);
    return device && mem.upload(device, all.data() + first * perExpert,
                                size_t(rows * perExpert) * 4, error);
  };
  if (ok && facts.bias)
    ok = biasSlice(host.w13Bias, 2 * I, rank.w13Bias) &&
         biasSlice(host.w2Bias, H, rank.w2Bias);
  const size_t tokens = layerMemory.maxTokens;
  const size_t K = facts.problem.topK;
  ok = ok && (rank.workspace = mem.allocate(layerMemory.workspaceBytes, error)) &&
       (rank.hidden = mem.allocate(tokens * H * 2, error)) &&
       (rank.ids = mem.allocate(tokens * K * 4, error)) &&
       (rank.weights = mem.allocate(tokens * K * 4, error)) &&
       (rank.out = mem.allocate(tokens * H * 2, error));
  if (ok && layerMemory.peerBytes)
    ok = (rank.peer = mem.allocate(layerMemory.peerBytes, error)) &&
         mem.fill(rank.peer, 0, layerMemory.peerBytes, error);
  if (!ok)
    return false;
  rt::LayerWeights weights;
  weights.w13 = rank.w13;
  weights.w13Scale = rank.w13Scale;
  weights.w2 = rank.w2;
  weights.w2Scale = rank.w2Scale;
  weights.sharedW13 = rank.sharedW13;
  weights.sharedW13Scale = rank.sharedW13Scale;
  weights.sharedW2 = rank.sharedW2;
  weights.sharedW2Scale = rank.sharedW2Scale;
  weights.w13Bias = rank.w13Bias;
  weights.w2Bias = rank.w2Bias;
  return rank.layer->bindWorkspace(rank.workspace, layerMemory.workspaceBytes,
                                   error) &&
         rank.layer->bindWeights(weights, error);
}

bool bindRankPeers(std::vector<Rank> &ranks, std::string &error) {
  std::vector<void *> peers;
  for (const Rank &rank : ranks)
    peers.push_back(rank.peer);
  for (Rank &rank : ranks)
    if (!rank.layer->bindPeers(peers.data(), uint32_t(peers.size()), error))
      return false;
  return true;
}

void generateBiases(uint64_t seed, int64_t rows, int64_t hidden,
                    int64_t intermediate, std::vector<float> &w13,
                    std::vector<float> &w2) {
  const ref::CounterRandom w13Random(seed, 0xB1A5), w2Random(seed, 0xB2A5);
  w13.resize(size_t(rows * 2 * intermediate));
  w2.resize(size_t(rows * hidden));
  for (size_t i = 0; i < w13.size(); ++i)
    w13[i] = float(w13Random.normal(i));
  for (size_t i = 0; i < w2.size(); ++i)
    w2[i] = float(w2Random.normal(i));
}

rt::LayerInputs rankInputs(const Rank &rank, uint32_t m) {
  rt::LayerInputs inputs;
  inputs.m = m;
  inputs.hidden = rank.hidden;
  inputs.topkIds = rank.ids;
  inputs.topkWeights = rank.weights;
  inputs.out = rank.out;
  return inputs;
}

} // namespace moec::harness
