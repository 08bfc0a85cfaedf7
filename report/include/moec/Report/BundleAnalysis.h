//===- BundleAnalysis.h - facts of a bundle for verify, report -*- C++ -*-===//
///
/// \file
/// What `moec verify` checks and `moec report` draws, computed once: each
/// kernel's stage attributes read back with the moe dialect (so defaults
/// the printer leaves out are applied), whether its grid must be resident
/// at once (persistent or handshaking), the workgroups the chip keeps
/// resident for it, and the m range each table row serves by the rules of
/// docs/selection.md.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_REPORT_BUNDLEANALYSIS_H
#define MOEC_REPORT_BUNDLEANALYSIS_H

#include "moec/manifest.h"
#include "moec/target/occupancy.h"
#include "moec/target/target_info.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moec::report {

/// Why a kernel's workgroups must all be resident at once, if they must.
enum class ResidencyNeed {
  None,              ///< an ordinary grid: workgroups may run in waves
  PersistentGemm,    ///< `persist_cu`: a fixed grid looping over M tiles
  PersistentCombine, ///< combine `blocks` > 0: a fixed grid striding tokens
  FusedStage,        ///< `#moe.peer`: a persistent grid that hands off work
                     ///< through counters and waits on producers
};

/// The launch-relevant facts of one kernel, from its manifest attributes.
struct KernelFacts {
  /// From `problem` (0 when the kernel has none).
  int64_t hidden = 0, intermediate = 0, experts = 0, topK = 0, ep = 1;
  /// The GEMM tile's M, or the sort's m_tile (0 otherwise).
  int64_t tileM = 0;
  ResidencyNeed residency = ResidencyNeed::None;
  /// A fused (`#moe.peer`) stage: its transport and token capacity.
  bool fused = false, compact = false;
  int64_t maxTokens = 0;
  /// Workgroups that others wait on (the producers of a fused stage 1).
  int64_t producers = 0;
  /// "fused stage 1: 512 workgroups, 32 producers", for messages.
  std::string residencyDescription;
};

/// Reads KernelFacts from kernels' attribute text with the moe dialect.
class KernelFactsReader {
public:
  KernelFactsReader();
  ~KernelFactsReader();
  /// False with a one-line `error` naming the kernel and attribute when an
  /// attribute does not parse.
  bool read(const rt::KernelInfo &kernel, KernelFacts &facts,
            std::string &error);

private:
  struct Context;
  std::unique_ptr<Context> context_;
};

/// KernelFacts of every kernel of `manifest`, in kernel order.
bool readKernelFacts(const rt::Manifest &manifest,
                     std::vector<KernelFacts> &facts, std::string &error);

/// Workgroups of `kernel` that `chip` keeps resident at once: the occupancy
/// model's workgroups per CU times the CUs (the emulator's
/// residentWorkgroupCap over the bundle's chip). 0 when it cannot launch.
uint64_t residentWorkgroupBudget(const target::TargetInfo &chip,
                                 const rt::KernelInfo &kernel,
                                 target::OccupancyEstimate *estimate = nullptr);

/// The m values one row serves, derived from the rows alone
/// (docs/selection.md, "The m ranges each row serves").
struct ServedRange {
  uint32_t mLow = 0, mHigh = 0;
  /// The last row of a table with above_max `largest`: also every m > mHigh,
  /// as a flagged fallback.
  bool aboveMax = false;
};
std::vector<ServedRange> servedRanges(const rt::SelectionTable &table);

/// The smallest max_tokens of the fused kernels of configuration `config`
/// (the most tokens per rank it can take), or 0 when it has none.
int64_t fusedCapacity(const rt::Manifest &manifest,
                      const std::vector<KernelFacts> &facts, uint32_t config);

/// The chip a bundle targets; nullptr with a one-line `error` naming
/// `bundlePath` when moec has no facts for it.
const target::TargetInfo *bundleChip(const rt::Manifest &manifest,
                                     const std::string &bundlePath,
                                     std::string &error);

/// "flash ep4 ws1024" for table `index` of `manifest`.
std::string tableLabel(const rt::Manifest &manifest, size_t index);

} // namespace moec::report

#endif // MOEC_REPORT_BUNDLEANALYSIS_H
