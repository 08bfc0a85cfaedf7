//===- Memory.cpp - global buffers with a written-shadow ------------------===//

#include "moec/Emulator/Emulator.h"

#include <cstdlib>
#include <cstring>

namespace moec::emu {

/// calloc'd storage: pages a kernel never touches (the weights of experts no
/// route selects, at real shapes) are never materialised.
struct GlobalMemory::Buffer {
  std::string name;
  size_t size = 0;
  uint8_t *data = nullptr;
  uint8_t *written = nullptr;
  ~Buffer() {
    std::free(data);
    std::free(written);
  }
};

GlobalMemory::GlobalMemory() = default;
GlobalMemory::~GlobalMemory() = default;

unsigned GlobalMemory::addBuffer(std::string name, size_t size) {
  auto buffer = std::make_unique<Buffer>();
  buffer->name = std::move(name);
  buffer->size = size;
  // One spare byte keeps zero-sized buffers distinct and non-null.
  buffer->data = static_cast<uint8_t *>(std::calloc(size + 1, 1));
  buffer->written = static_cast<uint8_t *>(std::calloc(size + 1, 1));
  if (!buffer->data || !buffer->written)
    std::abort();
  buffers_.push_back(std::move(buffer));
  return static_cast<unsigned>(buffers_.size() - 1);
}

void GlobalMemory::write(unsigned id, size_t offset, const void *data,
                         size_t size) {
  Buffer &buffer = *buffers_[id];
  if (offset > buffer.size || size > buffer.size - offset)
    std::abort();
  if (size == 0)
    return;
  std::memcpy(buffer.data + offset, data, size);
  std::memset(buffer.written + offset, 1, size);
}

void GlobalMemory::poison(unsigned id) {
  Buffer &buffer = *buffers_[id];
  std::memset(buffer.data, 0xFF, buffer.size);
  std::memset(buffer.written, 0, buffer.size);
}

unsigned GlobalMemory::bufferCount() const {
  return static_cast<unsigned>(buffers_.size());
}
const std::string &GlobalMemory::name(unsigned id) const {
  return buffers_[id]->name;
}
size_t GlobalMemory::size(unsigned id) const { return buffers_[id]->size; }
uint8_t *GlobalMemory::data(unsigned id) { return buffers_[id]->data; }
const uint8_t *GlobalMemory::data(unsigned id) const {
  return buffers_[id]->data;
}
uint8_t *GlobalMemory::written(unsigned id) { return buffers_[id]->written; }
const uint8_t *GlobalMemory::written(unsigned id) const {
  return buffers_[id]->written;
}

const char *toString(FindingKind kind) {
  switch (kind) {
  case FindingKind::LdsRace: return "LDS race";
  case FindingKind::UninitializedRead: return "read of never-written memory";
  case FindingKind::OutOfBounds: return "out-of-bounds access";
  }
  return "finding";
}

std::string Finding::str() const {
  std::string s = launch.empty() ? std::string() : launch + ": ";
  s += toString(kind);
  s += " in " + kernel + " at " + location + " (" + opName + ") workgroup (" +
       std::to_string(workgroup[0]) + "," + std::to_string(workgroup[1]) + "," +
       std::to_string(workgroup[2]) + ") wave " + std::to_string(wave) +
       " lane " + std::to_string(lane) + ": " + detail;
  return s;
}

} // namespace moec::emu
