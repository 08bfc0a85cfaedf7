#include "test_support.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace moec::test {

TempDir::TempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/moec-rt-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!::mkdtemp(buffer.data()))
    throw std::runtime_error("mkdtemp failed");
  path_ = buffer.data();
}

TempDir::~TempDir() {
  for (const std::string &entry : entries()) {
    std::string full = file(entry);
    struct stat info;
    if (::lstat(full.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      // One level of subdirectories is enough for these tests.
      DIR *dir = ::opendir(full.c_str());
      if (dir) {
        while (dirent *e = ::readdir(dir))
          if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
            ::unlink((full + "/" + e->d_name).c_str());
        ::closedir(dir);
      }
      ::rmdir(full.c_str());
    } else {
      ::unlink(full.c_str());
    }
  }
  ::rmdir(path_.c_str());
}

std::vector<std::string> TempDir::entries() const {
  std::vector<std::string> names;
  DIR *dir = ::opendir(path_.c_str());
  if (!dir)
    return names;
  while (dirent *entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..")
      names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<uint8_t> amdgpuElfHeader(uint32_t mach) {
  std::vector<uint8_t> h(64, 0);
  const uint8_t ident[] = {0x7f, 'E', 'L', 'F', 2 /*ELFCLASS64*/, 1 /*LSB*/,
                           1 /*EV_CURRENT*/, 64 /*ELFOSABI_AMDGPU_HSA*/,
                           4 /*ABI version (code object v6)*/};
  std::copy(std::begin(ident), std::end(ident), h.begin());
  auto put = [&](size_t at, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i)
      h[at + i] = static_cast<uint8_t>(value >> (8 * i));
  };
  put(16, 3, 2);      // e_type ET_DYN
  put(18, 224, 2);    // e_machine EM_AMDGPU
  put(20, 1, 4);      // e_version
  put(48, mach, 4);   // e_flags
  put(52, 64, 2);     // e_ehsize
  put(54, 56, 2);     // e_phentsize (no program headers)
  put(58, 64, 2);     // e_shentsize (no section headers)
  return h;
}

std::vector<uint8_t> syntheticCodeObject(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  uint32_t state = 0x9e3779b9u ^ seed;
  for (size_t i = 0; i < size; ++i) {
    state = state * 1664525u + 1013904223u;
    bytes[i] = static_cast<uint8_t>(state >> 24);
  }
  const std::vector<uint8_t> header = amdgpuElfHeader(0x04f /*gfx950*/);
  std::copy(header.begin(), header.begin() + std::min(size, header.size()),
            bytes.begin());
  return bytes;
}

nlohmann::json kernelJson(const std::string &name, uint32_t codeObject,
                          uint32_t vgpr, uint32_t ldsBytes) {
  using nlohmann::json;
  return json{
      {"name", name},
      {"symbol", name + "_kernel"},
      {"code_object", codeObject},
      {"stage", "w2"},
      {"attributes", {{"tile", "#moe.tile<m = 32, n = 128, b_cache = nt>"},
                      {"split_k", "1 : i64"}}},
      {"abi",
       json::array({{{"name", "a"}, {"kind", "buffer"}, {"dtype", "f8E4M3FN"}, {"access", "read"}},
                    {{"name", "out"}, {"kind", "buffer"}, {"dtype", "bf16"}, {"access", "write"}},
                    {{"name", "m"}, {"kind", "i32"}},
                    {{"name", "stride"}, {"kind", "i64"}}})},
      {"launch",
       {{"workgroup_size", {256, 1, 1}},
        {"grid", {{"x", "ceil(m / 32)"}, {"y", "n / 128"}, {"z", "1"}}}}},
      {"resources",
       {{"vgpr", vgpr},
        {"agpr", 0},
        {"sgpr", 40},
        {"lds_bytes", ldsBytes},
        {"private_segment_bytes", 0},
        {"vgpr_spill", 0},
        {"sgpr_spill", 0},
        {"wavefront_size", 64},
        {"max_flat_workgroup_size", 256}}},
      {"content_hash", "0123456789abcdef"},
  };
}

nlohmann::json quantLayerManifest(uint32_t ldsBytes, bool sharedExpert,
                                  uint32_t ep) {
  using nlohmann::json;
  json kernel = kernelJson("moe_quant_aaaa0004", 0, 64, ldsBytes);
  kernel["stage"] = "quant";
  kernel["attributes"] = {
      {"problem", std::string("#moe.problem<hidden = 256, intermediate = 128, ") +
                      (sharedExpert ? "experts = 9, top_k = 3" : "experts = 8, top_k = 2") +
                      (ep > 1 ? ", ep = " + std::to_string(ep) : std::string()) + ">"}};
  if (sharedExpert)
    kernel["attributes"]["shared_fp8_expert"] = "true";
  kernel["abi"] = json::array(
      {{{"name", "x"}, {"kind", "buffer"}, {"dtype", "bf16"}, {"access", "read"}},
       {{"name", "out"}, {"kind", "buffer"}, {"dtype", "f8E4M3FN"}, {"access", "write"}},
       {{"name", "out_scale"}, {"kind", "buffer"}, {"dtype", "ui8"}, {"access", "write"}},
       {{"name", "num_tokens"}, {"kind", "i32"}}});
  kernel["launch"]["grid"] = {{"x", "num_tokens"}, {"y", "1"}, {"z", "1"}};
  json manifest = sampleManifest();
  manifest["kernels"] = json::array({kernel});
  manifest["configs"] =
      json::array({{{"id", "quant"}, {"kernels", {0}}, {"provenance", "measured"}}});
  manifest["selection"] = json::array(
      {{{"network", "flash"}, {"family", "megamoe"}, {"ep", ep}, {"workspace", 16},
        {"transport", "fixed-slot"}, {"above_max", "largest"},
        {"rows", json::array({{{"m", 16}, {"config", 0}}})}}});
  return manifest;
}

nlohmann::json sampleManifest() {
  using nlohmann::json;
  json manifest = {
      {"target", {{"arch", "gfx950"}, {"features", "sramecc+:xnack-"}, {"code_object_version", 6}}},
      {"compiler",
       {{"name", "moec"}, {"version", "0.1.0"}, {"llvm", "22.1.8"}, {"fingerprint", "abcdef01"}}},
      {"numerics", {{"activation_quant", "e8m0-ceil-1x32"}, {"accumulate", "f32"}}},
      {"sources", json::array({{{"path", "tuning_tables/flash.txt"}, {"hash", "00ff"}}})},
      {"kernels", json::array({kernelJson("moe2_w2_t32x128_aaaa0001", 0, 128, 65536),
                               kernelJson("moe2_w2_t64x128_aaaa0002", 0, 96, 32768),
                               kernelJson("moe2_w2_t128x256_aaaa0003", 1, 200, 98304)})},
      {"configs", json::array({{{"id", "small"}, {"kernels", {0}}, {"provenance", "measured"}},
                               {{"id", "medium"}, {"kernels", {1, 0}}, {"provenance", "measured"}},
                               {{"id", "large"}, {"kernels", {2}}, {"provenance", "model-ranked"}}})},
      {"selection",
       json::array(
           {{{"network", "flash"}, {"family", "megamoe"}, {"ep", 4}, {"workspace", 1024},
             {"transport", "fixed-slot"}, {"above_max", "largest"},
             {"rows", json::array({{{"m", 6}, {"config", 0}},
                                   {{"m", 12}, {"config", 1}},
                                   {{"m", 24}, {"config", 1}},
                                   {{"m", 64}, {"config", 2}}})}},
            {{"network", "flash"}, {"family", "megamoe"}, {"ep", 4}, {"workspace", 16384},
             {"transport", "compact"}, {"above_max", "error"},
             {"rows", json::array({{{"m", 64}, {"config", 1}},
                                   {{"m", 512}, {"config", 2}},
                                   {{"m", 4096}, {"config", 2}}})}},
            {{"network", "flash"}, {"family", "megamoe"}, {"ep", 2}, {"workspace", 512},
             {"transport", "fixed-slot"}, {"above_max", "largest"},
             {"rows", json::array({{{"m", 1}, {"config", 0}}, {{"m", 8}, {"config", 2}}})}}})},
  };
  return manifest;
}

std::vector<std::vector<uint8_t>> sampleCodeObjects() {
  return {syntheticCodeObject(1500, 1), syntheticCodeObject(5000, 2)};
}

nlohmann::json manifestWithRows(const std::vector<uint32_t> &ms,
                                const std::string &aboveMax) {
  using nlohmann::json;
  json manifest = sampleManifest();
  json rows = json::array();
  for (uint32_t m : ms)
    rows.push_back({{"m", m}, {"config", 0}});
  manifest["selection"] = json::array(
      {{{"network", "flash"}, {"family", "megamoe"}, {"ep", 4}, {"workspace", 1024},
        {"transport", "fixed-slot"}, {"above_max", aboveMax}, {"rows", rows}}});
  return manifest;
}

std::vector<uint8_t> readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
}

void writeFile(const std::string &path, const std::vector<uint8_t> &bytes) {
  // Overwrite in place and cut to size instead of truncating to zero first:
  // ext4 flushes a file that is truncated to zero and rewritten (auto_da_alloc),
  // which made the every-offset tests disk-bound.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot write " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("cannot write " + path);
    }
    done += static_cast<size_t>(n);
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot truncate " + path);
  }
  ::close(fd);
}

void writeTextFile(const std::string &path, const std::string &text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << text;
}

bool fileExists(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

void sampleCArgs(moec_kernel_arg_t (&args)[4], int (&buffer)[2]) {
  args[0].kind = MOEC_ARG_BUFFER;
  args[0].value.buffer = buffer;
  args[1].kind = MOEC_ARG_BUFFER;
  args[1].value.buffer = buffer + 1;
  args[2].kind = MOEC_ARG_I32;
  args[2].value.i32 = 12;
  args[3].kind = MOEC_ARG_I64;
  args[3].value.i64 = 34;
}

} // namespace moec::test
