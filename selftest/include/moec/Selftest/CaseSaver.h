//===- CaseSaver.h - moec selftest --save DIR -------------------*- C++ -*-===//
///
/// \file
/// Every case's inputs, outputs and the oracle's output as .npy files and
/// manifest.json listing every case with its result. Everything is written
/// into DIR.partial-PID beside DIR, which is renamed to DIR (never
/// replacing anything) once the manifest is in it: DIR appears complete or
/// not at all (docs/cli.md, "Saved cases").
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_SELFTEST_CASESAVER_H
#define MOEC_SELFTEST_CASESAVER_H

#include "moec/reference/Npy.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moec::selftest {

class CaseSaver {
public:
  /// Refuses (nullptr with `error`) when DIR exists or its parent is not a
  /// writable directory.
  static std::unique_ptr<CaseSaver> create(const std::string &dir,
                                           std::string &error);
  /// Removes the partial directory unless it was committed.
  ~CaseSaver();
  CaseSaver(const CaseSaver &) = delete;
  CaseSaver &operator=(const CaseSaver &) = delete;

  /// A new case; returns its directory's name ("case-0003").
  std::string beginCase();
  /// A new directory for a table's weights ("weights-0001"), which its
  /// cases name.
  std::string beginWeights();
  /// Writes `file`.npy into the case's directory and lists it in `entry`.
  void save(const std::string &caseName, const std::string &file,
            const ref::NpyArray &array, nlohmann::json &entry);
  void addCase(nlohmann::json entry) { cases_.push_back(std::move(entry)); }
  /// A weights directory's entry (manifest.json's "weights").
  void addWeights(nlohmann::json entry) { weights_.push_back(std::move(entry)); }
  void addLine(const std::string &line) { lines_.push_back(line); }
  void skipped(const std::string &table, const std::string &reason) {
    skips_.push_back({{"table", table}, {"reason", reason}});
  }
  /// The first error writing a case, or empty.
  const std::string &error() const { return error_; }

  /// Writes manifest.json (`header` plus the cases) and renames the
  /// directory into place.
  bool commit(nlohmann::json header, std::string &error);
  const std::string &directory() const { return final_; }
  /// Where the files are written until commit().
  const std::string &partialDirectory() const { return partial_; }

private:
  CaseSaver() = default;
  /// Creates `name` (printf format of the count) under the partial
  /// directory; returns the name.
  std::string beginDirectory(const char *format, int &count);
  std::string final_, partial_, error_;
  int caseCount_ = 0, weightsCount_ = 0;
  bool committed_ = false;
  nlohmann::json cases_ = nlohmann::json::array(),
                 weights_ = nlohmann::json::array(),
                 skips_ = nlohmann::json::array(),
                 lines_ = nlohmann::json::array();
};

/// A [rows, columns] .npy array of `values`.
template <typename T>
ref::NpyArray npyOf(ref::NpyDtype dtype, int64_t rows, int64_t columns,
                    const std::vector<T> &values) {
  return ref::NpyArray::fromVector(dtype, {rows, columns}, values);
}

} // namespace moec::selftest

#endif // MOEC_SELFTEST_CASESAVER_H
