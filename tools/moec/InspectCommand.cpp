//===- InspectCommand.cpp - moec inspect BUNDLE [--json] [--isa] ----------===//

#include "CommandSupport.h"
#include "Commands.h"
#include "IsaSummary.h"

#include "moec/bundle.h"
#include "moec/kernel_occupancy.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <iostream>

namespace {

struct InspectArgs {
  std::string bundle;
  bool json = false;
  bool isa = false;
};

/// The occupancy of `kernel` on the bundle's chip; Invalid when moec has no
/// facts for that chip.
moec::target::OccupancyEstimate occupancyOf(const moec::target::TargetInfo *chip,
                                            const moec::rt::KernelInfo &kernel) {
  if (!chip) {
    moec::target::OccupancyEstimate unknown;
    unknown.problem = "no facts for this chip";
    return unknown;
  }
  return moec::rt::estimateKernelOccupancy(*chip, kernel);
}

/// The --isa summary of `kernel`, or an error naming the kernel.
llvm::Expected<moec::cli::IsaSummary>
isaOf(const moec::rt::Bundle &bundle, const moec::rt::KernelInfo &kernel) {
  moec::rt::CodeObjectView view;
  std::string error;
  if (bundle.codeObjectEncoding(kernel.codeObject) ==
      moec::rt::bundle_format::kEncodingMlirBytecode)
    return llvm::createStringError("kernel '" + kernel.name +
                                   "': its code object is kernel IR");
  if (!bundle.codeObject(kernel.codeObject, view, error))
    return llvm::createStringError("kernel '" + kernel.name + "': " + error);
  auto summary = moec::cli::summarizeKernelIsa(
      llvm::ArrayRef<uint8_t>(view.data, view.size), kernel.symbol,
      bundle.manifest().target.arch);
  if (!summary)
    return llvm::createStringError("kernel '" + kernel.name + "': " +
                                   llvm::toString(summary.takeError()));
  return summary;
}

/// Per scaled MFMA of one wave: `bytes` loaded by the wave per iteration.
double perMfma(uint64_t bytes, unsigned mfmas) {
  return mfmas ? static_cast<double>(bytes) / mfmas : 0.0;
}

nlohmann::json isaJson(const moec::cli::IsaSummary &s, unsigned waveSize) {
  auto widths = [](const std::map<unsigned, unsigned> &byWidth) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto &[width, count] : byWidth)
      out[std::to_string(width)] = count;
    return out;
  };
  nlohmann::json out = {{"instructions", s.instructions},
                        {"undecoded", s.undecoded},
                        {"scaled_mfma", s.scaledMfma},
                        {"loops", s.loops}};
  if (!s.hasLoop) {
    out["main_loop"] = nullptr;
    return out;
  }
  const moec::cli::LoopCounts &l = s.loop;
  nlohmann::json byResource = nlohmann::json::object();
  for (const auto &[resource, byWidth] : l.globalLoadsByResource)
    byResource[resource] = widths(byWidth);
  out["main_loop"] = {
      {"begin", s.loopBegin},
      {"end", s.loopEnd},
      {"instructions", l.instructions},
      {"scaled_mfma", l.scaledMfma},
      {"k_steps", l.kSteps},
      {"mfma", l.mfmaMnemonic},
      {"other_mfma", l.otherMfma},
      {"global_loads", widths(l.globalLoads)},
      {"global_loads_by_resource", byResource},
      {"lds_dma_loads", widths(l.ldsDmaLoads)},
      {"lds_reads", widths(l.ldsReads)},
      {"lds_writes", widths(l.ldsWrites)},
      {"global_stores", widths(l.globalStores)},
      {"scalar_loads", l.scalarLoads},
      {"waits", l.waits},
      {"barriers", l.barriers},
      {"valu", l.valu},
      {"salu", l.salu},
      {"tile_bytes_per_mfma",
       perMfma(l.tileBytesPerWave(waveSize), l.scaledMfma)},
      {"narrow_bytes_per_mfma",
       perMfma(l.narrowBytesPerWave(waveSize), l.scaledMfma)}};
  return out;
}

void printIsa(const moec::rt::KernelInfo &k, const moec::cli::IsaSummary &s,
              unsigned waveSize) {
  std::printf("%s: %u instructions, %u scaled MFMA, %u loops", k.name.c_str(),
              s.instructions, s.scaledMfma, s.loops);
  if (s.undecoded)
    std::printf(", %u words not decoded", s.undecoded);
  if (!s.hasLoop) {
    std::printf("; no loop\n");
    return;
  }
  const moec::cli::LoopCounts &l = s.loop;
  // A GEMM's main loop is its K loop: one iteration per K step of the tile.
  std::printf("\n  main loop 0x%llx-0x%llx, per iteration: %u instructions, "
              "%u scaled MFMA%s%s",
              static_cast<unsigned long long>(s.loopBegin),
              static_cast<unsigned long long>(s.loopEnd), l.instructions,
              l.scaledMfma, l.mfmaMnemonic.empty() ? "" : " ",
              l.mfmaMnemonic.c_str());
  if (l.scaledMfma)
    std::printf("; %u K step%s, %u scaled MFMA per K step", l.kSteps,
                l.kSteps == 1 ? "" : "s (unrolled)", l.scaledMfma / l.kSteps);
  std::printf("\n");
  std::printf("  global loads %s; LDS DMA %s; LDS reads %s; LDS writes %s; "
              "global stores %s\n",
              moec::cli::formatWidths(l.globalLoads).c_str(),
              moec::cli::formatWidths(l.ldsDmaLoads).c_str(),
              moec::cli::formatWidths(l.ldsReads).c_str(),
              moec::cli::formatWidths(l.ldsWrites).c_str(),
              moec::cli::formatWidths(l.globalStores).c_str());
  if (!l.globalLoadsByResource.empty()) {
    std::printf("  global loads by buffer resource:");
    for (const auto &[resource, byWidth] : l.globalLoadsByResource)
      std::printf(" %s %s;", resource.c_str(),
                  moec::cli::formatWidths(byWidth).c_str());
    std::printf("\n");
  }
  std::printf("  s_waitcnt %u, s_barrier %u, VALU %u, SALU %u, scalar loads %u\n",
              l.waits, l.barriers, l.valu, l.salu, l.scalarLoads);
  if (l.scaledMfma)
    std::printf("  bytes per scaled MFMA (one wave): %.1f in 16-byte loads, "
                "%.1f in narrower loads (scales)\n",
                perMfma(l.tileBytesPerWave(waveSize), l.scaledMfma),
                perMfma(l.narrowBytesPerWave(waveSize), l.scaledMfma));
}

/// The quantised activation format of a kernel: the A rows a GEMM stage
/// reads (argument `a`) or the token rows the quant stage writes (`out`),
/// from the element type its ABI records: "fp8" (A8W4), "fp4" (MXFP4,
/// A4W4); "-" for the stages without one.
const char *activationFormatOf(const moec::rt::KernelInfo &k) {
  using moec::abi::Stage;
  const char *argName = k.stage == Stage::Quant ? "out"
                        : k.stage == Stage::W13 || k.stage == Stage::W2
                            ? "a"
                            : nullptr;
  if (!argName)
    return "-";
  for (const moec::rt::KernelArgInfo &arg : k.abi) {
    if (arg.name != argName)
      continue;
    if (arg.dtype == "f8E4M3FN")
      return "fp8";
    if (arg.dtype == "f4E2M1FN x2")
      return "fp4";
    if (arg.dtype == "bf16")
      return "bf16";
  }
  return "-";
}

/// The activation a kernel's epilogue applies between its gate and up
/// GEMMs, from the stage op's attributes: "silu", "silu<=L" (SwiGLU
/// clamped at L, DeepSeek V4), "gptoss<=L" (GPT-OSS SwiGLU), "situv2(B,LB)"
/// (Kimi K3's SiTUv2 with its betas); "-" for a kernel without one.
std::string activationOf(const moec::rt::KernelInfo &k) {
  auto attribute = [&](const char *name) -> const std::string * {
    for (const auto &[key, value] : k.attributes)
      if (key == name)
        return &value;
    return nullptr;
  };
  // Float attributes print as "1.000000e+01 : f32"; strtod stops at the
  // type.
  auto number = [&](const char *name) {
    const std::string *value = attribute(name);
    return value ? std::strtod(value->c_str(), nullptr) : 0.0;
  };
  auto text = [](double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%g", v);
    return std::string(buffer);
  };
  const std::string *limit = attribute("swiglu_limit");
  const double clamp = number("swiglu_limit");
  if (attribute("situ_v2"))
    return "situv2(" + text(number("situ_beta")) + "," +
           text(number("situ_linear_beta")) + ")" +
           (clamp > 0 ? "<=" + text(clamp) : "");
  if (attribute("gpt_oss_swiglu"))
    return "gptoss<=" + text(clamp);
  if (!limit)
    return "-";
  return clamp > 0 ? "silu<=" + text(clamp) : "silu";
}

/// The hazards the compiler's ISA gate repaired, kernel by kernel
/// (docs/isa-verification.md, "Repair").
void printIsaRepairs(const moec::rt::Manifest &manifest) {
  size_t repairs = 0, kernels = 0;
  for (const moec::rt::KernelInfo &k : manifest.kernels) {
    repairs += k.isaRepairs.size();
    kernels += !k.isaRepairs.empty();
  }
  if (repairs == 0) {
    std::printf("\nISA gate repairs: none\n");
    return;
  }
  std::printf("\nISA gate repairs: %zu hazard(s) in %zu kernel(s), s_nops "
              "inserted before the instruction (addresses of LLVM's code)\n",
              repairs, kernels);
  for (const moec::rt::KernelInfo &k : manifest.kernels)
    for (const moec::rt::IsaRepairInfo &r : k.isaRepairs)
      std::printf("  %s: 0x%x: +%u wait state%s (%s)\n", k.name.c_str(),
                  r.address, r.waitStates, r.waitStates == 1 ? "" : "s",
                  r.rule.c_str());
}

int runInspect(const InspectArgs &args) {
  std::string error;
  auto bundle = moec::cli::openBundleOrReport(args.bundle);
  if (!bundle)
    return moec::cli::kBadInput;
  const moec::rt::Manifest &manifest = bundle->manifest();
  const moec::target::TargetInfo *chip = moec::rt::partOf(manifest.target);
  if (args.json) {
    // Each kernel's resources exactly as the manifest records them, plus
    // what inspect derives from them.
    const nlohmann::json stored = nlohmann::json::parse(
        moec::rt::serializeManifest(manifest))["kernels"];
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < manifest.kernels.size(); ++i) {
      const moec::rt::KernelInfo &k = manifest.kernels[i];
      moec::target::OccupancyEstimate occ = occupancyOf(chip, k);
      nlohmann::json entry = stored[i]["resources"];
      entry.update({{"name", k.name},
                    {"symbol", k.symbol},
                    {"stage", k.stage},
                    {"activation_format", activationFormatOf(k)},
                    {"activation", activationOf(k)},
                    {"arch_vgpr", moec::target::architectedVgprCount(
                                      k.resources.vgpr, k.resources.agpr)},
                    {"workgroup_size", k.launch.workgroupSize[0]},
                    {"waves_per_simd", occ.wavesPerSimd},
                    {"occupancy_limiter",
                     moec::target::occupancyLimiterName(occ.limiter)},
                    {"resource_ceiling_percent", occ.resourceCeilingPercent}});
      // The hazards the compiler's ISA gate repaired (empty: none fired).
      entry["isa_repairs"] = stored[i].value("isa_repairs", nlohmann::json::array());
      if (args.isa) {
        auto summary = isaOf(*bundle, k);
        if (!summary) {
          std::fprintf(stderr, "moec: %s: %s\n", args.bundle.c_str(),
                       llvm::toString(summary.takeError()).c_str());
          return moec::cli::kCheckFailed;
        }
        entry["isa"] = isaJson(*summary, k.resources.wavefrontSize);
      }
      out.push_back(entry);
    }
    std::cout << out.dump(2) << "\n";
    return moec::cli::kSuccess;
  }
  uint32_t irCount = 0;
  for (uint32_t i = 0; i < bundle->codeObjectCount(); ++i)
    irCount += bundle->codeObjectEncoding(i) ==
               moec::rt::bundle_format::kEncodingMlirBytecode;
  // The part: the arch with its product and CU count (MI350P: 128).
  const std::string part =
      manifest.target.arch +
      (chip ? std::string(" (") + chip->product + ", " +
                  std::to_string(chip->computeUnits) + " CUs)"
            : std::string());
  std::printf("%s: %zu kernels, %u code objects, %u kernel IR, target %s, "
              "%llu bytes\n",
              args.bundle.c_str(), manifest.kernels.size(),
              bundle->codeObjectCount() - irCount, irCount, part.c_str(),
              static_cast<unsigned long long>(bundle->fileSize()));
  int nameWidth = 6;
  for (const moec::rt::KernelInfo &k : manifest.kernels)
    nameWidth = std::max(nameWidth, static_cast<int>(k.name.size()));
  std::printf("%-*s %7s %4s %-13s %4s %4s %4s %7s %7s %6s %4s %10s %5s\n",
              nameWidth, "kernel", "stage", "act", "activation", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "spills",
              "wg", "waves/SIMD", "occ%");
  for (const moec::rt::KernelInfo &k : manifest.kernels) {
    moec::target::OccupancyEstimate occ = occupancyOf(chip, k);
    const moec::rt::KernelResources &r = k.resources;
    char spills[16], waves[24];
    std::snprintf(spills, sizeof(spills), "%u/%u", r.vgprSpill, r.sgprSpill);
    std::snprintf(waves, sizeof(waves), "%u (%s)", occ.wavesPerSimd,
                  moec::target::occupancyLimiterName(occ.limiter));
    // `vgpr` is the unified count (.vgpr_count, AGPRs included): the VGPR
    // column is its architected part, so VGPR + AGPR is what is allocated.
    std::printf("%-*s %7s %4s %-13s %4u %4u %4u %7u %7u %6s %4u %10s %5.1f\n",
                nameWidth, k.name.c_str(), moec::rt::stageName(k.stage),
                activationFormatOf(k), activationOf(k).c_str(),
                moec::target::architectedVgprCount(r.vgpr, r.agpr), r.agpr, r.sgpr,
                r.ldsBytes, r.privateSegmentBytes, spills,
                k.launch.workgroupSize[0], waves, occ.resourceCeilingPercent);
  }
  printIsaRepairs(manifest);
  if (!args.isa)
    return moec::cli::kSuccess;
  std::printf("\nmain loops (from each kernel's disassembly; counts are "
              "per wave)\n");
  for (const moec::rt::KernelInfo &k : manifest.kernels) {
    auto summary = isaOf(*bundle, k);
    if (!summary) {
      std::fflush(stdout);
      std::fprintf(stderr, "moec: %s: %s\n", args.bundle.c_str(),
                   llvm::toString(summary.takeError()).c_str());
      return moec::cli::kCheckFailed;
    }
    printIsa(k, *summary, k.resources.wavefrontSize);
  }
  return moec::cli::kSuccess;
}

} // namespace

void addInspectCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App *cmd = app.add_subcommand(
      "inspect", "Registers, LDS, scratch, spills and occupancy of every kernel");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->add_flag("--isa", args->isa,
                "summarise each kernel's main loop from its disassembly "
                "(MFMAs, loads by width, waits, barriers per iteration)");
  cmd->callback([args, &exitStatus] { exitStatus = runInspect(*args); });
}
