//===- VerifyCommand.cpp - moec verify BUNDLE -----------------------------===//
//
// Re-checks a bundle the way an engine relies on it (docs/cli.md, "moec
// verify"):
//  - every kernel against the chip it targets: no VGPR/SGPR spills, no
//    scratch, LDS within the chip's LDS per CU, the chip's wave size, a
//    kernel that can be resident (a launch wider than the code object
//    allows is refused when the bundle is opened);
//  - every table and row through the runtime's public C API (the selector an
//    engine calls): a request for the table's workspace class resolves to
//    it, each row's m range (derived from the rows by the documented rule)
//    selects that row and its configuration at both ends and at its own m,
//    the m above the last row follows the table's above_max policy, and the
//    configuration's kernels are in the bundle with intact code objects;
//  - fused kernels serve no m above their max_tokens and match the table's
//    expert-parallel size and transport;
//  - persistent and handshaking grids (fused stages, persistent combine,
//    persistent GEMMs) fit the workgroups the chip keeps resident at once,
//    at both ends of every row's m range.
// With --isa, also every kernel's machine code through the ISA verifier
// (docs/isa-verification.md): waits, hazards, resources and the kernel ABI
// against the manifest; a plain code object (an ELF file) gets the machine
// code checks alone.
// One line per problem naming the table, row and kernel; exit 1 when there
// is any, 2 on bad input.
//
//===----------------------------------------------------------------------===//

#include "CommandSupport.h"
#include "Commands.h"

#include "llvm/ADT/StringExtras.h"

#include "moec/Isa/Decoder.h"
#include "moec/Isa/Repair.h"
#include "moec/Isa/Verify.h"
#include "moec/Report/BundleAnalysis.h"
#include "moec/bundle.h"
#include "moec/kernel_occupancy.h"
#include "moec/moec_runtime.h"
#include "moec/target/target_info.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <set>

namespace {

using namespace moec;
using namespace moec::cli;
using namespace moec::report;

struct VerifyArgs {
  std::string bundle;
  std::string overrides;
  bool allowSpills = false;
  bool isa = false;
  /// --repair OUT: the repaired code object of an assembly input.
  std::string repairOutput;
};

struct CBundleCloser {
  void operator()(moec_bundle_t *bundle) const { moec_bundle_close(bundle); }
};
using CBundle = std::unique_ptr<moec_bundle_t, CBundleCloser>;

class Verifier {
public:
  Verifier(const rt::Manifest &manifest, const target::TargetInfo &chip,
           moec_bundle_t *api, bool allowSpills, bool isa)
      : manifest_(manifest), chip_(chip), api_(api), allowSpills_(allowSpills),
        isa_(isa) {}

  /// False on bad input (an attribute that does not parse).
  bool run(std::string &error) {
    if (!readKernelFacts(manifest_, facts_, error))
      return false;
    noteKernelUsers();
    for (size_t k = 0; k < manifest_.kernels.size(); ++k)
      checkKernel(uint32_t(k));
    for (size_t t = 0; t < manifest_.selection.size(); ++t)
      checkTable(t);
    return true;
  }

  int problems() const { return problems_; }
  size_t rowCount() const {
    size_t rows = 0;
    for (const rt::SelectionTable &table : manifest_.selection)
      rows += table.rows.size();
    return rows;
  }
  size_t residencyChecks() const { return residencyChecks_; }
  size_t isaInstructions() const { return isaInstructions_; }

private:
  void problem(const std::string &where, const std::string &what) {
    std::cout << where << ": " << what << "\n";
    ++problems_;
  }

  std::string rowLabel(size_t t, size_t r) const {
    const rt::SelectionTable &table = manifest_.selection[t];
    const rt::SelectionRow &row = table.rows[r];
    std::string config = row.config < manifest_.configs.size()
                             ? manifest_.configs[row.config].id
                             : "#" + std::to_string(row.config);
    return tableLabel(manifest_, t) + " row " + std::to_string(r) + " (m " +
           std::to_string(row.m) + ", config " + config + ")";
  }

  /// The first table row whose configuration launches each kernel, so a
  /// kernel's own problems name where it is used.
  void noteKernelUsers() {
    firstUser_.assign(manifest_.kernels.size(), "");
    for (size_t t = 0; t < manifest_.selection.size(); ++t)
      for (size_t r = 0; r < manifest_.selection[t].rows.size(); ++r) {
        uint32_t c = manifest_.selection[t].rows[r].config;
        if (c >= manifest_.configs.size())
          continue;
        for (uint32_t k : manifest_.configs[c].kernels)
          if (k < firstUser_.size() && firstUser_[k].empty())
            firstUser_[k] = rowLabel(t, r);
      }
  }

  void checkKernel(uint32_t k) {
    const rt::KernelInfo &kernel = manifest_.kernels[k];
    const rt::KernelResources &r = kernel.resources;
    const std::string where =
        (firstUser_[k].empty() ? std::string("unused") : firstUser_[k]) +
        " kernel " + kernel.name;
    if (!allowSpills_ && (r.vgprSpill > 0 || r.sgprSpill > 0))
      problem(where, "spills " + std::to_string(r.vgprSpill) + " VGPRs and " +
                         std::to_string(r.sgprSpill) + " SGPRs");
    if (!allowSpills_ && r.privateSegmentBytes > 0)
      problem(where, "uses " + std::to_string(r.privateSegmentBytes) +
                         " bytes of scratch");
    if (r.ldsBytes > chip_.ldsBytesPerCu)
      problem(where, "uses " + std::to_string(r.ldsBytes) + " bytes of LDS; " +
                         chip_.arch + " has " +
                         std::to_string(chip_.ldsBytesPerCu) + " per CU");
    if (r.wavefrontSize != chip_.wavefrontSize)
      problem(where, "was built for wave" + std::to_string(r.wavefrontSize) +
                         "; " + chip_.arch + " runs wave" +
                         std::to_string(chip_.wavefrontSize));
    target::OccupancyEstimate occupancy =
        rt::estimateKernelOccupancy(chip_, kernel);
    if (occupancy.limiter == target::OccupancyLimiter::Invalid)
      problem(where, std::string("cannot be resident: ") +
                         (occupancy.problem ? occupancy.problem : "unknown"));
    // The code object the configuration launches, read through the C API
    // (which verifies its checksum), must be an ELF image.
    moec_kernel_info_t info;
    const void *data = nullptr;
    size_t size = 0;
    if (moec_bundle_kernel_info(api_, k, &info) != MOEC_STATUS_OK ||
        moec_bundle_code_object(api_, info.code_object, &data, &size) !=
            MOEC_STATUS_OK)
      problem(where, std::string("its code object cannot be read: ") +
                         moec_last_error_message());
    else if (size < 4 || std::memcmp(data, "\x7f" "ELF", 4) != 0)
      problem(where, "its code object is not an ELF image");
    else if (std::strcmp(info.symbol, kernel.symbol.c_str()) != 0)
      problem(where, "the C API reports symbol " + std::string(info.symbol));
    else if (isa_)
      checkIsa(where, kernel,
               llvm::ArrayRef(static_cast<const uint8_t *>(data), size));
  }

  /// The ISA verifier on the kernel's code object, with the arguments the
  /// runtime packs from the manifest and its workgroup size.
  void checkIsa(const std::string &where, const rt::KernelInfo &kernel,
                llvm::ArrayRef<uint8_t> object) {
    isacheck::KernelExpectation expected;
    for (const rt::KernelArgInfo &arg : kernel.abi)
      expected.args.push_back(arg.kind);
    const auto &wg = kernel.launch.workgroupSize;
    expected.workgroupSize = wg[0] * wg[1] * wg[2];
    llvm::Expected<isacheck::KernelVerification> checked =
        isacheck::verifyKernel(object, kernel.symbol, chip_, expected);
    if (!checked) {
      problem(where, "its code object cannot be decoded: " +
                         llvm::toString(checked.takeError()));
      return;
    }
    isaInstructions_ += checked->instructions;
    for (const isacheck::Finding &finding : checked->findings)
      problem(where, (finding.atInstruction() ? "0x" + llvm::utohexstr(finding.address,
                                                               true) + ": "
                                      : std::string()) +
                         finding.rule + ": " + finding.message);
  }

  /// One public-API selection; `status` is the C status.
  struct Probe {
    moec_status_t status = MOEC_STATUS_OK;
    moec_selection_t selection{};
  };
  Probe select(moec_table_t table, uint32_t m) const {
    Probe probe;
    probe.status = moec_bundle_select(api_, table, m, &probe.selection);
    return probe;
  }

  int64_t fusedCapacity(uint32_t c) const {
    return report::fusedCapacity(manifest_, facts_, c);
  }


  void checkTable(size_t t) {
    const rt::SelectionTable &table = manifest_.selection[t];
    const std::string label = tableLabel(manifest_, t);
    moec_table_t handle{};
    if (moec_bundle_resolve_table(api_, table.network.c_str(), table.ep,
                                  table.workspace,
                                  &handle) != MOEC_STATUS_OK) {
      problem(label, std::string("a request for its own key does not "
                                 "resolve: ") +
                         moec_last_error_message());
      return;
    }
    if (handle.index != t) {
      problem(label, "a request for its own key resolves to " +
                         (handle.index < manifest_.selection.size()
                              ? tableLabel(manifest_, handle.index)
                              : "table #" + std::to_string(handle.index)) +
                         ", so the table is unreachable");
      return;
    }
    const std::vector<ServedRange> ranges = servedRanges(table);
    for (size_t r = 0; r < table.rows.size(); ++r)
      checkRow(t, handle, r, ranges[r]);
    checkAboveMax(t, handle);
  }

  void checkRow(size_t t, moec_table_t handle, size_t r,
                const ServedRange &range) {
    const rt::SelectionTable &table = manifest_.selection[t];
    const rt::SelectionRow &row = table.rows[r];
    const std::string where = rowLabel(t, r);
    // Reachability: the ends of the row's range and its own m select it.
    std::set<uint32_t> probes = {range.mLow, row.m, range.mHigh};
    for (uint32_t m : probes) {
      Probe probe = select(handle, m);
      if (probe.status != MOEC_STATUS_OK) {
        problem(where, "m " + std::to_string(m) +
                           " (in the range it serves, " +
                           std::to_string(range.mLow) + ".." +
                           std::to_string(range.mHigh) +
                           ") is refused by the selector, so the row is "
                           "unreachable there: " +
                           moec_last_error_message());
        continue;
      }
      const moec_selection_t &s = probe.selection;
      if (s.row != r) {
        problem(where, "m " + std::to_string(m) + " selects row " +
                           std::to_string(s.row) + " (m " +
                           std::to_string(s.row_m) +
                           "), so the row is shadowed there");
        continue;
      }
      if (s.config != row.config)
        problem(where, "m " + std::to_string(m) + " resolves to configuration " +
                           std::to_string(s.config) + ", the row names " +
                           std::to_string(row.config));
      const std::vector<uint32_t> &kernels =
          manifest_.configs[row.config].kernels;
      if (s.kernel_count != kernels.size() ||
          !std::equal(kernels.begin(), kernels.end(), s.kernels))
        problem(where, "m " + std::to_string(m) +
                           " launches other kernels than the configuration "
                           "compiled into the bundle");
      if (bool(s.exact) != (m == row.m) || s.fallback)
        problem(where, "m " + std::to_string(m) + " is flagged " +
                           (s.fallback ? "a fallback" : "") +
                           (s.exact ? "exact" : "inexact") +
                           " by the selector");
    }
    // The configuration against the table's key.
    for (uint32_t k : manifest_.configs[row.config].kernels) {
      const KernelFacts &f = facts_[k];
      const std::string kwhere =
          where + " kernel " + manifest_.kernels[k].name;
      if (table.family == rt::KernelFamily::MegaMoe && f.experts > 0 &&
          f.ep != int64_t(table.ep))
        problem(kwhere, "is built for ep " + std::to_string(f.ep) +
                            ", the table serves ep " +
                            std::to_string(table.ep));
      if (f.fused && table.transport != rt::Transport::None &&
          f.compact != (table.transport == rt::Transport::Compact))
        problem(kwhere, std::string("uses the ") +
                            (f.compact ? "compact" : "fixed-slot") +
                            " transport, the table is " +
                            rt::transportName(table.transport));
      if (f.fused && f.maxTokens > 0 &&
          (int64_t(range.mHigh) > f.maxTokens || int64_t(row.m) > f.maxTokens))
        problem(kwhere, "serves m up to " + std::to_string(range.mHigh) +
                            " but holds max_tokens " +
                            std::to_string(f.maxTokens) +
                            " per rank (its buffers would overflow)");
      checkResidency(kwhere, k, range, table.workspace);
    }
  }

  void checkAboveMax(size_t t, moec_table_t handle) {
    const rt::SelectionTable &table = manifest_.selection[t];
    const rt::SelectionRow &last = table.rows.back();
    if (last.m == UINT32_MAX)
      return;
    const std::string where = rowLabel(t, table.rows.size() - 1);
    const int64_t capacity = fusedCapacity(last.config);
    // Just above the last row, and just above the fused kernels' capacity
    // when the fallback would otherwise reach it.
    std::set<uint32_t> probes = {last.m + 1};
    if (capacity > 0 && capacity < int64_t(UINT32_MAX))
      probes.insert(uint32_t(std::max<int64_t>(capacity + 1, last.m + 1)));
    for (uint32_t m : probes) {
      Probe probe = select(handle, m);
      const bool aboveCapacity = capacity > 0 && int64_t(m) > capacity;
      if (table.aboveMax == rt::AboveMaxPolicy::Error || aboveCapacity) {
        if (probe.status != MOEC_STATUS_SELECTION_MISS)
          problem(where,
                  "m " + std::to_string(m) + " above the last row is " +
                      (probe.status == MOEC_STATUS_OK
                           ? std::string(probe.selection.fallback
                                             ? "served as a fallback"
                                             : "served")
                           : moec_status_name(probe.status)) +
                      (aboveCapacity
                           ? ", above the fused kernels' max_tokens " +
                                 std::to_string(capacity) +
                                 " (their buffers would overflow)"
                           : std::string(" though above_max is 'error'")));
      } else if (probe.status != MOEC_STATUS_OK || !probe.selection.fallback ||
                 probe.selection.row != table.rows.size() - 1) {
        problem(where, "m " + std::to_string(m) +
                           " above the last row is not the flagged fallback "
                           "that above_max 'largest' declares");
      }
    }
  }

  /// Checks that a grid whose workgroups must be resident at once fits the
  /// chip's budget at both ends of the m range (the grid rules may depend
  /// on the tokens).
  void checkResidency(const std::string &where, uint32_t k,
                      const ServedRange &range, uint32_t workspace) {
    const KernelFacts &f = facts_[k];
    if (f.residency == ResidencyNeed::None)
      return;
    const rt::KernelInfo &kernel = manifest_.kernels[k];
    target::OccupancyEstimate occupancy;
    const uint64_t budget = residentWorkgroupBudget(chip_, kernel, &occupancy);
    uint32_t high = range.mHigh;
    if (range.aboveMax)
      high = std::max<uint32_t>(high, workspace);
    if (f.fused && f.maxTokens > 0)
      high = uint32_t(std::min<int64_t>(high, f.maxTokens));
    std::set<uint32_t> tokens = {std::max<uint32_t>(range.mLow, 1), high};
    for (uint32_t m : tokens) {
      ++residencyChecks_;
      uint64_t grid = 0;
      std::string error;
      if (!gridSize(k, m, grid, error)) {
        problem(where, f.residencyDescription + ": grid at m " +
                           std::to_string(m) + " cannot be evaluated: " +
                           error);
        return;
      }
      const std::string budgetText =
          std::to_string(budget) + " that " + chip_.arch +
          " keeps resident (" + std::to_string(occupancy.workgroupsPerCu) +
          " per CU x " + std::to_string(chip_.computeUnits) + " CUs, " +
          target::occupancyLimiterName(occupancy.limiter) + "-limited)";
      if (grid > budget) {
        problem(where, f.residencyDescription + ": " + std::to_string(grid) +
                           " workgroups at m " + std::to_string(m) +
                           " exceed the " + budgetText);
        return;
      }
      if (uint64_t(f.producers) > budget) {
        problem(where, f.residencyDescription + ": its " +
                           std::to_string(f.producers) +
                           " producers exceed the " + budgetText);
        return;
      }
    }
  }

  /// Workgroups of kernel `k` at m tokens per rank, through the C API's
  /// grid rules. num_sorted is the routes padded for any M tile (only
  /// non-persistent GEMM grids read it).
  bool gridSize(uint32_t k, uint32_t m, uint64_t &size,
                std::string &error) const {
    const KernelFacts &f = facts_[k];
    const int64_t routes = int64_t(m) * std::max<int64_t>(f.topK, 1);
    const int64_t sorted = (routes + 255) / 256 * 256;
    const moec_rule_variable_t variables[] = {
        {"H", f.hidden},           {"I", f.intermediate},
        {"num_tokens", int64_t(m)}, {"num_sorted", sorted},
        {"num_routes", routes},
    };
    uint32_t grid[3] = {0, 0, 0};
    if (moec_bundle_kernel_grid(api_, k, variables, 5, grid) !=
        MOEC_STATUS_OK) {
      error = moec_last_error_message();
      return false;
    }
    size = uint64_t(grid[0]) * grid[1] * grid[2];
    return true;
  }

  const rt::Manifest &manifest_;
  const target::TargetInfo &chip_;
  moec_bundle_t *api_;
  bool allowSpills_;
  bool isa_;
  size_t isaInstructions_ = 0;
  std::vector<KernelFacts> facts_;
  std::vector<std::string> firstUser_;
  int problems_ = 0;
  size_t residencyChecks_ = 0;
};

/// The chip a code object is for, from its ELF header's e_flags; null
/// for one moec does not know.
const target::TargetInfo *chipOfObject(const std::vector<uint8_t> &object) {
  const uint32_t flags =
      object.size() >= 52 ? uint32_t(object[48]) | uint32_t(object[49]) << 8
                          : 0;
  for (const target::TargetInfo *candidate : target::kKnownTargets)
    if (candidate->elfMach == (flags & target::kElfMachMask))
      return candidate;
  return nullptr;
}

/// `moec verify --isa FILE` on a code object outside a bundle: its
/// machine code (no kernel ABI: nothing says what the runtime writes).
int verifyCodeObjectFile(const VerifyArgs &args,
                         const std::vector<uint8_t> &object) {
  llvm::Expected<std::vector<std::string>> kernels = isacheck::listKernels(object);
  if (!kernels) {
    std::cerr << "moec: " << args.bundle << ": "
              << llvm::toString(kernels.takeError()) << "\n";
    return kBadInput;
  }
  const target::TargetInfo *chip = chipOfObject(object);
  if (!chip) {
    std::cerr << "moec: " << args.bundle
              << ": a code object for a chip moec does not know\n";
    return kBadInput;
  }
  size_t problems = 0, instructions = 0;
  for (const std::string &kernel : *kernels) {
    llvm::Expected<isacheck::KernelVerification> checked =
        isacheck::verifyKernel(object, kernel, *chip, std::nullopt);
    if (!checked) {
      std::cerr << "moec: " << args.bundle << ": " << kernel << ": "
                << llvm::toString(checked.takeError()) << "\n";
      return kBadInput;
    }
    instructions += checked->instructions;
    problems += checked->findings.size();
    std::cout << isacheck::formatFindings(kernel, checked->findings);
  }
  std::cout << args.bundle << ": " << kernels->size() << " kernel"
            << (kernels->size() == 1 ? "" : "s") << ", " << instructions
            << " instructions on " << chip->arch << ": " << problems
            << " problem" << (problems == 1 ? "" : "s") << "\n";
  return problems == 0 ? kSuccess : kCheckFailed;
}

/// The processor an assembly file names in `.amdgcn_target
/// "amdgcn-amd-amdhsa--gfx950"` and its features after a ':' (as the
/// assembler spells them); an empty processor when it names none.
std::pair<std::string, std::string> assemblyTarget(llvm::StringRef text) {
  size_t at = text.find(".amdgcn_target");
  if (at == llvm::StringRef::npos)
    return {};
  llvm::StringRef line = text.substr(at).take_until([](char c) { return c == '\n'; });
  llvm::StringRef quoted = line.drop_until([](char c) { return c == '"'; })
                               .drop_front()
                               .take_until([](char c) { return c == '"'; });
  llvm::StringRef processor = quoted.rsplit("--").second;
  auto [arch, features] = processor.split(':');
  std::string featureList;
  for (llvm::StringRef rest = features; !rest.empty();) {
    auto [feature, tail] = rest.split(':');
    // "xnack-" in a target id is "-xnack" to the assembler.
    if (feature.size() > 1 && (feature.back() == '+' || feature.back() == '-'))
      featureList += (featureList.empty() ? "" : ",") +
                     std::string(1, feature.back()) + feature.drop_back().str();
    rest = tail;
  }
  return {arch.str(), featureList};
}

/// `moec verify --isa KERNEL.s [--repair OUT]`: the assembly assembled
/// through MC in process, then checked as a code object; with --repair,
/// the hazards of its one kernel repaired with s_nops (as the compile gate
/// repairs moec's kernels) and the repaired object written to OUT.
int verifyAssemblyFile(const VerifyArgs &args, const std::string &text) {
  const auto [arch, features] = assemblyTarget(text);
  // The chip comes from the file, as a code object's from its ELF header.
  if (arch.empty()) {
    std::cerr << "moec: " << args.bundle
              << ": names no processor (.amdgcn_target \"amdgcn-amd-amdhsa--"
                 "PROCESSOR\", as llvm-mc -filetype=asm writes it)\n";
    return kBadInput;
  }
  llvm::Expected<std::vector<uint8_t>> object =
      isacheck::assembleObject(text, arch, features);
  if (!object) {
    std::cerr << "moec: " << args.bundle << ": "
              << llvm::toString(object.takeError()) << "\n";
    return kBadInput;
  }
  if (args.repairOutput.empty())
    return verifyCodeObjectFile(args, *object);
  const target::TargetInfo *chip = chipOfObject(*object);
  llvm::Expected<std::vector<std::string>> kernels = isacheck::listKernels(*object);
  if (!chip || !kernels || kernels->size() != 1) {
    if (!kernels)
      llvm::consumeError(kernels.takeError());
    std::cerr << "moec: " << args.bundle
              << ": --repair needs assembly of one kernel for a chip moec knows\n";
    return kBadInput;
  }
  const std::string &kernel = kernels->front();
  auto check = [&](llvm::ArrayRef<uint8_t> code) -> llvm::Expected<isacheck::Findings> {
    auto checked = isacheck::verifyKernel(code, kernel, *chip, std::nullopt);
    if (!checked)
      return checked.takeError();
    return std::move(checked->findings);
  };
  llvm::Expected<isacheck::Findings> findings = check(*object);
  if (!findings) {
    std::cerr << "moec: " << args.bundle << ": " << kernel << ": "
              << llvm::toString(findings.takeError()) << "\n";
    return kBadInput;
  }
  std::cout << isacheck::formatFindings(kernel, *findings);
  std::vector<uint8_t> repaired = *object;
  size_t repairs = 0;
  if (!findings->empty()) {
    auto build = [&](llvm::StringRef asmText) {
      return isacheck::assembleObject(asmText, arch, features);
    };
    auto result = isacheck::repairHazards(*object, kernel, arch, text,
                                          std::move(*findings), build, check);
    if (!result) {
      std::cout << args.bundle << ": not repaired: "
                << llvm::toString(result.takeError()) << "\n";
      return kCheckFailed;
    }
    for (const isacheck::NopRepair &r : result->repairs)
      std::cout << kernel << ": 0x" << llvm::utohexstr(r.address, true)
                << ": repaired: +" << r.waitStates << " wait state"
                << (r.waitStates == 1 ? "" : "s") << " (" << r.rule << ")\n";
    repairs = result->repairs.size();
    repaired = std::move(result->object);
  }
  std::string error;
  if (!cli::writeFileAtomically(args.repairOutput, repaired.data(),
                                repaired.size(), error)) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  std::cout << args.repairOutput << ": 1 kernel, " << repairs << " repair"
            << (repairs == 1 ? "" : "s") << ", then 0 problems\n";
  return kSuccess;
}

int runVerify(const VerifyArgs &args) {
  if (!args.repairOutput.empty() &&
      (!args.isa || !llvm::StringRef(args.bundle).ends_with(".s"))) {
    std::cerr << "moec: " << args.bundle
              << ": --repair needs --isa and an assembly file (.s)\n";
    return kBadInput;
  }
  if (args.isa && llvm::StringRef(args.bundle).ends_with(".s")) {
    std::ifstream in(args.bundle, std::ios::binary);
    if (!in) {
      std::cerr << "moec: " << args.bundle << ": cannot open\n";
      return kBadInput;
    }
    const std::string text((std::istreambuf_iterator<char>(in)),
                           std::istreambuf_iterator<char>());
    return verifyAssemblyFile(args, text);
  }
  if (args.isa) {
    std::ifstream in(args.bundle, std::ios::binary);
    std::vector<uint8_t> head(4);
    if (in && in.read(reinterpret_cast<char *>(head.data()), 4) &&
        std::memcmp(head.data(), "\x7f" "ELF", 4) == 0) {
      in.seekg(0);
      std::vector<uint8_t> object((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
      return verifyCodeObjectFile(args, object);
    }
  }
  std::unique_ptr<rt::Bundle> bundle = openBundleOrReport(args.bundle);
  if (!bundle)
    return kBadInput;
  // The engine's view: the same file through the public C API, with the
  // engine's overrides applied when given.
  moec_bundle_t *opened = nullptr;
  if (moec_bundle_open(args.bundle.c_str(), &opened) != MOEC_STATUS_OK) {
    std::cerr << "moec: " << moec_last_error_message() << "\n";
    return kBadInput;
  }
  CBundle api(opened);
  if (!args.overrides.empty()) {
    rt::OverrideReport report;
    std::string error;
    if (!bundle->applySelectionOverridesFile(args.overrides, report, error)) {
      std::cerr << "moec: " << error << "\n";
      return kBadInput;
    }
    if (moec_bundle_apply_overrides(api.get(), args.overrides.c_str(),
                                    nullptr) != MOEC_STATUS_OK) {
      std::cerr << "moec: " << moec_last_error_message() << "\n";
      return kBadInput;
    }
  }
  // The tables as the selector holds them (overrides merged); the rows'
  // ranges are derived from these and compared with what the C API selects.
  rt::Manifest manifest = bundle->manifest();
  manifest.selection = bundle->selector().tables();
  std::string error;
  const target::TargetInfo *chip = bundleChip(manifest, args.bundle, error);
  if (!chip) {
    std::cerr << "moec: " << error << "\n";
    return kBadInput;
  }
  Verifier verifier(manifest, *chip, api.get(), args.allowSpills, args.isa);
  if (!verifier.run(error)) {
    std::cerr << "moec: " << args.bundle << ": " << error << "\n";
    return kBadInput;
  }
  auto counted = [](size_t count, const char *noun) {
    return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
  };
  const int problems = verifier.problems();
  std::cout << args.bundle << ": " << counted(manifest.kernels.size(), "kernel")
            << ", " << counted(manifest.configs.size(), "configuration")
            << ", " << counted(manifest.selection.size(), "table") << ", "
            << counted(verifier.rowCount(), "row") << ", "
            << counted(verifier.residencyChecks(), "resident-grid check")
            << (args.isa ? ", " + counted(verifier.isaInstructions(),
                                          "instruction") +
                               " through the ISA checks"
                         : std::string())
            << " on " << chip->arch << ": " << counted(problems, "problem")
            << "\n";
  return problems == 0 ? kSuccess : kCheckFailed;
}

} // namespace

void addVerifyCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App *cmd = app.add_subcommand(
      "verify", "Check every kernel against the chip and every table row "
                "through the runtime's selector (docs/cli.md)");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  cmd->add_option("--override", args->overrides,
                  "selection override file to apply first, as an engine "
                  "would (docs/selection.md)");
  cmd->add_flag("--allow-spills", args->allowSpills,
                "do not count spills and scratch as problems");
  cmd->add_flag("--isa", args->isa,
                "also check every kernel's machine code: waits, hazards, "
                "resources, kernel ABI (docs/isa-verification.md); given a "
                "code object instead of a bundle, its machine code alone; "
                "given assembly (.s), assembled first");
  cmd->add_option("--repair", args->repairOutput,
                  "with --isa on assembly of one kernel: insert the s_nops "
                  "its hazards need, as the compile gate does, and write the "
                  "repaired code object (the original plus s_nops, passing "
                  "the checks) to this file");
  cmd->callback([args, &exitStatus] { exitStatus = runVerify(*args); });
}
