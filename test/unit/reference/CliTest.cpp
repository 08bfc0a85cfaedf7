// `moec reference` driven in process through CLI11: files written, inputs
// read back, --compare, exit statuses and one-line errors.

#include "moec/reference/ReferenceCommand.h"

#include "moec/reference/Npy.h"

#include <CLI/CLI.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

using namespace moec::ref;
namespace fs = std::filesystem;

namespace {

struct CliRun {
  int status = -1;
  std::string errors;
};

/// Runs `moec <commandLine>` with the reference subcommand registered.
CliRun runCli(const std::string &commandLine) {
  CLI::App app{"moec"};
  app.require_subcommand(1);
  int exitStatus = 0;
  addReferenceCommand(app, exitStatus);
  std::stringstream captured;
  std::streambuf *saved = std::cerr.rdbuf(captured.rdbuf());
  CliRun run;
  try {
    app.parse(commandLine, /*program_name_included=*/false);
    run.status = exitStatus;
  } catch (const CLI::ParseError &) {
    run.status = 2;
  }
  std::cerr.rdbuf(saved);
  run.errors = captured.str();
  return run;
}

std::string freshDir(const std::string &name) {
  fs::path dir = fs::temp_directory_path() / ("moec-ref-cli-" + name);
  fs::remove_all(dir);
  return dir.string();
}

std::vector<uint8_t> fileBytes(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
}

} // namespace

TEST_CASE("moec reference: generate, write inputs, read them back", "[cli]") {
  std::string first = freshDir("tp1"), second = freshDir("tp2");
  CliRun run = runCli("reference --family tp --shape small --m 13 --seed 5 "
                      "--m-tile 8 --write-inputs --stages -o " + first);
  REQUIRE(run.status == 0);
  for (const char *name : {"w13.npy", "w13_scale.npy", "w2.npy", "w2_scale.npy",
                           "hidden_states.npy", "topk_ids.npy", "topk_weights.npy",
                           "output.npy", "output_bf16.npy", "sorted_route_ids.npy",
                           "tile_expert_ids.npy", "input_fp8.npy", "input_scale.npy",
                           "activation.npy", "intermediate_fp8.npy",
                           "intermediate_scale.npy", "down.npy"})
    CHECK(fs::exists(fs::path(first) / name));
  NpyArray output;
  REQUIRE(readNpy(first + "/output.npy", output).ok());
  CHECK(output.shape == std::vector<int64_t>{13, 256});
  CHECK(output.dtype == NpyDtype::Float32);

  run = runCli("reference --family tp --inputs " + first + " --m-tile 8 -o " + second);
  REQUIRE(run.status == 0);
  CHECK(fileBytes(first + "/output.npy") == fileBytes(second + "/output.npy"));

  // --compare DIR with `candidate` written as DIR/output.npy.
  auto compareWith = [&](const std::string &name, const NpyArray &candidate) {
    std::string dir = freshDir(name);
    fs::create_directories(dir);
    REQUIRE(writeNpy(dir + "/output.npy", candidate).ok());
    return runCli("reference --family tp --inputs " + first + " -o " + second +
                  " --compare " + dir);
  };
  auto floats = [&](const std::vector<float> &values) {
    return NpyArray::fromVector(NpyDtype::Float32, output.shape, values);
  };

  // Identical output passes; a perturbed one fails with status 1.
  CHECK(compareWith("tp3", output).status == 0);
  std::vector<float> values = output.toVector<float>();
  for (float &value : values)
    value *= 1.5f;
  run = compareWith("tp3", floats(values));
  CHECK(run.status == 1);
  CHECK(run.errors.find("exceeds tolerance") != std::string::npos);

  // The oracle's own BF16 rounding (what a kernel writes) passes the
  // per-element bound and the 2^-7 relative L2.
  NpyArray bf16;
  REQUIRE(readNpy(first + "/output_bf16.npy", bf16).ok());
  CHECK(compareWith("tp4", bf16).status == 0);
  // One element 3 % off: the relative L2 stays far below 2^-7, the element
  // bound (about 2^-8 of the value) catches it.
  values = output.toVector<float>();
  size_t largest = 0;
  for (size_t i = 0; i < values.size(); ++i)
    if (std::fabs(values[i]) > std::fabs(values[largest]))
      largest = i;
  values[largest] *= 1.03f;
  run = compareWith("tp4", floats(values));
  CHECK(run.status == 1);
  CHECK(run.errors.find("1 elements over their bound (worst: element " +
                        std::to_string(largest)) != std::string::npos);
  // A NaN fails whatever the relative L2 says.
  values = output.toVector<float>();
  values[7] = std::numeric_limits<float>::quiet_NaN();
  run = compareWith("tp4", floats(values));
  CHECK(run.status == 1);
  CHECK(run.errors.find("1 non-finite elements") != std::string::npos);
}

TEST_CASE("moec reference: megamoe ranks, empty rank, overflow status", "[cli]") {
  std::string dir = freshDir("mega");
  CliRun run = runCli("reference --family megamoe --shape small-ep --ep 2 "
                      "--m 5,0 --transport compact --stages -o " + dir);
  REQUIRE(run.status == 0);
  NpyArray rank1, source;
  REQUIRE(readNpy(dir + "/rank1.output.npy", rank1).ok());
  CHECK(rank1.shape == std::vector<int64_t>{0, 128});
  REQUIRE(readNpy(dir + "/rank0.recv_source.npy", source).ok());
  CHECK(source.shape.size() == 2);
  run = runCli("reference --family megamoe --shape small-ep --ep 4 --m 8 "
               "--hot-rank 1 --slot-capacity 4 -o " + dir);
  CHECK(run.status == 1);
  CHECK(run.errors.find("fixed-slot dispatch overflow: rank 1") != std::string::npos);
}

TEST_CASE("moec reference: fhmoe with and without the shared expert", "[cli]") {
  std::string dir = freshDir("fh");
  REQUIRE(runCli("reference --family fhmoe --shape small --m 4 --write-inputs -o " + dir).status == 0);
  CHECK(fs::exists(fs::path(dir) / "shared_w13.npy"));
  std::string omitted = freshDir("fh2"), tp = freshDir("fh3");
  REQUIRE(runCli("reference --family fhmoe --shape small --m 4 --no-shared -o " + omitted).status == 0);
  REQUIRE(runCli("reference --family tp --shape small --m 4 -o " + tp).status == 0);
  CHECK(fileBytes(omitted + "/output.npy") == fileBytes(tp + "/output.npy"));
}

TEST_CASE("moec reference: bad usage and bad inputs exit 2 with one line", "[cli]") {
  std::string dir = freshDir("bad");
  CliRun run = runCli("reference --family tp --m 4 -o " + dir);
  CHECK(run.status == 2);
  CHECK(run.errors.find("--shape") != std::string::npos);
  run = runCli("reference --family tp --shape nope -o " + dir);
  CHECK(run.status == 2);
  CHECK(run.errors.find("unknown shape 'nope'") != std::string::npos);
  run = runCli("reference --family tp --shape small --m 4,x -o " + dir);
  CHECK(run.status == 2);
  run = runCli("reference --family tp --shape small --hot-rank 1 -o " + dir);
  CHECK(run.status == 2);
  CHECK(run.errors.find("--hot-rank") != std::string::npos);
  run = runCli("reference --family megamoe --shape small-ep --ep 3 -o " + dir);
  CHECK(run.status == 2);
  CHECK(run.errors.find("EP size 3") != std::string::npos);
  REQUIRE(runCli("reference --family tp --shape small --m 3 --write-inputs -o " + dir).status == 0);
  {
    std::ofstream corrupt(dir + "/w2_scale.npy", std::ios::binary | std::ios::trunc);
    corrupt << "garbage";
  }
  run = runCli("reference --family tp --inputs " + dir + " -o " + dir);
  CHECK(run.status == 2);
  CHECK(run.errors.find(dir + "/w2_scale.npy: not a .npy file") != std::string::npos);
  CHECK(std::count(run.errors.begin(), run.errors.end(), '\n') == 1);
  fs::remove(dir + "/topk_weights.npy");
  run = runCli("reference --family tp --inputs " + dir + " -o " + dir);
  CHECK(run.status == 2);
}

TEST_CASE("moec reference: --activation gpt-oss-swiglu and the bias inputs",
          "[cli][gptoss]") {
  std::string silu = freshDir("act-silu"), gptOss = freshDir("act-gptoss"),
              clamped = freshDir("act-clamp7"), other = freshDir("act-other");
  REQUIRE(runCli("reference --family tp --shape small --m 9 --write-inputs -o " +
                 silu)
              .status == 0);
  REQUIRE(runCli("reference --family tp --inputs " + silu +
                 " --activation gpt-oss-swiglu -o " + gptOss)
              .status == 0);
  // AITER's clamp of 7 is the default for GPT-OSS's SwiGLU.
  REQUIRE(runCli("reference --family tp --inputs " + silu +
                 " --activation gpt-oss-swiglu --swiglu-limit 7 -o " + clamped)
              .status == 0);
  CHECK(fileBytes(gptOss + "/output.npy") == fileBytes(clamped + "/output.npy"));
  CHECK(fileBytes(gptOss + "/output.npy") != fileBytes(silu + "/output.npy"));
  // SiLU checked against the GPT-OSS output fails.
  CliRun run = runCli("reference --family tp --inputs " + silu + " -o " + other +
                      " --compare " + gptOss);
  CHECK(run.status == 1);
  run = runCli("reference --family tp --shape small --activation gelu -o " + other);
  CHECK(run.status == 2);

  // Biases from the inputs directory: all-zero ones change no bit, a W2
  // bias changes the output, a wrong shape is refused naming the file.
  NpyArray w13, w2;
  REQUIRE(readNpy(silu + "/w13.npy", w13).ok());
  REQUIRE(readNpy(silu + "/w2.npy", w2).ok());
  const int64_t experts = w13.shape[0], twoI = w13.shape[1], hidden = w2.shape[1];
  auto writeBias = [&](const std::string &name, std::vector<int64_t> shape,
                       float value) {
    std::vector<float> values(shape[0] * shape[1], value);
    REQUIRE(writeNpy(silu + "/" + name,
                     NpyArray::fromVector(NpyDtype::Float32, shape, values))
                .ok());
  };
  writeBias("w13_bias.npy", {experts, twoI}, 0.0f);
  writeBias("w2_bias.npy", {experts, hidden}, 0.0f);
  REQUIRE(runCli("reference --family tp --inputs " + silu +
                 " --activation gpt-oss-swiglu -o " + other)
              .status == 0);
  CHECK(fileBytes(other + "/output.npy") == fileBytes(gptOss + "/output.npy"));
  writeBias("w2_bias.npy", {experts, hidden}, 0.5f);
  REQUIRE(runCli("reference --family tp --inputs " + silu +
                 " --activation gpt-oss-swiglu -o " + other)
              .status == 0);
  CHECK(fileBytes(other + "/output.npy") != fileBytes(gptOss + "/output.npy"));
  writeBias("w2_bias.npy", {experts + 1, hidden}, 0.5f);
  run = runCli("reference --family tp --inputs " + silu + " -o " + other);
  CHECK(run.status == 2);
  CHECK(run.errors.find(silu + "/w2_bias.npy") != std::string::npos);
}
