//===- bundle_open_bench.cpp - open and first use of a large bundle -*- C++ -*-===//
//
// Bundle::open of a bundle of N kernels (default 600) and the first use of
// each of its kernels (KernelLoader::loadKernel: resource checks, the code
// object's checksum when verified on first use, hipModuleLoadData and
// hipModuleGetFunction), p50/p99 over repetitions.
//
// The bundle is built from a compiled one (SOURCE, e.g. the shipped Flash
// EP4 table's): its code objects and kernel IR are copied under distinct
// kernel names until there are N kernels, written with the runtime's own
// writer (bundle_writer.cpp). Two bundles are timed: "kernels" keeps the
// source's configurations and selection tables once; "tables" gives every
// whole copy of the kernels the source's configurations and tables too
// (networks renamed), so the manifest grows with the kernels as a bundle
// of several tuned tables would.
//
// First use runs over a HIP library whose calls return at once
// (null_hip.c): what is timed is the runtime's host share, not the
// driver's module load.
//
// Usage:
//   moec-bundle-open-bench SOURCE.moeb NULL_HIP_LIBRARY [kernels] [repetitions]
//   (defaults 600 and 100)
//
//===----------------------------------------------------------------------===//
#include "moec/bundle.h"
#include "moec/hash.h"
#include "moec/hip_loader.h"
#include "moec/manifest.h"
#include "moec/selection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace moec::rt;

namespace {

using Clock = std::chrono::steady_clock;

double microsecondsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

struct Stats {
  size_t n = 0;
  double p50 = 0, p99 = 0, min = 0, max = 0, mean = 0;
};

/// Nearest-rank percentiles.
Stats stats(std::vector<double> samples) {
  Stats s;
  s.n = samples.size();
  if (samples.empty())
    return s;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {
    size_t r = static_cast<size_t>(std::ceil(p * double(samples.size())));
    return samples[std::max<size_t>(r, 1) - 1];
  };
  s.p50 = rank(0.5);
  s.p99 = rank(0.99);
  s.min = samples.front();
  s.max = samples.back();
  for (double v : samples)
    s.mean += v / double(samples.size());
  return s;
}

void printStats(const char *what, const Stats &s, const char *unit) {
  std::printf("%-58s n %6zu  p50 %9.2f  p99 %9.2f  min %9.2f  max %9.2f  mean "
              "%9.2f %s\n",
              what, s.n, s.p50, s.p99, s.min, s.max, s.mean, unit);
}

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moec-bundle-open-bench: %s\n", message.c_str());
  std::exit(2);
}

/// The bundle of `kernelCount` kernels made of copies of `source`'s
/// (see the file comment), written to `path`.
void writeReplicatedBundle(const Bundle &source, uint32_t kernelCount,
                           bool copyTables, const std::string &path,
                           uint32_t &wholeCopies) {
  const Manifest &from = source.manifest();
  const uint32_t n = static_cast<uint32_t>(from.kernels.size());
  if (n == 0 || kernelCount < n)
    die(source.path() + ": has " + std::to_string(n) +
        " kernels; the bundle needs at least that many and at least one");
  Manifest to = from;
  to.kernels.clear();
  to.configs.clear();
  to.selection.clear();
  to.aiterRows.clear();
  std::vector<std::vector<uint8_t>> codeObjects, irs;
  std::string error;
  auto bytesOf = [&](uint32_t index) {
    CodeObjectView view;
    if (!source.codeObject(index, view, error))
      die(error);
    return std::vector<uint8_t>(view.data, view.data + view.size);
  };
  for (uint32_t j = 0; j < kernelCount; ++j) {
    const uint32_t copy = j / n;
    KernelInfo kernel = from.kernels[j % n];
    if (copy > 0)
      kernel.name += "_copy" + std::to_string(copy);
    codeObjects.push_back(bytesOf(kernel.codeObject));
    kernel.codeObject = j;
    if (kernel.ir.present()) {
      irs.push_back(bytesOf(kernel.ir.object));
      kernel.ir.object = static_cast<uint32_t>(irs.size() - 1); // offset below
    }
    to.kernels.push_back(std::move(kernel));
  }
  // Code objects in kernel order, then the kernels' IR (as moec writes them).
  for (KernelInfo &kernel : to.kernels)
    if (kernel.ir.present())
      kernel.ir.object += kernelCount;
  wholeCopies = kernelCount / n;
  for (uint32_t copy = 0; copy < (copyTables ? wholeCopies : 1); ++copy) {
    const std::string suffix = copy ? "_copy" + std::to_string(copy) : "";
    const uint32_t configBase = static_cast<uint32_t>(to.configs.size());
    for (ConfigInfo config : from.configs) {
      config.id += suffix;
      for (uint32_t &k : config.kernels)
        k += copy * n;
      to.configs.push_back(std::move(config));
    }
    for (SelectionTable table : from.selection) {
      table.network += suffix;
      for (SelectionRow &row : table.rows)
        row.config += configBase;
      to.selection.push_back(std::move(table));
    }
    if (copy == 0)
      to.aiterRows = from.aiterRows;
  }
  std::vector<std::vector<uint8_t>> objects = std::move(codeObjects);
  for (std::vector<uint8_t> &ir : irs)
    objects.push_back(std::move(ir));
  to.bundleFormatVersion = 0; // the writer adds it
  if (!writeBundle(path, serializeManifest(to), objects, error))
    die(error);
}

/// Drops the file's pages from the page cache (they are clean: the writer
/// fsyncs), so the next open reads it from the disk.
/// Returns the fraction of the file's pages still resident afterwards
/// (mincore), or -1 when that cannot be told.
double evictFromPageCache(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  struct stat info;
  double resident = -1;
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 &&
      ::fstat(fd, &info) == 0 && info.st_size > 0) {
    void *map = ::mmap(nullptr, info.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (map != MAP_FAILED) {
      const long page = ::sysconf(_SC_PAGESIZE);
      std::vector<unsigned char> pages((info.st_size + page - 1) / page);
      if (::mincore(map, info.st_size, pages.data()) == 0) {
        size_t in = 0;
        for (unsigned char p : pages)
          in += p & 1;
        resident = double(in) / double(pages.size());
      }
      ::munmap(map, info.st_size);
    }
  }
  ::close(fd);
  return resident;
}

std::unique_ptr<Bundle> openOrDie(const std::string &path,
                                  CodeObjectVerification mode) {
  std::string error;
  BundleOpenOptions options;
  options.codeObjects = mode;
  std::unique_ptr<Bundle> bundle = Bundle::open(path, error, options);
  if (!bundle)
    die(error);
  return bundle;
}

const char *modeName(CodeObjectVerification mode) {
  return mode == CodeObjectVerification::AtOpen ? "verify at open"
                                                : "verify on first use";
}

/// Writes the bundle of one variant from `source` and times its open and
/// its kernels' first use.
void benchmarkVariant(const Bundle &source, uint32_t kernelCount,
                      bool copyTables, int repetitions,
                      const std::string &nullHip) {
  std::string error;
  const std::string path =
      "/tmp/moec-bundle-open-bench." + std::to_string(::getpid()) + ".moeb";
  uint32_t wholeCopies = 0;
  Clock::time_point start = Clock::now();
  writeReplicatedBundle(source, kernelCount, copyTables, path, wholeCopies);
  const double writeMs = microsecondsSince(start) / 1000;

  // What the bundle holds.
  std::unique_ptr<Bundle> probe = openOrDie(path, CodeObjectVerification::AtOpen);
  const Manifest &manifest = probe->manifest();
  size_t rows = 0;
  for (const SelectionTable &table : manifest.selection)
    rows += table.rows.size();
  std::printf("\n== %s: %zu kernels (%u whole copies of the source's %zu%s), "
              "%u code-object table entries, %zu configurations, %zu selection "
              "tables, %zu rows, manifest %zu bytes, file %llu bytes; written "
              "in %.1f ms (fsync)\n",
              copyTables ? "tables" : "kernels", manifest.kernels.size(),
              wholeCopies, source.manifest().kernels.size(),
              copyTables ? " kernels, configurations and tables"
                         : " kernels; its configurations and tables once",
              probe->codeObjectCount(), manifest.configs.size(),
              manifest.selection.size(), rows, probe->manifestText().size(),
              static_cast<unsigned long long>(probe->fileSize()), writeMs);
  // The probe's mapping would keep the file's pages resident; keep copies.
  const std::string manifestText(probe->manifestText());
  const uint32_t objectCount = probe->codeObjectCount();
  const uint64_t fileSize = probe->fileSize();
  const size_t kernels = manifest.kernels.size();
  probe.reset();

  // Parts of an open, each timed alone (page cache warm): hashing every byte
  // of the file, parsing the manifest (canonical check included) and
  // building the selector.
  {
    std::vector<double> hashUs, parseUs, selectorUs;
    std::vector<uint8_t> file(fileSize);
    {
      FILE *f = std::fopen(path.c_str(), "rb");
      if (!f || std::fread(file.data(), 1, file.size(), f) != file.size())
        die(path + ": cannot read");
      std::fclose(f);
    }
    uint64_t sink = 0;
    for (int r = 0; r < repetitions; ++r) {
      start = Clock::now();
      sink += xxh64(file.data(), file.size());
      hashUs.push_back(microsecondsSince(start));
      Manifest parsed;
      start = Clock::now();
      if (!parseCanonicalManifest(manifestText, objectCount, parsed, error))
        die(error);
      parseUs.push_back(microsecondsSince(start));
      Selector selector;
      start = Clock::now();
      if (!Selector::build(parsed.selection, parsed.configs.size(), selector, error))
        die(error);
      selectorUs.push_back(microsecondsSince(start));
    }
    std::printf("parts of an open (page cache warm; checksum %llu):\n",
                static_cast<unsigned long long>(sink & 0xffff));
    printStats("  xxh64 of the whole file (in memory)", stats(hashUs), "us");
    printStats("  parseCanonicalManifest", stats(parseUs), "us");
    printStats("  Selector::build", stats(selectorUs), "us");
  }

  // Bundle::open, page cache warm and after evicting the file.
  std::printf("Bundle::open (%d repetitions warm, %d after evicting the file "
              "from the page cache):\n",
              repetitions, std::max(1, repetitions / 5));
  for (CodeObjectVerification mode :
       {CodeObjectVerification::AtOpen, CodeObjectVerification::OnFirstUse}) {
    std::vector<double> warm, cold;
    openOrDie(path, mode); // warm the page cache
    for (int r = 0; r < repetitions; ++r) {
      start = Clock::now();
      std::unique_ptr<Bundle> bundle = openOrDie(path, mode);
      warm.push_back(microsecondsSince(start));
    }
    double resident = 0;
    for (int r = 0; r < std::max(1, repetitions / 5); ++r) {
      const double left = evictFromPageCache(path);
      resident = left < 0 || resident < 0 ? -1 : std::max(resident, left);
      start = Clock::now();
      std::unique_ptr<Bundle> bundle = openOrDie(path, mode);
      cold.push_back(microsecondsSince(start));
    }
    std::string label = std::string("  ") + modeName(mode) + ", warm";
    printStats(label.c_str(), stats(warm), "us");
    char evicted[96];
    if (resident < 0)
      std::snprintf(evicted, sizeof evicted, ", evicted (residency unknown)");
    else
      std::snprintf(evicted, sizeof evicted, ", evicted (<= %.0f%% resident)",
                    resident * 100);
    label = std::string("  ") + modeName(mode) + evicted;
    printStats(label.c_str(), stats(cold), "us");
  }

  // First use of every kernel: a fresh bundle and loader per repetition,
  // each kernel's first loadKernel timed alone, then a second call (the
  // loaded fast path).
  const int useRepetitions = std::max(1, repetitions / 10);
  std::printf("first use of each of the %zu kernels (KernelLoader::loadKernel "
              "over the null HIP library, %d fresh bundles and loaders; page "
              "cache warm):\n",
              kernels, useRepetitions);
  for (CodeObjectVerification mode :
       {CodeObjectVerification::AtOpen, CodeObjectVerification::OnFirstUse}) {
    std::vector<double> firstUs, againUs, codeObjectUs, allMs;
    for (int r = 0; r < useRepetitions; ++r) {
      std::unique_ptr<HipLibrary> library = HipLibrary::load({nullHip}, error);
      std::unique_ptr<HipDevice> device =
          library ? HipDevice::create(std::move(library), 0, error) : nullptr;
      if (!device)
        die(error);
      // Code-object access alone (the lazy checksum), on its own bundle.
      {
        std::unique_ptr<Bundle> bundle = openOrDie(path, mode);
        for (uint32_t k = 0; k < bundle->manifest().kernels.size(); ++k) {
          CodeObjectView view;
          start = Clock::now();
          if (!bundle->codeObject(bundle->manifest().kernels[k].codeObject, view,
                                  error))
            die(error);
          codeObjectUs.push_back(microsecondsSince(start));
        }
      }
      std::unique_ptr<Bundle> bundle = openOrDie(path, mode);
      KernelLoader loader(*device, *bundle);
      const Clock::time_point all = Clock::now();
      for (uint32_t k = 0; k < bundle->manifest().kernels.size(); ++k) {
        start = Clock::now();
        if (!loader.loadKernel(k, error))
          die(error);
        firstUs.push_back(microsecondsSince(start));
      }
      allMs.push_back(microsecondsSince(all) / 1000);
      for (uint32_t k = 0; k < bundle->manifest().kernels.size(); ++k) {
        start = Clock::now();
        if (!loader.loadKernel(k, error))
          die(error);
        againUs.push_back(microsecondsSince(start));
      }
    }
    std::printf("  %s:\n", modeName(mode));
    printStats("    Bundle::codeObject, first call", stats(codeObjectUs), "us");
    printStats("    loadKernel, first use", stats(firstUs), "us");
    printStats("    loadKernel, already loaded", stats(againUs), "us");
    printStats("    every kernel's first use, whole bundle", stats(allMs), "ms");
  }
  ::unlink(path.c_str());
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: moec-bundle-open-bench SOURCE.moeb "
                         "NULL_HIP_LIBRARY [kernels] [repetitions]\n");
    return 2;
  }
  const uint32_t kernelCount =
      argc > 3 ? static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)) : 600;
  const int repetitions = argc > 4 ? std::atoi(argv[4]) : 100;
  if (kernelCount == 0 || repetitions <= 0)
    die("kernels and repetitions must be positive");
  std::unique_ptr<Bundle> source = openOrDie(argv[1], CodeObjectVerification::AtOpen);
  std::printf("source %s: %zu kernels, %llu bytes; figures in us unless "
              "marked, nearest-rank percentiles\n",
              argv[1], source->manifest().kernels.size(),
              static_cast<unsigned long long>(source->fileSize()));
  benchmarkVariant(*source, kernelCount, /*copyTables=*/false, repetitions, argv[2]);
  benchmarkVariant(*source, kernelCount, /*copyTables=*/true, repetitions, argv[2]);
  return 0;
}
