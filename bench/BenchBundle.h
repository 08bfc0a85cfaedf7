//===- BenchBundle.h - a synthetic bundle for the benchmarks ----*- C++ -*-===//

#ifndef MOEC_BENCH_BENCHBUNDLE_H
#define MOEC_BENCH_BENCHBUNDLE_H

#include "moec/bundle.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

namespace moec::bench {

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
  std::vector<uint8_t> codeObject = {0x7f, 'E', 'L', 'F', 0, 0, 0, 0};
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
