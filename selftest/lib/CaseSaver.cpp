//===- CaseSaver.cpp - moec selftest --save DIR ---------------------------===//

#include "moec/Selftest/CaseSaver.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace moec::selftest {

std::unique_ptr<CaseSaver> CaseSaver::create(const std::string &dir,
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

CaseSaver::~CaseSaver() {
  if (!committed_) {
    std::error_code ignored;
    std::filesystem::remove_all(partial_, ignored);
  }
}

std::string CaseSaver::beginCase() {
  return beginDirectory("case-%04d", caseCount_);
}

std::string CaseSaver::beginWeights() {
  return beginDirectory("weights-%04d", weightsCount_);
}

std::string CaseSaver::beginDirectory(const char *format, int &count) {
  char name[32];
  std::snprintf(name, sizeof(name), format, count++);
  std::error_code ec;
  std::filesystem::create_directory(partial_ + "/" + name, ec);
  if (ec && error_.empty())
    error_ = partial_ + "/" + name + ": " + ec.message();
  return name;
}

void CaseSaver::save(const std::string &caseName, const std::string &file,
                     const ref::NpyArray &array, nlohmann::json &entry) {
  const std::string path = partial_ + "/" + caseName + "/" + file + ".npy";
  ref::Status status = ref::writeNpy(path, array);
  if (!status.ok() && error_.empty())
    error_ = status.message();
  entry["files"].push_back(file + ".npy");
}

bool CaseSaver::commit(nlohmann::json header, std::string &error) {
  if (!error_.empty()) {
    error = "--save: " + error_;
    return false;
  }
  header["cases"] = cases_;
  header["weights"] = weights_;
  header["skipped"] = skips_;
  header["lines"] = lines_;
  const std::string text = header.dump(1) + "\n";
  // The directory is renamed into place below, so the manifest needs no
  // temporary of its own: nobody sees it until then.
  const std::string manifest = partial_ + "/manifest.json";
  {
    std::ofstream out(manifest, std::ios::binary | std::ios::trunc);
    out.write(text.data(), std::streamsize(text.size()));
    if (!out.flush()) {
      error = manifest + ": cannot write";
      return false;
    }
  }
  if (::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, final_.c_str(),
                  RENAME_NOREPLACE) != 0) {
    error = "--save " + final_ + ": " + std::strerror(errno);
    return false;
  }
  committed_ = true;
  return true;
}

} // namespace moec::selftest
