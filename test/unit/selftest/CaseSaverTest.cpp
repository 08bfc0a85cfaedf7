// moec selftest --save: the directory appears complete or not at all.

#include "moec/Selftest/CaseSaver.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace moec;
using namespace moec::selftest;
namespace fs = std::filesystem;

namespace {

/// A fresh directory under the temporary directory, removed at the end.
struct ScratchDirectory {
  fs::path path;
  ScratchDirectory() {
    path = fs::temp_directory_path() /
           ("moec-casesaver-test-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

nlohmann::json readJson(const fs::path &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

} // namespace

TEST_CASE("saved cases appear under DIR only once committed", "[selftest][save]") {
  ScratchDirectory scratch;
  const std::string dir = (scratch.path / "cases").string();
  std::string error;
  std::unique_ptr<CaseSaver> saver = CaseSaver::create(dir, error);
  REQUIRE(saver);
  CHECK(error.empty());
  CHECK_FALSE(fs::exists(dir));
  REQUIRE(fs::is_directory(saver->partialDirectory()));

  const std::string name = saver->beginCase();
  CHECK(name == "case-0000");
  CHECK(saver->beginCase() == "case-0001");
  nlohmann::json entry = {{"case", name}, {"files", nlohmann::json::array()}};
  saver->save(name, "topk_ids",
              npyOf(ref::NpyDtype::Int32, 2, 3, std::vector<int32_t>{0, 1, 2, 3, 4, -1}),
              entry);
  entry["result"] = "PASS";
  saver->addCase(entry);
  saver->addLine("PASS a line");
  saver->skipped("flash ep8 ws1024", "no devices");
  CHECK(saver->error().empty());

  REQUIRE(saver->commit({{"format", "moec-selftest-save 1"}}, error));
  CHECK(error.empty());
  CHECK(fs::is_directory(dir));
  CHECK_FALSE(fs::exists(saver->partialDirectory()));
  CHECK(fs::is_regular_file(fs::path(dir) / name / "topk_ids.npy"));
  const nlohmann::json manifest = readJson(fs::path(dir) / "manifest.json");
  CHECK(manifest["format"] == "moec-selftest-save 1");
  REQUIRE(manifest["cases"].size() == 1);
  CHECK(manifest["cases"][0]["files"] == nlohmann::json::array({"topk_ids.npy"}));
  CHECK(manifest["cases"][0]["result"] == "PASS");
  CHECK(manifest["lines"] == nlohmann::json::array({"PASS a line"}));
  CHECK(manifest["skipped"][0]["reason"] == "no devices");
  // The committed directory outlives its saver.
  saver.reset();
  CHECK(fs::is_directory(dir));
}

TEST_CASE("an abandoned save leaves nothing behind", "[selftest][save]") {
  ScratchDirectory scratch;
  const std::string dir = (scratch.path / "cases").string();
  std::string error;
  std::unique_ptr<CaseSaver> saver = CaseSaver::create(dir, error);
  REQUIRE(saver);
  const std::string partial = saver->partialDirectory();
  saver->beginCase();
  saver.reset();
  CHECK_FALSE(fs::exists(partial));
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("--save refuses an existing directory and a missing parent",
          "[selftest][save]") {
  ScratchDirectory scratch;
  std::string error;
  CHECK_FALSE(CaseSaver::create(scratch.path.string(), error));
  CHECK(error.find("exists") != std::string::npos);
  error.clear();
  CHECK_FALSE(CaseSaver::create((scratch.path / "no" / "cases").string(), error));
  CHECK(error.find("is not a directory") != std::string::npos);
}
