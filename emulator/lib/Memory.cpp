//===- Memory.cpp - global buffers with a written-shadow ------------------===//

#include "Executor.h"
#include "moec/Emulator/Emulator.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moec::emu {

/// calloc'd storage: pages a kernel never touches (the weights of experts no
/// route selects, at real shapes) are never materialised. An external
/// buffer's storage belongs to its caller.
struct GlobalMemory::Buffer {
  std::string name;
  size_t size = 0;
  uint8_t *data = nullptr;
  uint8_t *written = nullptr;
  bool external = false;
  ~Buffer() {
    if (external)
      return;
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

unsigned GlobalMemory::addExternalBuffer(std::string name, size_t size,
                                         uint8_t *data, uint8_t *written) {
  if (!data || !written)
    std::abort();
  auto buffer = std::make_unique<Buffer>();
  buffer->name = std::move(name);
  buffer->size = size;
  buffer->data = data;
  buffer->written = written;
  buffer->external = true;
  buffers_.push_back(std::move(buffer));
  return static_cast<unsigned>(buffers_.size() - 1);
}

bool GlobalMemory::isExternal(unsigned id) const {
  return buffers_[id]->external;
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

//===----------------------------------------------------------------------===//
// PeerGroup: the processes that share memory with this one
//===----------------------------------------------------------------------===//

namespace {

/// One member process of a segment. Every field is read and written with
/// __atomic builtins (other processes update theirs concurrently); pid 0
/// is a free slot.
struct PeerSlot {
  int64_t pid;
  uint64_t running;
  uint64_t progress;
  uint64_t spare;
};

constexpr char kSegmentMagic[8] = {'m', 'o', 'e', 'c', 'p', 'e', 'e', 'r'};
constexpr size_t kSegmentBytes = 4096;
constexpr size_t kSlots = (kSegmentBytes - 16) / sizeof(PeerSlot);

/// A page of shared memory: the magic, then the slots.
struct SegmentPage {
  char magic[8];
  uint64_t slotCount;
  PeerSlot slots[kSlots];
};
static_assert(sizeof(SegmentPage) <= kSegmentBytes);

/// A segment this process has mapped: whose it is, and this process's slot
/// there (null when it holds none, e.g. right after a fork).
struct MappedSegment {
  int64_t owner = 0;
  int fd = -1;
  SegmentPage *page = nullptr;
  PeerSlot *mine = nullptr;
};

struct PeerState {
  std::mutex mutex;
  /// The process the slots were taken for (a forked child differs).
  int64_t pid = 0;
  int ownFd = -1;
  bool exitHandler = false;
  std::vector<MappedSegment> segments;
};

PeerState &peers() {
  // Never destroyed: the exit handler still needs it.
  static PeerState *state = new PeerState();
  return *state;
}

/// Takes (or finds) this process's slot in `segment`.
void claimSlot(MappedSegment &segment, int64_t self) {
  if (segment.mine && __atomic_load_n(&segment.mine->pid, __ATOMIC_SEQ_CST) == self)
    return;
  segment.mine = nullptr;
  for (PeerSlot &slot : segment.page->slots)
    if (__atomic_load_n(&slot.pid, __ATOMIC_SEQ_CST) == self) {
      segment.mine = &slot;
      return;
    }
  for (PeerSlot &slot : segment.page->slots) {
    int64_t expected = 0;
    if (__atomic_compare_exchange_n(&slot.pid, &expected, self, false,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      __atomic_store_n(&slot.running, 0, __ATOMIC_SEQ_CST);
      segment.mine = &slot;
      return;
    }
  }
}

/// At exit: this process leaves every slot it holds, so its peers do not
/// take a process that ended normally for one that died.
void leaveAll() {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  const int64_t self = int64_t(::getpid());
  for (MappedSegment &segment : state.segments) {
    int64_t expected = self;
    if (segment.mine)
      __atomic_compare_exchange_n(&segment.mine->pid, &expected, 0, false,
                                  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
}

/// Makes the slots this process's (after a fork, the child's); call with
/// the mutex held.
void ensureSelf(PeerState &state) {
  const int64_t self = int64_t(::getpid());
  if (state.pid != self) {
    // A forked child: its parent's own segment is now one it joined.
    state.pid = self;
    state.ownFd = -1;
    for (MappedSegment &segment : state.segments)
      segment.mine = nullptr;
  }
  for (MappedSegment &segment : state.segments)
    claimSlot(segment, self);
  if (!state.exitHandler && !state.segments.empty()) {
    state.exitHandler = true;
    std::atexit(leaveAll);
  }
}

/// Whether process `pid` still runs: /proc/<pid>/stat exists and its state
/// is not zombie or dead (a child that ended but was not reaped yet is
/// gone for this purpose).
bool processAlive(int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat",
                static_cast<long long>(pid));
  FILE *file = std::fopen(path, "r");
  if (!file)
    return false;
  char text[512];
  const size_t n = std::fread(text, 1, sizeof(text) - 1, file);
  std::fclose(file);
  text[n] = 0;
  const char *close = std::strrchr(text, ')');
  if (!close || close[1] != ' ')
    return true;
  return close[2] != 'Z' && close[2] != 'X';
}

} // namespace

int PeerGroup::ownSegment(std::string &error) {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
  if (state.ownFd >= 0)
    return state.ownFd;
  const int fd = ::memfd_create("moec-emulated-peers", MFD_CLOEXEC);
  void *page = MAP_FAILED;
  if (fd >= 0 && ::ftruncate(fd, off_t(kSegmentBytes)) == 0)
    page = ::mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                  fd, 0);
  if (page == MAP_FAILED) {
    error = std::string("the shared segment of this process's peers: ") +
            std::strerror(errno);
    if (fd >= 0)
      ::close(fd);
    return -1;
  }
  auto *segment = static_cast<SegmentPage *>(page);
  std::memcpy(segment->magic, kSegmentMagic, sizeof(kSegmentMagic));
  segment->slotCount = kSlots;
  state.ownFd = fd;
  state.segments.push_back({state.pid, fd, segment, nullptr});
  ensureSelf(state);
  return fd;
}

mlir::LogicalResult PeerGroup::joinSegment(int64_t pid, int fd,
                                           std::string &error) {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
  if (pid == state.pid)
    return mlir::success();
  for (const MappedSegment &segment : state.segments)
    if (segment.owner == pid && segment.fd == fd)
      return mlir::success();
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int opened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat info {};
  void *page = MAP_FAILED;
  if (opened >= 0 && ::fstat(opened, &info) == 0 &&
      size_t(info.st_size) == kSegmentBytes)
    page = ::mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                  opened, 0);
  const std::string reason = opened < 0 ? std::strerror(errno)
                                        : "not a peer segment";
  if (opened >= 0)
    ::close(opened);
  if (page == MAP_FAILED ||
      std::memcmp(static_cast<SegmentPage *>(page)->magic, kSegmentMagic,
                  sizeof(kSegmentMagic)) != 0) {
    if (page != MAP_FAILED)
      ::munmap(page, kSegmentBytes);
    error = "the peer segment of process " + std::to_string(pid) + " (" +
            path + "): " + reason;
    return mlir::failure();
  }
  state.segments.push_back({pid, fd, static_cast<SegmentPage *>(page), nullptr});
  ensureSelf(state);
  return mlir::success();
}

void PeerGroup::announce() {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
}

double PeerGroup::timeoutSeconds() {
  if (const char *text = std::getenv("MOEC_EMULATED_PEER_TIMEOUT");
      text && *text) {
    char *end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end && *end == 0 && seconds > 0)
      return seconds;
  }
  return 30.0;
}

namespace detail {

bool peerMember() {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  return !state.segments.empty();
}

void peerRunning(int delta) {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
  for (MappedSegment &segment : state.segments)
    if (segment.mine) {
      __atomic_add_fetch(&segment.mine->running, uint64_t(int64_t(delta)),
                         __ATOMIC_SEQ_CST);
      __atomic_add_fetch(&segment.mine->progress, 1, __ATOMIC_SEQ_CST);
    }
}

void peerProgressed() {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
  for (MappedSegment &segment : state.segments)
    if (segment.mine)
      __atomic_add_fetch(&segment.mine->progress, 1, __ATOMIC_SEQ_CST);
}

std::vector<PeerInfo> peerStates() {
  PeerState &state = peers();
  std::lock_guard<std::mutex> lock(state.mutex);
  ensureSelf(state);
  std::vector<PeerInfo> found;
  for (const MappedSegment &segment : state.segments)
    for (PeerSlot &slot : segment.page->slots) {
      const int64_t pid = __atomic_load_n(&slot.pid, __ATOMIC_SEQ_CST);
      if (pid == 0 || pid == state.pid)
        continue;
      const uint64_t running = __atomic_load_n(&slot.running, __ATOMIC_SEQ_CST);
      const uint64_t progress =
          __atomic_load_n(&slot.progress, __ATOMIC_SEQ_CST);
      bool seen = false;
      for (PeerInfo &peer : found)
        if (peer.pid == pid) {
          // The same process in several segments: any slot's change counts.
          peer.progress += progress;
          peer.running = std::max(peer.running, running);
          seen = true;
        }
      if (!seen)
        found.push_back({pid, running, progress, true});
    }
  for (PeerInfo &peer : found)
    peer.alive = processAlive(peer.pid);
  return found;
}

} // namespace detail

} // namespace moec::emu
