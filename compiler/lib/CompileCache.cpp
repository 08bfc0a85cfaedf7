//===- CompileCache.cpp - content-addressed cache of code objects ---------===//

#include "moec/Compiler/CompileCache.h"

#include "moec/hash.h"

#include "llvm/Config/llvm-config.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moec {
namespace {

/// Entry layout: magic, payload size (u64 LE), XXH64 of the payload, payload.
constexpr char kMagic[8] = {'M', 'O', 'E', 'C', 'C', 'A', 'C', '1'};
constexpr size_t kHeaderBytes = 24;

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(value));
  return text;
}

bool makeDirectories(const std::string &path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 &&
          errno != EEXIST)
        return false;
    }
    if (i < path.size())
      partial += path[i];
  }
  return true;
}

} // namespace

std::string CompileCache::defaultDirectory() {
  if (const char *dir = std::getenv("MOEC_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *dir = std::getenv("XDG_CACHE_HOME"); dir && *dir)
    return std::string(dir) + "/moec";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/moec";
  return "";
}

uint64_t CompileCache::defaultMaxBytes() {
  if (const char *text = std::getenv("MOEC_CACHE_MAX_BYTES"); text && *text) {
    char *end = nullptr;
    unsigned long long value = std::strtoull(text, &end, 10);
    if (end && *end == 0)
      return value;
  }
  return uint64_t(2) << 30;
}

/// The GNU build ID of the running executable (a hash the linker computed
/// over its contents), as hex; empty when it has none.
std::string executableBuildId() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *out) -> int {
        // The first object is the executable itself.
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr) &phdr = info->dlpi_phdr[i];
          if (phdr.p_type != PT_NOTE)
            continue;
          const char *note =
              reinterpret_cast<const char *>(info->dlpi_addr + phdr.p_vaddr);
          const char *end = note + phdr.p_memsz;
          while (note + sizeof(ElfW(Nhdr)) <= end) {
            ElfW(Nhdr) header;
            std::memcpy(&header, note, sizeof(header));
            const char *name = note + sizeof(header);
            const char *desc = name + ((header.n_namesz + 3) & ~3u);
            if (desc + header.n_descsz > end)
              break;
            if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              auto *text = static_cast<std::string *>(out);
              for (uint32_t b = 0; b < header.n_descsz; ++b) {
                char hex[3];
                std::snprintf(hex, sizeof(hex), "%02x",
                              static_cast<unsigned char>(desc[b]));
                *text += hex;
              }
              return 1;
            }
            note = desc + ((header.n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &id);
  return id;
}

const std::string &CompileCache::compilerFingerprint() {
  static const std::string fingerprint = [] {
    std::string identity = std::string("moec;llvm ") + LLVM_VERSION_STRING;
    // The linker's build ID stands for the executable's bytes; hashing the
    // file itself costs about a second for the 150 MB static moec, so it
    // is only the fallback for a binary linked without one.
    if (std::string buildId = executableBuildId(); !buildId.empty()) {
      identity += ";build-id " + buildId;
    } else {
      std::ifstream self("/proc/self/exe", std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(self)),
                        std::istreambuf_iterator<char>());
      identity += ";exe " + hex64(rt::xxh64(bytes.data(), bytes.size()));
    }
    return hex64(rt::xxh64(identity.data(), identity.size()));
  }();
  return fingerprint;
}

std::string CompileCache::key(const std::vector<uint8_t> &kernelIr,
                              const std::string &description) {
  std::string text = compilerFingerprint() + ";" + description + ";";
  text.append(reinterpret_cast<const char *>(kernelIr.data()), kernelIr.size());
  // Two seeds: a 128-bit key, so distinct kernels never share an entry in
  // practice.
  const uint64_t low = rt::xxh64(text.data(), text.size(), 0);
  const uint64_t high = rt::xxh64(text.data(), text.size(), 0x9e3779b97f4a7c15ull);
  return hex64(high) + hex64(low);
}

std::string CompileCache::path(const std::string &key) const {
  return directory_ + "/" + key.substr(0, 2) + "/" + key + ".hsaco";
}

std::optional<std::vector<uint8_t>> CompileCache::load(const std::string &key) {
  if (directory_.empty())
    return std::nullopt;
  const std::string file = path(key);
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  uint64_t size = 0, checksum = 0;
  bool good = bytes.size() >= kHeaderBytes &&
              std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0;
  if (good) {
    std::memcpy(&size, bytes.data() + 8, 8);
    std::memcpy(&checksum, bytes.data() + 16, 8);
    good = size == bytes.size() - kHeaderBytes &&
           rt::xxh64(bytes.data() + kHeaderBytes, size) == checksum;
  }
  if (!good) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++corrupt_;
    ::unlink(file.c_str());
    return std::nullopt;
  }
  // Recently used: trim() keeps it.
  ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);
  return std::vector<uint8_t>(bytes.begin() + kHeaderBytes, bytes.end());
}

void CompileCache::store(const std::string &key,
                         const std::vector<uint8_t> &object) {
  if (directory_.empty())
    return;
  const std::string file = path(key);
  if (!makeDirectories(file.substr(0, file.find_last_of('/'))))
    return;
  const std::string temporary =
      file + ".tmp." + std::to_string(::getpid()) + "." +
      std::to_string(reinterpret_cast<uintptr_t>(&object));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    const uint64_t size = object.size();
    const uint64_t checksum = rt::xxh64(object.data(), object.size());
    out.write(kMagic, sizeof(kMagic));
    out.write(reinterpret_cast<const char *>(&size), 8);
    out.write(reinterpret_cast<const char *>(&checksum), 8);
    out.write(reinterpret_cast<const char *>(object.data()), std::streamsize(size));
    if (!out.good()) {
      out.close();
      ::unlink(temporary.c_str());
      return;
    }
  }
  if (std::rename(temporary.c_str(), file.c_str()) != 0)
    ::unlink(temporary.c_str());
}

void CompileCache::trim() {
  if (directory_.empty())
    return;
  struct Entry {
    std::string path;
    uint64_t bytes;
    int64_t used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  if (DIR *top = ::opendir(directory_.c_str())) {
    while (dirent *bucket = ::readdir(top)) {
      if (bucket->d_name[0] == '.')
        continue;
      const std::string bucketPath = directory_ + "/" + bucket->d_name;
      DIR *inner = ::opendir(bucketPath.c_str());
      if (!inner)
        continue;
      while (dirent *entry = ::readdir(inner)) {
        const std::string name = entry->d_name;
        if (name.size() < 6 || name.compare(name.size() - 6, 6, ".hsaco") != 0)
          continue;
        const std::string file = bucketPath + "/" + name;
        struct stat info;
        if (::stat(file.c_str(), &info) != 0)
          continue;
        entries.push_back({file, uint64_t(info.st_size),
                           int64_t(info.st_mtim.tv_sec) * 1000000000 +
                               info.st_mtim.tv_nsec});
        total += uint64_t(info.st_size);
      }
      ::closedir(inner);
    }
    ::closedir(top);
  }
  if (total <= maxBytes_)
    return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry &a, const Entry &b) { return a.used < b.used; });
  for (const Entry &entry : entries) {
    if (total <= maxBytes_)
      break;
    if (::unlink(entry.path.c_str()) == 0)
      total -= entry.bytes;
  }
}

} // namespace moec
