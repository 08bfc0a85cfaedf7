//===- test_support.h - bundles built by the tests themselves ---*- C++ -*-===//
#ifndef MOEC_TEST_RUNTIME_SUPPORT_H
#define MOEC_TEST_RUNTIME_SUPPORT_H

#include "moec/moec_runtime.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moec::test {

/// A fresh directory under $TMPDIR, removed with its files on destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }
  /// Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const;

private:
  std::string path_;
};

/// The 64-byte ELF header of an AMDGPU code object for EF_AMDGPU_MACH
/// `mach` (0x04f gfx950, 0x04c gfx942), with no program or section headers.
std::vector<uint8_t> amdgpuElfHeader(uint32_t mach);

/// A synthetic code object: a gfx950 AMDGPU ELF header, then `size - 64`
/// bytes from `seed`.
std::vector<uint8_t> syntheticCodeObject(size_t size, uint8_t seed);

/// One kernel entry of schema v1 with plausible fields.
nlohmann::json kernelJson(const std::string &name, uint32_t codeObject,
                          uint32_t vgpr, uint32_t ldsBytes);

/// A manifest with 3 kernels in 2 code objects, 3 configs and 3 tables:
///  flash ep4 ws1024 (fixed-slot, above_max largest) rows m 6, 12, 24, 64;
///  flash ep4 ws16384 (compact, above_max error) rows m 64, 512, 4096;
///  flash ep2 ws512 (fixed-slot, largest) rows m 1, 8.
nlohmann::json sampleManifest();
/// A table a Layer accepts: one configuration of one quant kernel
/// (`moe_quant_aaaa0004`) compiled for H 256, I 128, 8 experts, top-2 (9 and
/// top-3 with the FHMoE shared expert), EP `ep`, workspace class 16.
nlohmann::json quantLayerManifest(uint32_t ldsBytes, bool sharedExpert,
                                  uint32_t ep = 1);
/// The two code objects sampleManifest() refers to.
std::vector<std::vector<uint8_t>> sampleCodeObjects();

/// A manifest of one config and one table with the given rows (m, config 0).
nlohmann::json manifestWithRows(const std::vector<uint32_t> &ms,
                                const std::string &aboveMax = "largest");

/// The C API arguments of the sample manifest's kernels (buffer `a`, buffer
/// `out`, i32 12, i64 34), pointing into `buffer`.
void sampleCArgs(moec_kernel_arg_t (&args)[4], int (&buffer)[2]);

std::vector<uint8_t> readFile(const std::string &path);
void writeFile(const std::string &path, const std::vector<uint8_t> &bytes);
void writeTextFile(const std::string &path, const std::string &text);
bool fileExists(const std::string &path);

} // namespace moec::test

#endif
