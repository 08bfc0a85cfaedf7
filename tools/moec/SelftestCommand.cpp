//===- SelftestCommand.cpp - moec selftest BUNDLE -------------------------===//
//
// Every selection table of a bundle, through the runtime's layer API on a
// device (a GPU, or the emulated device), against the oracle: seeded random
// weights with random per-block scales, tokens, routing with invalid ids,
// tokens with no valid route, hot-rank routing, unequal and empty ranks, at
// M around each boundary where the configuration changes. One line per
// case; exit 0 all passed, 1 a case failed, 2 bad input, 3 no device
// (docs/cli.md).
//
// --small compiles the bundle's own table (rebuilt from its manifest) at a
// small shape with the same knobs; --real runs the bundle as it is.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "CommandSupport.h"
#include "moec/Harness/LayerSetup.h"

#include "moec/Compiler/TableCompiler.h"
#include "moec/Harness/StageHarness.h"
#include "moec/Harness/StageKernel.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/reference/Families.h"
#include "moec/reference/Formats.h"
#include "moec/reference/Generate.h"
#include "moec/reference/Npy.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using namespace moec;

constexpr int kNoDevice = 3;
/// The final output against the oracle layer: the oracle requantises the
/// W13 intermediate from double, the kernels from FP32, so codes at rounding
/// ties may differ by one FP8 step: the bound is the FP8 unit roundoff
/// (docs/emulator.md, "Tolerances"), as for `moec run`.
constexpr double kLayerRelL2Bound = 1.0 / 16.0;
/// The "clamp" case of a GPT-OSS table scales the hidden states by this
/// power of two (exact in BF16 and in the FP8 input quantisation), so that
/// gate and up values pass AITER's clamp at 7, which the generated data
/// alone rarely reaches.
constexpr double kClampInputScale = 8.0;

struct SelftestArgs {
  std::string bundle;
  std::string device = "0";
  bool small = false, real = false;
  int repeat = 0;
  uint64_t seed = 1;
  uint32_t maxM = 0;
  /// --devices: the device of each rank, in rank order (empty: --device N
  /// and the devices after it).
  std::string devices;
  /// --network: only the tables of this network (empty: every table).
  std::string network;
  /// --activation: the oracle's W13 activation, "silu" or "gpt-oss-swiglu"
  /// (empty: the one the table's W13 kernels were compiled with).
  std::string activation;
  std::string saveDir;
};

/// The emulated HIP library: $MOEC_EMULATED_HIP_LIBRARY, or next to this
/// executable (build tree: ../lib, install tree: ../lib too).
std::string emulatedLibraryPath() {
  if (const char *path = std::getenv("MOEC_EMULATED_HIP_LIBRARY"); path && *path)
    return path;
  char self[4096];
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = ".";
  if (length > 0) {
    self[length] = 0;
    dir = self;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  return dir + "/../lib/libmoec_emulated_hip.so";
}

using harness::activationName;
using harness::DeviceMemory;
using harness::Rank;
using harness::TableFacts;
using harness::tableFacts;

/// One case: M for every rank and how its tokens are routed.
struct Case {
  uint32_t m = 0;
  /// "random", "hot-rank", "unequal", "empty-rank", "overflow", "clamp"
  std::string scenario;
};

/// printf's %.2e of `value`.
std::string formatScientific(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2e", value);
  return text;
}

double relativeL2(const std::vector<double> &got, const std::vector<float> &want) {
  return emu::outputDistance(got, want).relL2;
}

/// --save DIR: every case's inputs, outputs and the oracle's output as .npy
/// files and manifest.json listing every case with its result. Everything
/// is written into DIR.partial-PID beside DIR, which is renamed to DIR
/// (never replacing anything) once the manifest is in it: DIR appears
/// complete or not at all (docs/cli.md, "Saved cases").
class CaseSaver {
public:
  /// Refuses (false with `error`) when DIR exists or its parent is not a
  /// writable directory.
  static std::unique_ptr<CaseSaver> create(const std::string &dir,
                                           std::string &error) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::symlink_status(dir, ec).type() != fs::file_type::not_found) {
      error = "--save " + dir + ": exists (selftest writes a new directory)";
      return nullptr;
    }
    fs::path parent = fs::path(dir).parent_path();
    if (parent.empty())
      parent = ".";
    if (!fs::is_directory(parent, ec)) {
      error = "--save " + dir + ": " + parent.string() + " is not a directory";
      return nullptr;
    }
    std::unique_ptr<CaseSaver> saver(new CaseSaver);
    saver->final_ = dir;
    saver->partial_ = dir + ".partial-" + std::to_string(::getpid());
    if (!fs::create_directory(saver->partial_, ec) || ec) {
      error = "--save " + dir + ": cannot create " + saver->partial_ + ": " +
              (ec ? ec.message() : "exists");
      return nullptr;
    }
    return saver;
  }
  ~CaseSaver() {
    if (!committed_) {
      std::error_code ignored;
      std::filesystem::remove_all(partial_, ignored);
    }
  }

  /// A new case; returns its directory's name ("case-0003").
  std::string beginCase() {
    char name[32];
    std::snprintf(name, sizeof(name), "case-%04d", cases_++);
    std::error_code ec;
    std::filesystem::create_directory(partial_ + "/" + name, ec);
    if (ec && error_.empty())
      error_ = partial_ + "/" + name + ": " + ec.message();
    return name;
  }
  /// Writes `file`.npy into the case's directory and lists it in `entry`.
  void save(const std::string &caseName, const std::string &file,
            const ref::NpyArray &array, nlohmann::json &entry) {
    const std::string path = partial_ + "/" + caseName + "/" + file + ".npy";
    ref::Status status = ref::writeNpy(path, array);
    if (!status.ok() && error_.empty())
      error_ = status.message();
    entry["files"].push_back(file + ".npy");
  }
  void addCase(nlohmann::json entry) { cases.push_back(std::move(entry)); }
  void addLine(const std::string &line) { lines.push_back(line); }
  void skipped(const std::string &table, const std::string &reason) {
    skips.push_back({{"table", table}, {"reason", reason}});
  }
  const std::string &error() const { return error_; }

  /// Writes manifest.json (`header` plus the cases) and renames the
  /// directory into place.
  bool commit(nlohmann::json header, std::string &error) {
    if (!error_.empty()) {
      error = "--save: " + error_;
      return false;
    }
    header["cases"] = cases;
    header["skipped"] = skips;
    header["lines"] = lines;
    const std::string text = header.dump(1) + "\n";
    if (!cli::writeFileAtomically(partial_ + "/manifest.json", text.data(),
                                  text.size(), error))
      return false;
    if (::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, final_.c_str(),
                    RENAME_NOREPLACE) != 0) {
      error = "--save " + final_ + ": " + std::strerror(errno);
      return false;
    }
    committed_ = true;
    return true;
  }
  const std::string &directory() const { return final_; }

private:
  CaseSaver() = default;
  std::string final_, partial_, error_;
  int cases_ = 0;
  bool committed_ = false;
  nlohmann::json cases = nlohmann::json::array(),
                 skips = nlohmann::json::array(),
                 lines = nlohmann::json::array();
};

/// Typed .npy arrays of the saved tensors.
template <typename T>
ref::NpyArray npyOf(ref::NpyDtype dtype, int64_t rows, int64_t columns,
                    const std::vector<T> &values) {
  return ref::NpyArray::fromVector(dtype, {rows, columns}, values);
}

class Selftest {
public:
  Selftest(const SelftestArgs &args, const rt::Bundle &bundle,
           std::string libraryPath, std::vector<int> devices, int firstOrdinal,
           CaseSaver *saver)
      : args_(args), bundle_(bundle), libraryPath_(std::move(libraryPath)),
        devices_(std::move(devices)), firstOrdinal_(firstOrdinal),
        saver_(saver) {}

  /// Runs every table; returns the exit status.
  int run() {
    const rt::Manifest &manifest = bundle_.manifest();
    // Every table's facts first, so that a table the oracle cannot model
    // is refused before any device is opened or any case runs.
    for (size_t t = 0; t < manifest.selection.size(); ++t) {
      if (!args_.network.empty() && manifest.selection[t].network != args_.network)
        continue;
      TableFacts facts;
      std::string error;
      if (!tableFacts(manifest, bundle_.selector().tables()[t], facts, error)) {
        std::fprintf(stderr, "moec: %s\n", error.c_str());
        return cli::kBadInput;
      }
    }
    if (int status = probeDevices(); status != cli::kSuccess)
      return status;
    for (size_t t = 0; t < manifest.selection.size(); ++t) {
      if (!args_.network.empty() && manifest.selection[t].network != args_.network)
        continue;
      int status = runTable(uint32_t(t));
      if (status == kNoDevice || status == cli::kBadInput)
        return status;
    }
    std::printf("%d passed, %d failed, %d skipped\n", passed_, failed_, skipped_);
    return failed_ ? cli::kCheckFailed : cli::kSuccess;
  }
  int passed() const { return passed_; }
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

private:
  /// Opens the first device and reads how many devices the HIP library
  /// reports; exit 3 when it cannot.
  int probeDevices();
  /// The device of each of `ep` ranks: one device per rank when the HIP
  /// library has them (--devices, or --device N and the devices after it);
  /// otherwise every rank on the first device, which only unfused ranks
  /// allow. False with `skip` when a fused table cannot be placed.
  bool placeRanks(uint32_t ep, bool fused, std::vector<int> &ordinals,
                  std::string &skip) const;
  int runTable(uint32_t tableIndex);
  /// The largest M needed to reach every configuration of a table that
  /// M <= --max-m does not select (0: none).
  uint32_t coverageM(uint32_t tableIndex) const;
  bool runCase(const rt::SelectionTable &table, const TableFacts &facts,
               std::vector<Rank> &ranks, const Case &c, uint64_t caseSeed,
               std::vector<std::vector<uint16_t>> *outputs, bool print);

  /// The oracle's activation: --activation, or the kernels' own.
  bool oracleGptOss(const TableFacts &facts) const {
    return args_.activation.empty() ? facts.gptOssSwiglu
                                    : args_.activation == "gpt-oss-swiglu";
  }

  void report(bool pass, const std::string &line) {
    (pass ? passed_ : failed_)++;
    std::printf("%s %s\n", pass ? "PASS" : "FAIL", line.c_str());
    std::fflush(stdout);
    if (saver_)
      saver_->addLine(std::string(pass ? "PASS " : "FAIL ") + line);
  }

  const SelftestArgs &args_;
  const rt::Bundle &bundle_;
  std::string libraryPath_;
  std::vector<int> devices_;
  int firstOrdinal_ = 0;
  int deviceCount_ = 0;
  CaseSaver *saver_ = nullptr;
  int passed_ = 0, failed_ = 0, skipped_ = 0;
  // The weights of the current table (host, checkpoint numbering).
  std::unique_ptr<ref::GeneratedMxfp4Weights> w13Source_, w2Source_;
  std::vector<uint8_t> sharedW13_, sharedW13Scales_, sharedW2_, sharedW2Scales_;
  /// With facts.bias: N(0, 1) FP32 biases, one row per expert of the
  /// weights (FHMoE: the shared expert's last), as ref::ExpertBias.
  ref::ExpertBias bias_;
};

int Selftest::probeDevices() {
  std::string error;
  std::unique_ptr<rt::HipLibrary> library =
      rt::HipLibrary::load({libraryPath_}, error);
  std::unique_ptr<rt::HipDevice> device;
  if (library)
    device = rt::HipDevice::create(std::move(library), firstOrdinal_, error);
  if (device) {
    rt::hip::Error status = device->hipApi().hipGetDeviceCount(&deviceCount_);
    if (status != rt::hip::kSuccess) {
      error = "hipGetDeviceCount failed: " + device->library().describe(status);
      device.reset();
    }
  }
  if (!device) {
    std::fprintf(stderr, "moec: %s\n", error.c_str());
    return kNoDevice;
  }
  return cli::kSuccess;
}

bool Selftest::placeRanks(uint32_t ep, bool fused, std::vector<int> &ordinals,
                          std::string &skip) const {
  ordinals.clear();
  bool ownDevices = true;
  for (uint32_t r = 0; r < ep; ++r) {
    const int ordinal = devices_.empty() ? firstOrdinal_ + int(r)
                        : r < devices_.size() ? devices_[r]
                                              : -1;
    ownDevices &= ordinal >= 0 && ordinal < deviceCount_;
    ordinals.push_back(ordinal);
  }
  if (ownDevices)
    return true;
  // Unfused ranks are independent layers: one device serves them in turn.
  // Fused ranks wait on each other's kernels, so they cannot share one
  // device's queue.
  if (!fused) {
    ordinals.assign(ep, firstOrdinal_);
    return true;
  }
  const std::string wanted =
      devices_.empty()
          ? "devices " + std::to_string(firstOrdinal_) + " to " +
                std::to_string(firstOrdinal_ + int(ep) - 1)
          : "--devices lists " + std::to_string(devices_.size());
  skip = "fused ranks need a device each: " + std::to_string(ep) +
         " devices (" + wanted + "), the HIP library reports " +
         std::to_string(deviceCount_) +
         " (--device N takes N and the devices after it, --devices a list)";
  return false;
}

uint32_t Selftest::coverageM(uint32_t tableIndex) const {
  std::set<uint32_t> covered;
  uint32_t needed = 0;
  for (const rt::RowRange &range : bundle_.selector().rowRanges({tableIndex})) {
    const uint32_t m = std::max(1u, range.mLow);
    if (m <= args_.maxM || covered.count(range.config)) {
      covered.insert(range.config);
      continue;
    }
    covered.insert(range.config);
    needed = std::max(needed, m);
  }
  return needed;
}

int Selftest::runTable(uint32_t tableIndex) {
  const rt::Manifest &manifest = bundle_.manifest();
  const rt::SelectionTable &table = bundle_.selector().tables()[tableIndex];
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  TableFacts facts;
  std::string error;
  if (!tableFacts(manifest, table, facts, error)) {
    std::fprintf(stderr, "moec: %s\n", error.c_str());
    return cli::kBadInput;
  }
  std::vector<int> ordinals;
  std::string skip;
  if (!placeRanks(table.ep, facts.fused, ordinals, skip)) {
    ++skipped_;
    std::printf("SKIP %s: %s\n", name.c_str(), skip.c_str());
    if (saver_)
      saver_->skipped(name, skip);
    return cli::kSuccess;
  }
  if (table.ep > 1) {
    std::string list;
    for (int ordinal : ordinals)
      list += (list.empty() ? "" : ",") + std::to_string(ordinal);
    std::printf("%s: ranks on devices %s\n", name.c_str(), list.c_str());
  }
  // SiLU is every shipped table's activation; anything else is said.
  if (facts.gptOssSwiglu || !args_.activation.empty()) {
    const bool oracle = oracleGptOss(facts);
    std::printf("%s: W13 kernels %s (clamp %g), oracle %s%s\n", name.c_str(),
                activationName(facts.gptOssSwiglu), facts.swigluLimit,
                activationName(oracle),
                oracle == facts.gptOssSwiglu ? "" : " (--activation)");
  }
  if (facts.bias)
    std::printf("%s: W13 and W2 kernels take per-expert biases: seeded "
                "N(0, 1) FP32, bound and given to the oracle\n",
                name.c_str());
  std::vector<Rank> ranks(table.ep);
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  for (uint32_t r = 0; r < table.ep; ++r) {
    std::unique_ptr<rt::HipLibrary> library =
        rt::HipLibrary::load({libraryPath_}, error);
    if (!library) {
      std::fprintf(stderr, "moec: %s\n", error.c_str());
      return kNoDevice;
    }
    ranks[r].device =
        rt::HipDevice::create(std::move(library), ordinals[r], error);
    if (!ranks[r].device) {
      std::fprintf(stderr, "moec: %s\n", error.c_str());
      return kNoDevice;
    }
    ranks[r].loader =
        std::make_unique<rt::KernelLoader>(*ranks[r].device, bundle_);
    memory.push_back(std::make_unique<DeviceMemory>(*ranks[r].device));
    rt::LayerProblem problem = facts.problem;
    problem.epRank = r;
    // --max-m: a workspace for that many tokens, or for the smallest M of
    // a configuration only larger M select.
    if (args_.maxM)
      problem.maxTokens =
          std::min(std::max(args_.maxM, coverageM(tableIndex)), table.workspace);
    if (!ranks[r].device->makeCurrent(error) ||
        !(ranks[r].layer = rt::Layer::create(*ranks[r].loader,
                                             rt::TableHandle{tableIndex}, problem,
                                             error))) {
      report(false, name + ": layer: " + error);
      return cli::kSuccess;
    }
  }
  const rt::LayerMemory &layerMemory = ranks[0].layer->memory();

  // Weights: routed experts in checkpoint numbering, sliced per rank.
  const int64_t H = facts.problem.hidden, I = facts.problem.intermediate;
  const int64_t E = facts.problem.experts;
  w13Source_ = std::make_unique<ref::GeneratedMxfp4Weights>(
      args_.seed, 13, E, 2 * I, H, ref::defaultScaleExponent(H));
  w2Source_ = std::make_unique<ref::GeneratedMxfp4Weights>(
      args_.seed, 2, E, H, I, ref::defaultScaleExponent(I));
  harness::HostLayerWeights host;
  host.experts = E;
  ref::materializeWeights(*w13Source_, host.w13, host.w13Scales);
  ref::materializeWeights(*w2Source_, host.w2, host.w2Scales);
  if (facts.shared) {
    ref::generateFp8Expert(args_.seed, 113, 2 * I, H, sharedW13_, sharedW13Scales_);
    ref::generateFp8Expert(args_.seed, 112, H, I, sharedW2_, sharedW2Scales_);
    host.sharedW13 = sharedW13_;
    host.sharedW13Scales = sharedW13Scales_;
    host.sharedW2 = sharedW2_;
    host.sharedW2Scales = sharedW2Scales_;
  }
  bias_ = ref::ExpertBias();
  const int64_t biasRows = E + (facts.shared ? 1 : 0);
  if (facts.bias) {
    harness::generateBiases(args_.seed, biasRows, H, I, bias_.w13, bias_.w2);
    host.w13Bias = bias_.w13;
    host.w2Bias = bias_.w2;
  }
  for (uint32_t r = 0; r < table.ep; ++r)
    if (!harness::setUpRank(ranks[r], *memory[r], facts, table.ep, r, host,
                        layerMemory, error)) {
      report(false, name + ": set-up: " + error);
      return cli::kSuccess;
    }
  if (layerMemory.peerBytes && !harness::bindRankPeers(ranks, error)) {
    report(false, name + ": set-up: " + error);
    return cli::kSuccess;
  }

  // Cases: the fixed list and M on both sides of every boundary where the
  // selected configuration changes, within what the layer accepts. Rows
  // that keep the configuration launch the same kernels, so a tuned table
  // with a row at every M costs no more cases than its configurations do.
  std::set<uint32_t> ms = {1, 31, 32, 33, 255, 256, 257};
  const std::vector<rt::RowRange> ranges =
      bundle_.selector().rowRanges({tableIndex});
  for (size_t i = 0; i < ranges.size(); ++i) {
    const bool changesConfig =
        i + 1 == ranges.size() || ranges[i + 1].config != ranges[i].config;
    if (i == 0 || ranges[i - 1].config != ranges[i].config)
      ms.insert(std::max(1u, ranges[i].mLow));
    if (changesConfig) {
      ms.insert(ranges[i].mHigh);
      ms.insert(ranges[i].mHigh + 1);
    }
  }
  std::vector<Case> cases;
  const char *scenarios[] = {"random", "hot-rank", "unequal", "empty-rank"};
  size_t next = 0;
  for (uint32_t m : ms) {
    if (m == 0 || m > layerMemory.maxTokens || (args_.maxM && m > args_.maxM))
      continue;
    const bool expertParallel = table.ep > 1;
    cases.push_back({m, expertParallel ? scenarios[next++ % 4] : "random"});
  }
  // Every configuration the table selects runs at least once: one above
  // --max-m runs at the smallest M that selects it.
  std::set<uint32_t> covered;
  for (const Case &c : cases)
    covered.insert(bundle_.selector().select({tableIndex}, c.m).config);
  for (const rt::RowRange &range : bundle_.selector().rowRanges({tableIndex})) {
    const uint32_t m = std::max(1u, range.mLow);
    if (covered.count(range.config) || m > layerMemory.maxTokens)
      continue;
    covered.insert(range.config);
    cases.push_back({m, "random"});
  }
  // GPT-OSS kernels: one case whose inputs drive gate and up past the
  // clamp; it must match the oracle and be far from the unclamped one.
  if (facts.gptOssSwiglu && facts.swigluLimit > 0) {
    uint32_t m = std::min<uint32_t>(32, layerMemory.maxTokens);
    if (args_.maxM)
      m = std::min(m, args_.maxM);
    if (m > 0)
      cases.push_back({m, "clamp"});
  }
  for (size_t i = 0; i < cases.size(); ++i)
    runCase(table, facts, ranks, cases[i], args_.seed * 1000 + i, nullptr, true);

  // A fused fixed-slot table: routes beyond an expert's receive rows must
  // be reported, never dropped silently (when the layer's M can overflow
  // them: every route of every rank goes to one expert).
  if (facts.fused && !facts.compact &&
      uint64_t(layerMemory.maxTokens) * facts.problem.topK * table.ep >
          uint64_t(facts.fixedSlotCapacity))
    runCase(table, facts, ranks, {layerMemory.maxTokens, "overflow"},
            args_.seed * 1000 + 999, nullptr, true);

  // --repeat: many forwards with changing M; a repeated case (M and its
  // scenario: the clamp case shares an M with a random one) must give the
  // same output bits as its first run.
  if (args_.repeat > 0) {
    std::map<std::pair<uint32_t, std::string>, std::vector<std::vector<uint16_t>>>
        firstOutput;
    int transitions = 0, mismatches = 0;
    uint32_t previous = 0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < args_.repeat; ++i) {
      const Case &c = cases[size_t(ref::mixBits(args_.seed + uint64_t(i)) % cases.size())];
      std::vector<std::vector<uint16_t>> outputs;
      if (!runCase(table, facts, ranks, c, args_.seed * 1000 + c.m, &outputs, false)) {
        ++mismatches;
        break;
      }
      transitions += i > 0 && c.m != previous;
      previous = c.m;
      auto [it, inserted] = firstOutput.emplace(std::make_pair(c.m, c.scenario), outputs);
      if (!inserted && it->second != outputs)
        ++mismatches;
    }
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s repeat: %d forwards, %d shape transitions, %d "
                  "mismatching repeats, %.2f s",
                  name.c_str(), args_.repeat, transitions, mismatches, seconds);
    report(mismatches == 0, line);
  }
  return cli::kSuccess;
}

bool Selftest::runCase(const rt::SelectionTable &table, const TableFacts &facts,
                       std::vector<Rank> &ranks, const Case &c,
                       uint64_t caseSeed,
                       std::vector<std::vector<uint16_t>> *outputs, bool print) {
  const std::string name =
      rt::describeTableKey(table.network, table.ep, table.workspace);
  const uint32_t ep = table.ep;
  const int64_t H = facts.problem.hidden, E = facts.problem.experts;
  const int64_t K = facts.problem.topK;
  const uint32_t M = c.m;
  ref::MoeShape shape{H, int64_t(facts.problem.intermediate), E, K};
  auto start = std::chrono::steady_clock::now();
  std::string error;

  // Each rank's tokens: its own batch (fused), or one batch every rank
  // serves (unfused expert parallel: the outputs are partial sums).
  const bool ownBatches = facts.fused;
  std::vector<ref::TokenBatch> batches(ep);
  for (uint32_t r = 0; r < ep; ++r) {
    ref::RoutingOptions routing;
    routing.invalidFraction = 0.1;
    if (c.scenario == "hot-rank" || c.scenario == "overflow") {
      routing.ep = ep;
      routing.hotRank = 0;
    }
    batches[r] = ref::generateBatch(caseSeed, ownBatches ? r : 0, M, shape,
                                    routing);
    ref::TokenBatch &batch = batches[r];
    // Rows past this rank's real tokens carry no valid route (an engine
    // pads to the common M that way).
    int64_t real = M;
    if (c.scenario == "unequal")
      real = std::max<int64_t>(0, int64_t(M) - int64_t(r) * int64_t(M) / int64_t(ep));
    if (c.scenario == "empty-rank" && r == ep - 1)
      real = 0;
    for (int64_t t = real; t < M; ++t)
      for (int64_t k = 0; k < K; ++k)
        batch.topkIds[size_t(t * K + k)] = -1;
    // Every seventh token has no valid route at all: it must come out zero.
    for (int64_t t = 3; t < M; t += 7)
      for (int64_t k = 0; k < K; ++k)
        batch.topkIds[size_t(t * K + k)] = (k % 2) ? -1 : int32_t(E + 1 + k);
    // FHMoE: the layer appends the shared expert as id E in its own slot;
    // an id of exactly E in a routed slot would reach it too (docs/
    // runtime-api.md), so invalid routed ids here are -1 or above E.
    if (facts.shared)
      for (int32_t &id : batch.topkIds)
        if (id == E)
          id = int32_t(E + 1);
    if (c.scenario == "overflow")
      for (int64_t t = 0; t < M; ++t)
        for (int64_t k = 0; k < K; ++k)
          batch.topkIds[size_t(t * K + k)] = 0;
    if (c.scenario == "clamp")
      for (uint16_t &bits : batch.hiddenBf16)
        bits = ref::encodeBf16(ref::decodeBf16(bits) * kClampInputScale);
    if (!ownBatches)
      break;
  }
  for (uint32_t r = 1; r < ep && !ownBatches; ++r)
    batches[r] = batches[0];

  // Inputs and poisoned outputs on every rank first: a copy is a
  // synchronising point, and the fused ranks' launches must all be queued
  // before any of them runs (they wait on each other).
  for (uint32_t r = 0; r < ep; ++r) {
    Rank &rank = ranks[r];
    DeviceMemory mem(*rank.device);
    const ref::TokenBatch &batch = batches[r];
    if (!rank.device->makeCurrent(error) ||
        !mem.upload(rank.hidden, batch.hiddenBf16.data(), size_t(M * H * 2), error) ||
        !mem.upload(rank.ids, batch.topkIds.data(), size_t(M * K * 4), error) ||
        !mem.upload(rank.weights, batch.topkWeights.data(), size_t(M * K * 4), error) ||
        !mem.fill(rank.out, 0xFF, size_t(M * H * 2), error)) {
      report(false, name + " m=" + std::to_string(M) + ": " + error);
      return false;
    }
  }
  for (uint32_t r = 0; r < ep; ++r) {
    Rank &rank = ranks[r];
    const rt::LayerInputs inputs = harness::rankInputs(rank, M);
    if (!rank.device->makeCurrent(error) ||
        rank.layer->forward(inputs, nullptr, error) != rt::Layer::ForwardStatus::Ok) {
      report(false, name + " m=" + std::to_string(M) + " rank " +
                        std::to_string(r) + ": forward: " + error);
      return false;
    }
  }
  // Read back (a blocking copy runs every pending launch).
  std::vector<std::vector<uint16_t>> got(ep, std::vector<uint16_t>(size_t(M * H)));
  uint64_t overflow = 0;
  for (uint32_t r = 0; r < ep; ++r) {
    DeviceMemory mem(*ranks[r].device);
    rt::LayerStatus status;
    if (!ranks[r].device->makeCurrent(error) ||
        !mem.download(got[r].data(), ranks[r].out, size_t(M * H * 2), error) ||
        !ranks[r].layer->readStatus(status, error)) {
      report(false, name + " m=" + std::to_string(M) + " rank " +
                        std::to_string(r) + ": " + error);
      return false;
    }
    overflow += status.overflowRoutes;
  }
  const uint32_t config = ranks[0].layer->lastForward().config;
  const std::string &configId = bundle_.manifest().configs[config].id;

  // --save: this case's inputs (each rank's when ranks have their own
  // batches) and every rank's output; the oracle's below. Writing them is
  // left out of the case's time.
  nlohmann::json entry;
  std::string caseDir;
  double savingSeconds = 0.0;
  auto save = [&](const std::string &file, const ref::NpyArray &array) {
    auto begin = std::chrono::steady_clock::now();
    saver_->save(caseDir, file, array, entry);
    savingSeconds += std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - begin)
                         .count();
  };
  const bool saving = saver_ && print;
  if (saving) {
    caseDir = saver_->beginCase();
    entry = {{"case", caseDir},     {"table", name},
             {"network", table.network}, {"ep", ep},
             {"workspace", table.workspace}, {"m", M},
             {"scenario", c.scenario}, {"config", configId},
             {"activation", activationName(oracleGptOss(facts))},
             {"files", nlohmann::json::array()}};
    for (uint32_t r = 0; r < (ownBatches ? ep : 1); ++r) {
      const std::string prefix =
          ownBatches ? "rank" + std::to_string(r) + "_" : "";
      save(prefix + "hidden", npyOf(ref::NpyDtype::UInt16, M, H, batches[r].hiddenBf16));
      save(prefix + "topk_ids", npyOf(ref::NpyDtype::Int32, M, K, batches[r].topkIds));
      save(prefix + "topk_weights",
           npyOf(ref::NpyDtype::Float32, M, K, batches[r].topkWeights));
    }
    for (uint32_t r = 0; r < ep; ++r)
      save("rank" + std::to_string(r) + "_out",
           npyOf(ref::NpyDtype::UInt16, M, H, got[r]));
  }

  if (c.scenario == "overflow") {
    // Every route of every rank names local expert 0 of rank 0.
    int64_t routes = 0;
    for (const ref::TokenBatch &batch : batches)
      for (int32_t id : batch.topkIds)
        routes += id == 0;
    const int64_t expected = std::max<int64_t>(0, routes - facts.fixedSlotCapacity);
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s m=%u overflow: %lld routes into %lld receive rows, "
                  "%llu reported (expected %lld)",
                  name.c_str(), M, (long long)routes,
                  (long long)facts.fixedSlotCapacity,
                  (unsigned long long)overflow, (long long)expected);
    const bool pass = expected > 0 && int64_t(overflow) == expected;
    for (Rank &rank : ranks)
      if (!rank.layer->clearStatus(error))
        return false;
    if (saving) {
      entry["result"] = pass ? "PASS" : "FAIL";
      entry["routes"] = routes;
      entry["receive_rows"] = facts.fixedSlotCapacity;
      entry["overflow"] = overflow;
      entry["expected_overflow"] = expected;
      entry["time_s"] = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count() -
                        savingSeconds;
      saver_->addCase(std::move(entry));
    }
    report(pass, line);
    return pass;
  }

  // The oracle, and the comparison.
  ref::TpMoeConfig tp;
  tp.shape = shape;
  tp.mTile = 16;
  tp.gateUpInterleave = facts.interleave;
  tp.swigluLimit = facts.swigluLimit;
  tp.gptOssSwiglu = oracleGptOss(facts);
  tp.bias = bias_;
  tp.mode = ref::OracleMode::QuantFaithful;
  auto runOracle = [&](const ref::TpMoeConfig &config,
                       const ref::TokenBatch &batch, ref::StageResults &results) {
    if (!facts.shared)
      return ref::runTpMoe(config, *w13Source_, *w2Source_, batch, results);
    ref::FhMoeConfig fh;
    fh.tp = config;
    ref::SharedExpertWeights shared{sharedW13_.data(), sharedW13Scales_.data(),
                                    sharedW2_.data(), sharedW2Scales_.data()};
    return ref::runFhMoe(fh, *w13Source_, *w2Source_, &shared, batch, results);
  };
  // The clamp case is also measured against the oracle without the clamp,
  // from which it must be far: otherwise it did not exercise the clamp.
  const bool clampCase = c.scenario == "clamp";
  double unclamped = clampCase ? INFINITY : 0.0;
  // With biases, every case is also measured against the oracle without
  // them (the largest distance over the ranks' outputs), from which it
  // must be far: a kernel that dropped its bias would not be.
  double unbiased = 0.0;
  bool pass = overflow == 0;
  // The kernels' distance from the oracle over the ranks; a non-finite
  // output element fails the case whatever the relative L2 says.
  emu::OutputDistance distance;
  int64_t zeroRowsWrong = 0, unwritten = 0;
  const uint32_t oracleRuns = ownBatches ? ep : 1;
  for (uint32_t r = 0; r < oracleRuns; ++r) {
    ref::StageResults results;
    ref::Status status = runOracle(tp, batches[r], results);
    if (!status.ok()) {
      report(false, name + ": oracle: " + status.message());
      return false;
    }
    if (saving)
      save(ownBatches ? "rank" + std::to_string(r) + "_oracle" : "oracle",
           npyOf(ref::NpyDtype::Float32, M, H, results.output));
    // The kernels' output: this rank's, or the sum of every rank's partial.
    std::vector<double> out(size_t(M * H), 0.0);
    const uint32_t parts = ownBatches ? 1 : ep;
    for (uint32_t p = 0; p < parts; ++p) {
      const std::vector<uint16_t> &bits = got[ownBatches ? r : p];
      for (size_t i = 0; i < out.size(); ++i) {
        if (bits[i] == 0xFFFF)
          ++unwritten;
        out[i] += ref::decodeBf16(bits[i]);
      }
    }
    for (int64_t t = 0; t < M; ++t) {
      bool anyValid = facts.shared;
      for (int64_t k = 0; k < K; ++k)
        anyValid |= ref::isValidExpert(batches[r].topkIds[size_t(t * K + k)], E);
      if (!anyValid)
        for (int64_t h = 0; h < H; ++h)
          zeroRowsWrong += out[size_t(t * H + h)] != 0.0;
    }
    distance.merge(emu::outputDistance(out, results.output));
    if (clampCase) {
      ref::TpMoeConfig noClamp = tp;
      noClamp.swigluLimit = 0.0;
      ref::StageResults loose;
      if (ref::Status status = runOracle(noClamp, batches[r], loose);
          !status.ok()) {
        report(false, name + ": oracle: " + status.message());
        return false;
      }
      unclamped = std::min(unclamped, relativeL2(out, loose.output));
    }
    if (facts.bias) {
      ref::TpMoeConfig noBias = tp;
      noBias.bias = ref::ExpertBias();
      ref::StageResults plain;
      if (ref::Status status = runOracle(noBias, batches[r], plain);
          !status.ok()) {
        report(false, name + ": oracle: " + status.message());
        return false;
      }
      unbiased = std::max(unbiased, relativeL2(out, plain.output));
    }
  }
  const double worst = distance.relL2;
  pass = pass && distance.within(kLayerRelL2Bound) && zeroRowsWrong == 0 &&
         unwritten == 0;
  if (clampCase)
    pass = pass && unclamped > kLayerRelL2Bound;
  if (facts.bias)
    pass = pass && unbiased > kLayerRelL2Bound;
  if (outputs)
    *outputs = got;
  if (print) {
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count() -
                           savingSeconds;
    if (saving) {
      entry["result"] = pass ? "PASS" : "FAIL";
      entry["rel_l2"] = worst;
      entry["bound"] = kLayerRelL2Bound;
      entry["zero_rows_wrong"] = zeroRowsWrong;
      entry["unwritten"] = unwritten;
      entry["non_finite"] = distance.nonFinite;
      entry["overflow"] = overflow;
      entry["time_s"] = seconds;
      if (clampCase)
        entry["unclamped_rel_l2"] = unclamped;
      if (facts.bias)
        entry["unbiased_rel_l2"] = unbiased;
      saver_->addCase(std::move(entry));
    }
    char line[512];
    std::string unclampedText =
        clampCase ? " unclamped_rel_l2=" + formatScientific(unclamped) +
                        " (must exceed the bound)"
                  : "";
    if (facts.bias)
      unclampedText += " unbiased_rel_l2=" + formatScientific(unbiased) +
                       " (must exceed the bound)";
    std::snprintf(line, sizeof(line),
                  "%s m=%u %s config=%s rel_l2=%.2e (bound %.4f)%s "
                  "zero_rows_wrong=%lld unwritten=%lld non_finite=%lld "
                  "overflow=%llu %.2f s",
                  name.c_str(), M, c.scenario.c_str(), configId.c_str(), worst,
                  kLayerRelL2Bound, unclampedText.c_str(),
                  (long long)zeroRowsWrong, (long long)unwritten,
                  (long long)distance.nonFinite, (unsigned long long)overflow,
                  seconds);
    report(pass, line);
  }
  return pass;
}

/// A device ordinal: decimal digits, below 2^16.
bool parseOrdinal(const std::string &text, int &ordinal) {
  if (text.empty() || text.size() > 5 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  ordinal = std::atoi(text.c_str());
  return ordinal < 65536;
}

int runSelftest(const SelftestArgs &args) {
  if (args.small && args.real) {
    std::cerr << "moec: --small and --real exclude each other\n";
    return cli::kBadInput;
  }
  const bool emulated = args.device == "emulated";
  int firstOrdinal = 0;
  if (!emulated && !parseOrdinal(args.device, firstOrdinal)) {
    std::cerr << "moec: --device " << args.device
              << ": a device ordinal or 'emulated'\n";
    return cli::kBadInput;
  }
  // --devices 2,3,0,1: rank r on the r-th device listed.
  std::vector<int> devices;
  if (!args.devices.empty()) {
    std::set<int> seen;
    size_t begin = 0;
    while (begin <= args.devices.size()) {
      size_t comma = args.devices.find(',', begin);
      if (comma == std::string::npos)
        comma = args.devices.size();
      int ordinal = 0;
      if (!parseOrdinal(args.devices.substr(begin, comma - begin), ordinal) ||
          !seen.insert(ordinal).second) {
        std::cerr << "moec: --devices " << args.devices
                  << ": a list of distinct device ordinals, e.g. 0,1,2,3\n";
        return cli::kBadInput;
      }
      devices.push_back(ordinal);
      begin = comma + 1;
    }
    firstOrdinal = devices.front();
  }
  std::unique_ptr<CaseSaver> saver;
  if (!args.saveDir.empty()) {
    std::string error;
    if (!(saver = CaseSaver::create(args.saveDir, error))) {
      std::cerr << "moec: " << error << "\n";
      return cli::kBadInput;
    }
  }
  std::unique_ptr<rt::Bundle> original = cli::openBundleOrReport(args.bundle);
  if (!original)
    return cli::kBadInput;
  std::unique_ptr<rt::Bundle> bundle;
  if (!args.real) {
    // The bundle's own table at a small shape, compiled here.
    TuningTable table = tableOfManifest(original->manifest(), args.bundle);
    const CompileOptions options = emu::smallShapeCompileOptions();
    options.rewriteTable(table);
    CompiledTable compiled;
    std::string error;
    if (compileTable(table, options, compiled, error) !=
        CompileStatus::Ok) {
      std::cerr << "moec: " << args.bundle << ": at the small shape: " << error
                << "\n";
      return cli::kBadInput;
    }
    BundleContents contents = buildBundleContents(table, compiled);
    const char *tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") +
                       "/moec-selftest-" + std::to_string(::getpid()) + ".moeb";
    if (!rt::writeBundle(path, rt::serializeManifest(contents.manifest),
                         contents.objects, error)) {
      std::cerr << "moec: " << error << "\n";
      return cli::kCheckFailed;
    }
    bundle = rt::Bundle::open(path, error);
    ::unlink(path.c_str());
    if (!bundle) {
      std::cerr << "moec: " << error << "\n";
      return cli::kCheckFailed;
    }
    std::printf("moec selftest: %s at a small shape (%zu kernels compiled)\n",
                args.bundle.c_str(), compiled.kernels.size());
  } else {
    bundle = std::move(original);
    std::printf("moec selftest: %s as compiled\n", args.bundle.c_str());
  }
  if (!args.network.empty()) {
    std::set<std::string> networks;
    for (const rt::SelectionTable &table : bundle->manifest().selection)
      networks.insert(table.network);
    if (!networks.count(args.network)) {
      std::string list;
      for (const std::string &network : networks)
        list += (list.empty() ? "" : ", ") + network;
      std::cerr << "moec: --network " << args.network << ": " << args.bundle
                << " has no table of that network (" << list << ")\n";
      return cli::kBadInput;
    }
  }
  std::string library;
  if (emulated) {
    library = emulatedLibraryPath();
    uint32_t ep = 1;
    for (const rt::SelectionTable &table : bundle->manifest().selection)
      ep = std::max(ep, table.ep);
    // One emulated device per EP rank (the variable is read at the
    // library's first use).
    const char *devices = std::getenv("MOEC_EMULATED_DEVICES");
    if (!devices || !*devices)
      setenv("MOEC_EMULATED_DEVICES", std::to_string(ep).c_str(), 1);
  } else {
    std::vector<std::string> candidates = rt::defaultHipLibraryCandidates();
    library = candidates.empty() ? "libamdhip64.so" : candidates.front();
    std::string error;
    for (const std::string &candidate : candidates)
      if (rt::HipLibrary::load({candidate}, error)) {
        library = candidate;
        break;
      }
  }
  Selftest selftest(args, *bundle, library, devices, firstOrdinal, saver.get());
  const int status = selftest.run();
  if (!saver || status == kNoDevice || status == cli::kBadInput)
    return status;
  nlohmann::json header = {
      {"format", "moec-selftest-save 1"},
      {"bundle", args.bundle},
      {"shape", args.real ? "real" : "small"},
      {"device", args.device},
      {"devices", devices},
      {"seed", args.seed},
      {"max_m", args.maxM},
      {"tolerance",
       "rel_l2 <= bound against the quantisation-faithful oracle; tokens "
       "without a valid route exactly zero; no output left unwritten"},
      {"passed", selftest.passed()},
      {"failed", selftest.failed()},
      {"skipped", selftest.skipped()}};
  std::string error;
  if (!saver->commit(std::move(header), error)) {
    std::cerr << "moec: " << error << "\n";
    return cli::kCheckFailed;
  }
  std::printf("saved %s\n", saver->directory().c_str());
  return status;
}

} // namespace

void addSelftestCommand(CLI::App &app, int &exitStatus) {
  auto args = std::make_shared<SelftestArgs>();
  CLI::App *cmd = app.add_subcommand(
      "selftest",
      "Run every table of a bundle through the layer API on a device and "
      "check it against the oracle");
  cmd->add_option("bundle", args->bundle, "bundle (.moeb)")->required();
  CLI::Option *device =
      cmd->add_option("--device", args->device,
                      "GPU ordinal (EP ranks on it and the devices after "
                      "it), or 'emulated' for the emulated HIP device")
          ->capture_default_str();
  cmd->add_option("--devices", args->devices,
                  "the device of each EP rank, in rank order (0,1,2,3)")
      ->excludes(device);
  cmd->add_option("--network", args->network,
                  "only the tables of this network (default: every table)");
  cmd->add_option("--activation", args->activation,
                  "the oracle's W13 activation, silu or gpt-oss-swiglu "
                  "(default: the one the W13 kernels were compiled with; "
                  "another must fail)")
      ->check(CLI::IsMember({"silu", "gpt-oss-swiglu"}));
  cmd->add_option("--save", args->saveDir,
                  "write every case's inputs, outputs and the oracle's output "
                  "(.npy) and manifest.json into this new directory");
  cmd->add_flag("--small", args->small,
                "compile the bundle's table at a small shape with the same "
                "knobs and run that (the default)");
  cmd->add_flag("--real", args->real, "run the bundle's kernels as compiled");
  cmd->add_option("--repeat", args->repeat,
                  "then run N forwards with changing M and check that "
                  "repeated shapes give identical outputs");
  cmd->add_option("--max-m", args->maxM,
                  "skip cases above this M (a quicker run)");
  cmd->add_option("--seed", args->seed, "seed of the generated data")
      ->capture_default_str();
  cmd->callback([args, &exitStatus] { exitStatus = runSelftest(*args); });
}
