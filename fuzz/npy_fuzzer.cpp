//===- npy_fuzzer.cpp - libFuzzer target: the .npy reader -----------------===//
//
// Input: a whole .npy file, read through readNpy from a memory file. The
// reader must refuse every malformed header with a message, never read
// past the data, and never allocate more than the file's size allows.
//
//===----------------------------------------------------------------------===//
#include "moec/reference/Npy.h"

#include <cstdlib>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace {
int memoryFile = -1;
std::string memoryPath;
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  memoryFile = ::memfd_create("moec-fuzz-npy", MFD_CLOEXEC);
  if (memoryFile < 0)
    std::abort();
  memoryPath = "/proc/self/fd/" + std::to_string(memoryFile);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (::ftruncate(memoryFile, 0) != 0 ||
      ::pwrite(memoryFile, data, size, 0) != static_cast<ssize_t>(size))
    std::abort();
  moec::ref::NpyArray array;
  moec::ref::Status status = moec::ref::readNpy(memoryPath, array);
  (void)status;
  return 0;
}
