//===- BenchBundle.h - a synthetic bundle for the benchmarks ----*- C++ -*-===//

#ifndef MOEC_BENCH_BENCHBUNDLE_H
#define MOEC_BENCH_BENCHBUNDLE_H

#include "moec/bundle.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

namespace moec::bench {

/// A code object the bundle writer accepts: the 64-byte ELF header of a
/// gfx950 AMDGPU code object, then `size - 64` bytes of `fill`.
inline std::vector<uint8_t> benchCodeObject(size_t size = 64, uint8_t fill = 0) {
  std::vector<uint8_t> object(size < 64 ? 64 : size, fill);
  const uint8_t header[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 64, 4, 0, 0, 0, 0, 0, 0, 0,
                              3, 0, 224, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                              0x4f, 0, 0, 0, 64, 0, 56, 0, 0, 0, 64, 0, 0, 0, 0, 0};
  std::copy(header, header + 64, object.begin());
  return object;
}

/// Writes a gfx950 bundle of `kernels`, `configs` and `selection` (manifest
/// JSON arrays) with one placeholder code object to
/// /tmp/moec-<stem>.<pid>.moeb and returns its path; exits 2 on failure.
inline std::string writeBenchBundle(const nlohmann::json &kernels,
                                    const nlohmann::json &configs,
                                    const nlohmann::json &selection,
                                    const std::string &stem) {
  nlohmann::json manifest = {{"target", {{"arch", "gfx950"}}},
                             {"kernels", kernels},
                             {"configs", configs},
                             {"selection", selection}};
  std::vector<uint8_t> codeObject = benchCodeObject();
  const std::string path =
      "/tmp/moec-" + stem + "." + std::to_string(::getpid()) + ".moeb";
  std::string error;
  if (!rt::writeBundle(path, manifest.dump(), {codeObject}, error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(2);
  }
  return path;
}

} // namespace moec::bench

#endif // MOEC_BENCH_BENCHBUNDLE_H
