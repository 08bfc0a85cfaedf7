//===- SelftestRunner.h - running a bundle's tables and cases ---*- C++ -*-===//
///
/// \file
/// Internal to the self-test library: the runner of every table of one
/// opened bundle (TableRunner.cpp) and of one case on a table's ranks
/// (CaseRunner.cpp). runSelftest() (Selftest.cpp) prepares the bundle and
/// the HIP library and saves the cases.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_SELFTEST_LIB_SELFTESTRUNNER_H
#define MOEC_SELFTEST_LIB_SELFTESTRUNNER_H

#include "moec/Harness/LayerSetup.h"
#include "moec/Selftest/CaseSaver.h"
#include "moec/Selftest/Cases.h"
#include "moec/Selftest/Oracle.h"
#include "moec/Selftest/Selftest.h"
#include "moec/bundle.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moec::selftest {

/// printf's format of `args`, as a string (at most `size` - 1 characters).
template <size_t size = 512, typename... Args>
std::string formatLine(const char *format, Args... args) {
  char text[size];
  std::snprintf(text, sizeof(text), format, args...);
  return text;
}

/// Seconds since `start`.
inline double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// The tables of one opened bundle on the devices of a HIP library.
class SelftestRunner {
public:
  SelftestRunner(const SelftestOptions &options, const SelftestOutput &output,
                 const rt::Bundle &bundle, std::string libraryPath,
                 std::vector<int> devices, int firstOrdinal, CaseSaver *saver)
      : options_(options), output_(output), bundle_(bundle),
        libraryPath_(std::move(libraryPath)), devices_(std::move(devices)),
        firstOrdinal_(firstOrdinal), saver_(saver) {}

  /// Runs every table (of --network, when given).
  SelftestStatus run();
  int passed() const { return passed_; }
  int failed() const { return failed_; }
  int skipped() const { return skipped_; }

private:
  /// One table's ranks and the device memory they own.
  struct TableRanks {
    std::vector<harness::Rank> ranks;
    std::vector<std::unique_ptr<harness::DeviceMemory>> memory;
  };
  /// One case's files under --save; the time spent writing them is left
  /// out of the case's time.
  struct SavedCase {
    CaseSaver *saver = nullptr;
    std::string directory;
    nlohmann::json entry;
    double savingSeconds = 0.0;
    void save(const std::string &file, const ref::NpyArray &array);
  };

  // TableRunner.cpp
  /// Refuses (BadInput) before any device is opened when the oracle cannot
  /// model one of the tables.
  SelftestStatus checkTables() const;
  /// Opens the first device and reads how many devices the HIP library
  /// reports; NoDevice when it cannot.
  SelftestStatus probeDevices();
  /// The device of each of `ep` ranks: one device per rank when the HIP
  /// library has them (--devices, or --device N and the devices after it);
  /// otherwise every rank on the first device, which only unfused ranks
  /// allow. False with `skip` when a fused table cannot be placed.
  bool placeRanks(uint32_t ep, bool fused, std::vector<int> &ordinals,
                  std::string &skip) const;
  SelftestStatus runTable(uint32_t tableIndex);
  /// Says where the ranks run and what the kernels compute.
  void describeTable(const std::string &name, const harness::TableFacts &facts,
                     const std::vector<int> &ordinals) const;
  /// Opens every rank's device, loader and layer. False when the table
  /// ends there, with `status` NoDevice or, after a failed case line,
  /// Passed.
  bool openRanks(uint32_t tableIndex, const harness::TableFacts &facts,
                 const std::vector<int> &ordinals, TableRanks &table,
                 SelftestStatus &status);
  /// Generates the table's weights and sets every rank up with them; false
  /// after a failed case line.
  bool setUpRanks(const rt::SelectionTable &table,
                  const harness::TableFacts &facts, TableRanks &ranks);
  /// --save: the table's weights in checkpoint layout into a directory its
  /// cases name (at the small shape, or with --save-weights); otherwise
  /// its cases name none.
  void saveTableWeights(const rt::SelectionTable &table,
                        const harness::TableFacts &facts,
                        const harness::HostLayerWeights &host);
  /// --repeat: many forwards with changing M; a repeated case (M and its
  /// scenario: the clamp case shares an M with a random one) must give the
  /// same output bits as its first run.
  void runRepeats(const rt::SelectionTable &table,
                  const harness::TableFacts &facts,
                  std::vector<harness::Rank> &ranks,
                  const std::vector<Case> &cases);

  // CaseRunner.cpp
  /// Runs case `c` and checks it; prints and saves its line when `print`.
  /// `outputs`, when given, receives every rank's output bits.
  bool runCase(const rt::SelectionTable &table, const harness::TableFacts &facts,
               std::vector<harness::Rank> &ranks, const Case &c,
               uint64_t caseSeed, std::vector<std::vector<uint16_t>> *outputs,
               bool print);
  /// Uploads every rank's tokens, runs the forwards and reads back the
  /// outputs and the overflow count; false after a failed case line.
  bool runForwards(const std::string &name, std::vector<harness::Rank> &ranks,
                   const std::vector<ref::TokenBatch> &batches, uint32_t m,
                   const harness::TableFacts &facts,
                   std::vector<std::vector<uint16_t>> &got, uint64_t &overflow);
  /// Starts case `c`'s --save entry and saves its inputs and outputs.
  void saveCaseInputs(SavedCase &saved, const rt::SelectionTable &table,
                      const harness::TableFacts &facts, const Case &c,
                      const std::string &configId,
                      const std::vector<ref::TokenBatch> &batches,
                      const std::vector<std::vector<uint16_t>> &got);
  /// The "overflow" case: every route names one expert, and the layer must
  /// report the routes beyond its receive rows.
  bool checkOverflow(const std::string &name, const harness::TableFacts &facts,
                     std::vector<harness::Rank> &ranks, const Case &c,
                     const std::vector<ref::TokenBatch> &batches,
                     uint64_t overflow, SavedCase *saved,
                     std::chrono::steady_clock::time_point start);
  /// Prints and saves an oracle-checked case's line.
  void reportCase(const std::string &name, const Case &c,
                  const std::string &configId, bool pass, uint64_t overflow,
                  const OracleComparison &comparison, bool clampCase,
                  bool bias, SavedCase *saved,
                  std::chrono::steady_clock::time_point start);

  /// The oracle's activation: --activation, or the kernels' own.
  bool oracleGptOss(const harness::TableFacts &facts) const {
    return options_.activation.empty() ? facts.gptOssSwiglu
                                       : options_.activation == "gpt-oss-swiglu";
  }
  /// A case's line: PASS or FAIL, counted and saved.
  void report(bool pass, const std::string &line);
  void error(const std::string &text) const { output_.error(text); }
  void line(const std::string &text) const { output_.line(text); }

  const SelftestOptions &options_;
  const SelftestOutput &output_;
  const rt::Bundle &bundle_;
  std::string libraryPath_;
  std::vector<int> devices_;
  int firstOrdinal_ = 0;
  int deviceCount_ = 0;
  CaseSaver *saver_ = nullptr;
  int passed_ = 0, failed_ = 0, skipped_ = 0;
  /// The weights of the current table (host, checkpoint numbering).
  SelftestWeights weights_;
  /// Where --save put them ("weights-0000"), or empty.
  std::string weightsDirectory_;
};

} // namespace moec::selftest

#endif // MOEC_SELFTEST_LIB_SELFTESTRUNNER_H
