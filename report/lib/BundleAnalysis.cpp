//===- BundleAnalysis.cpp - facts of a bundle for verify and report -------===//

#include "moec/Report/BundleAnalysis.h"

#include "moec/Compiler/Registration.h"
#include "moec/Dialect/Moe/MoeDialect.h"
#include "moec/kernel_occupancy.h"
#include "moec/selection.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>

namespace moec::report {

struct KernelFactsReader::Context {
  mlir::MLIRContext mlir;
  explicit Context(const mlir::DialectRegistry &registry) : mlir(registry) {
    mlir.loadAllAvailableDialects();
  }
};

namespace {

mlir::DialectRegistry moecRegistry() {
  mlir::DialectRegistry registry;
  registerMoecDialects(registry);
  return registry;
}

} // namespace

KernelFactsReader::KernelFactsReader()
    : context_(std::make_unique<Context>(moecRegistry())) {}

KernelFactsReader::~KernelFactsReader() = default;

bool KernelFactsReader::read(const rt::KernelInfo &kernel, KernelFacts &facts,
                             std::string &error) {
  facts = KernelFacts();
  // A parse failure is reported as one line below, not as MLIR diagnostics.
  mlir::ScopedDiagnosticHandler quiet(&context_->mlir,
                                      [](mlir::Diagnostic &) { return mlir::success(); });
  for (const auto &[name, text] : kernel.attributes) {
    if (name != "problem" && name != "tile" && name != "peer" &&
        name != "m_tile")
      continue;
    mlir::Attribute attr = mlir::parseAttribute(text, &context_->mlir);
    if (!attr) {
      error = "kernel " + kernel.name + ": attribute " + name +
              " does not parse: " + text;
      return false;
    }
    if (auto problem = mlir::dyn_cast<moe::ProblemAttr>(attr)) {
      facts.hidden = problem.getHidden();
      facts.intermediate = problem.getIntermediate();
      facts.experts = problem.getExperts();
      facts.topK = problem.getTopK();
      facts.ep = problem.getEp();
    } else if (auto tile = mlir::dyn_cast<moe::TileAttr>(attr)) {
      facts.tileM = tile.getM();
      if (tile.getPersistCu() > 0) {
        facts.residency = ResidencyNeed::PersistentGemm;
        facts.residencyDescription =
            "persistent GEMM (persist_cu " + std::to_string(tile.getPersistCu()) +
            ")";
      }
    } else if (auto combine = mlir::dyn_cast<moe::CombineTileAttr>(attr)) {
      if (combine.getBlocks() > 0) {
        facts.residency = ResidencyNeed::PersistentCombine;
        facts.residencyDescription =
            "persistent combine (" + std::to_string(combine.getBlocks()) +
            " blocks)";
      }
    } else if (auto peer = mlir::dyn_cast<moe::PeerTransportAttr>(attr)) {
      facts.fused = true;
      facts.compact = peer.getTransport() == moe::PeerKind::compact;
      facts.maxTokens = peer.getMaxTokens();
      const bool dispatchOnly = peer.getDispatch() == moe::PeerDispatch::only;
      const bool waitsForKernel = peer.getDispatch() == moe::PeerDispatch::none;
      // Stage 1's first dispatch_cus arrivals produce and every workgroup
      // waits for them; a dispatch-only kernel is all producers; stage 2
      // and the W13 kernel behind a dispatch kernel produce nothing.
      facts.producers = kernel.stage == rt::Stage::W13 && !waitsForKernel
                            ? (dispatchOnly ? peer.getWorkgroups()
                                            : peer.getDispatchCus())
                            : 0;
      facts.residency = ResidencyNeed::FusedStage;
      facts.residencyDescription =
          std::string("fused ") +
          (kernel.stage == rt::Stage::W13 ? (dispatchOnly ? "dispatch kernel"
                                                 : "stage 1")
                                 : "stage 2") +
          " (" + std::to_string(peer.getWorkgroups()) + " workgroups" +
          (facts.producers > 0
               ? ", " + std::to_string(facts.producers) + " producers"
               : std::string()) +
          ")";
    } else if (auto integer = mlir::dyn_cast<mlir::IntegerAttr>(attr)) {
      facts.tileM = integer.getInt(); // the sort's m_tile
    }
  }
  return true;
}

bool readKernelFacts(const rt::Manifest &manifest,
                     std::vector<KernelFacts> &facts, std::string &error) {
  facts.assign(manifest.kernels.size(), KernelFacts());
  KernelFactsReader reader;
  for (size_t k = 0; k < manifest.kernels.size(); ++k)
    if (!reader.read(manifest.kernels[k], facts[k], error))
      return false;
  return true;
}

uint64_t residentWorkgroupBudget(const target::TargetInfo &chip,
                                 const rt::KernelInfo &kernel,
                                 target::OccupancyEstimate *estimate) {
  const target::OccupancyEstimate occupancy =
      rt::estimateKernelOccupancy(chip, kernel);
  if (estimate)
    *estimate = occupancy;
  if (occupancy.limiter == target::OccupancyLimiter::Invalid)
    return 0;
  return uint64_t(occupancy.workgroupsPerCu) * chip.computeUnits;
}

std::vector<ServedRange> servedRanges(const rt::SelectionTable &table) {
  std::vector<ServedRange> ranges(table.rows.size());
  for (size_t i = 0; i < table.rows.size(); ++i) {
    ServedRange &range = ranges[i];
    range.mLow = i == 0 ? 0 : ranges[i - 1].mHigh + 1;
    if (i + 1 < table.rows.size()) {
      // The midpoint between two rows goes to the larger one.
      const uint64_t sum =
          uint64_t(table.rows[i].m) + uint64_t(table.rows[i + 1].m) - 1;
      range.mHigh = static_cast<uint32_t>(sum / 2);
    } else {
      range.mHigh = table.rows[i].m;
      range.aboveMax = table.aboveMax == rt::AboveMaxPolicy::Largest;
    }
  }
  return ranges;
}

int64_t fusedCapacity(const rt::Manifest &manifest,
                      const std::vector<KernelFacts> &facts, uint32_t config) {
  int64_t capacity = 0;
  for (uint32_t k : manifest.configs[config].kernels)
    if (facts[k].fused && facts[k].maxTokens > 0)
      capacity = capacity == 0 ? facts[k].maxTokens
                               : std::min(capacity, facts[k].maxTokens);
  return capacity;
}

const target::TargetInfo *bundleChip(const rt::Manifest &manifest,
                                     const std::string &bundlePath,
                                     std::string &error) {
  const target::TargetInfo *chip = rt::partOf(manifest.target);
  if (!chip)
    error = bundlePath + ": target.arch '" + manifest.target.arch + "' with " +
            std::to_string(manifest.target.computeUnits) +
            " CUs is not a part moec knows (" + target::knownTargetNames() + ")";
  return chip;
}

std::string tableLabel(const rt::Manifest &manifest, size_t index) {
  const rt::SelectionTable &table = manifest.selection[index];
  return rt::describeTableKey(table.network, table.ep, table.workspace);
}

} // namespace moec::report
