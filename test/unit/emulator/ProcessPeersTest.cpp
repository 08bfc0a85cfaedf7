//===- ProcessPeersTest.cpp - launches in separate processes --------------===//
//
// Runs over external buffers (GlobalMemory::addExternalBuffer) in two
// processes forked from the test, sharing one MAP_SHARED page, the second
// process joining the first one's PeerGroup segment by pid and descriptor
// as an importing process does: a relay that hands a token back and forth
// 16 times (each process sees the other's stores and written flags while
// its own launch runs), a wait on flags nobody sets (a deadlock, reported
// by both processes once no peer advanced for MOEC_EMULATED_PEER_TIMEOUT),
// a peer that dies (reported by its pid), and a run over external buffers
// with no peer process (a deadlock at once, as for private memory).
// docs/emulator.md, "Ranks in separate processes".
//
//===----------------------------------------------------------------------===//

#include "TestSupport.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace moec::emu;
using namespace moec::emu::test;

namespace {

/// The relay's rank `rank`: in round i (0..7) it waits until its flag
/// reaches i + rank, takes the value in its box, logs it to out[i], sends
/// value * 3 + rank + i into the peer's box and raises the peer's flag to
/// i + 1. Rank 0 starts (its box holds 1), so the ranks alternate: 16
/// handoffs, each needing the other rank's stores of the same launch.
const std::string kRelay = kernelText(
    "relay", R"mlir((%rank: i32,
                  %myFlag: memref<1xi32, #gpu.address_space<global>>,
                  %peerFlag: memref<1xi32, #gpu.address_space<global>>,
                  %myBox: memref<1xi32, #gpu.address_space<global>>,
                  %peerBox: memref<1xi32, #gpu.address_space<global>>,
                  %out: memref<8xi32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %z = arith.constant 0 : i32
    %one = arith.constant 1 : i32
    %three = arith.constant 3 : i32
    %isLeader = arith.cmpi eq, %tid, %c0 : index
    scf.if %isLeader {
      scf.for %i = %c0 to %c8 step %c1 {
        %iv = arith.index_cast %i : index to i32
        %need = arith.addi %iv, %rank : i32
        scf.while : () -> () {
          %f = memref.atomic_rmw addi %z, %myFlag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
          %wait = arith.cmpi slt, %f, %need : i32
          scf.condition(%wait)
        } do {
          rocdl.s.sleep 1
          scf.yield
        }
        %got = memref.load %myBox[%c0] : memref<1xi32, #gpu.address_space<global>>
        memref.store %got, %out[%i] : memref<8xi32, #gpu.address_space<global>>
        %g3 = arith.muli %got, %three : i32
        %g3r = arith.addi %g3, %rank : i32
        %send = arith.addi %g3r, %iv : i32
        memref.store %send, %peerBox[%c0] : memref<1xi32, #gpu.address_space<global>>
        %next = arith.addi %iv, %one : i32
        %old = memref.atomic_rmw assign %next, %peerFlag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
      }
    }
)mlir");

/// Waits for a flag to become non-zero.
const std::string kWait = kernelText(
    "wait", R"mlir((%flag: memref<1xi32, #gpu.address_space<global>>))mlir",
    R"mlir(
    %c0 = arith.constant 0 : index
    %z = arith.constant 0 : i32
    scf.while : () -> () {
      %f = memref.atomic_rmw addi %z, %flag[%c0] : (i32, memref<1xi32, #gpu.address_space<global>>) -> i32
      %wait = arith.cmpi eq, %f, %z : i32
      scf.condition(%wait)
    } do {
      rocdl.s.sleep 1
      scf.yield
    }
)mlir");

/// Byte offsets of the buffers in the shared page.
constexpr size_t kFlag[2] = {0, 64};
constexpr size_t kBox[2] = {128, 192};
constexpr size_t kOut[2] = {256, 320};

/// One page of memory shared by the test and its two processes, which
/// report back through it.
struct SharedPage {
  uint8_t data[1024];
  uint8_t written[1024];
  /// Process 0's pid and PeerGroup segment; set once process 1 joined it.
  int64_t pid0;
  int32_t segment0;
  int32_t joined;
  /// Processes whose body has returned, and how many each waits for before
  /// it exits (so that none sees the other as dead while it still runs).
  int32_t done;
  int32_t linger;
  char error[2][2048];
  double seconds[2];
};

SharedPage *mapSharedPage() {
  void *page = ::mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto *shared = static_cast<SharedPage *>(page);
  std::memset(shared->data, 0xFF, sizeof(shared->data));
  std::memset(shared->written, 0, sizeof(shared->written));
  shared->pid0 = 0;
  shared->segment0 = -1;
  shared->joined = 0;
  shared->done = 0;
  shared->linger = 2;
  std::memset(shared->error, 0, sizeof(shared->error));
  shared->seconds[0] = shared->seconds[1] = 0;
  return shared;
}

/// Host write of an int32 (marks it written).
void put(SharedPage *page, size_t offset, int32_t value) {
  std::memcpy(page->data + offset, &value, 4);
  std::memset(page->written + offset, 1, 4);
}

int32_t get(const SharedPage *page, size_t offset) {
  int32_t value;
  std::memcpy(&value, page->data + offset, 4);
  return value;
}

unsigned addShared(GlobalMemory &memory, SharedPage *page,
                   const std::string &name, size_t offset, size_t bytes) {
  return memory.addExternalBuffer(name, bytes, page->data + offset,
                                  page->written + offset);
}

/// Spins (sleeping 1 ms) until `ready()` or 30 s passed.
bool waitUntil(const std::function<bool()> &ready) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > end)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// Process `rank` of a pair: process 0 creates its PeerGroup segment and
/// waits until process 1 joined it; process 1 joins, then says so. Then
/// `body` runs; what it returns is the exit status, and what it writes to
/// the page's error[rank] the report. The process then waits until
/// `linger` bodies have returned and ends without leaving its slots
/// (_exit), as a process that dies does. Never returns.
[[noreturn]] void runProcess(SharedPage *page, int rank,
                             const std::function<int()> &body) {
  std::string error;
  int status = 3;
  if (rank == 0) {
    const int fd = PeerGroup::ownSegment(error);
    if (fd >= 0) {
      __atomic_store_n(&page->segment0, fd, __ATOMIC_SEQ_CST);
      status = waitUntil([&] {
                 return __atomic_load_n(&page->joined, __ATOMIC_SEQ_CST) != 0;
               })
                   ? body()
                   : 4;
    }
  } else {
    if (waitUntil([&] {
          return __atomic_load_n(&page->segment0, __ATOMIC_SEQ_CST) >= 0;
        }) &&
        mlir::succeeded(
            PeerGroup::joinSegment(page->pid0, page->segment0, error))) {
      __atomic_store_n(&page->joined, 1, __ATOMIC_SEQ_CST);
      status = body();
    }
  }
  if (!error.empty())
    std::snprintf(page->error[rank], sizeof(page->error[rank]), "%s",
                  error.c_str());
  __atomic_add_fetch(&page->done, 1, __ATOMIC_SEQ_CST);
  waitUntil([&] {
    return __atomic_load_n(&page->done, __ATOMIC_SEQ_CST) >= page->linger;
  });
  ::_exit(status);
}

/// Forks process `rank` (runProcess).
pid_t spawn(SharedPage *page, int rank, const std::function<int()> &body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0)
    runProcess(page, rank, body);
  if (rank == 0)
    page->pid0 = pid;
  return pid;
}

/// The exit status of `pid`, or -1 when it ran past 60 s (then killed).
int finish(pid_t pid) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// Runs `kernel` with `args` alone in this process; writes the error or
/// the findings to `page->error[rank]` and the seconds it took; returns
/// the exit status (0: success without findings, 1 otherwise).
int runAndReport(SharedPage *page, int rank, ParsedKernel &kernel,
                 GlobalMemory &memory, const std::vector<KernelArgValue> &args) {
  LaunchConfig launch;
  launch.maxResidentWorkgroups = 1;
  launch.maxStepsPerWave = uint64_t(1) << 40;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  mlir::FailureOr<RunResult> result =
      runKernel(kernel.func, memory, args, launch, error);
  page->seconds[rank] = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
  std::string text = error;
  if (mlir::succeeded(result))
    for (const Finding &finding : result->findings)
      text += finding.str() + "\n";
  std::snprintf(page->error[rank], sizeof(page->error[rank]), "%s",
                text.c_str());
  return mlir::succeeded(result) && result->totalFindings() == 0 ? 0 : 1;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a relay between two processes over shared memory",
          "[peers][process]") {
  ParsedKernel kernel = parseKernel(kRelay);
  SharedPage *page = mapSharedPage();
  put(page, kFlag[0], 0);
  put(page, kFlag[1], 0);
  put(page, kBox[0], 1); // rank 1's box starts unwritten
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank)
    pids[rank] = spawn(page, rank, [&, rank] {
      GlobalMemory memory;
      auto buffer = [&](const char *name, size_t offset, size_t bytes) {
        return KernelArgValue::makeBuffer(
            addShared(memory, page, name, offset, bytes));
      };
      std::vector<KernelArgValue> args = {
          KernelArgValue::makeScalar(rank),
          buffer("myFlag", kFlag[rank], 4),
          buffer("peerFlag", kFlag[1 - rank], 4),
          buffer("myBox", kBox[rank], 4),
          buffer("peerBox", kBox[1 - rank], 4),
          buffer("out", kOut[rank], 32)};
      return runAndReport(page, rank, kernel, memory, args);
    });
  const int status0 = finish(pids[0]), status1 = finish(pids[1]);
  INFO("process 0: " << page->error[0]);
  INFO("process 1: " << page->error[1]);
  CHECK(status0 == 0);
  CHECK(status1 == 0);

  // The host's relay: rank 0 then rank 1 in every round.
  uint32_t box[2] = {1, 0};
  std::vector<uint32_t> expect[2];
  for (uint32_t i = 0; i < 8; ++i)
    for (uint32_t rank = 0; rank < 2; ++rank) {
      expect[rank].push_back(box[rank]);
      box[1 - rank] = box[rank] * 3u + rank + i;
    }
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    for (size_t i = 0; i < 8; ++i) {
      INFO("round " << i);
      CHECK(uint32_t(get(page, kOut[rank] + 4 * i)) == expect[rank][i]);
      CHECK(page->written[kOut[rank] + 4 * i] == 1);
    }
    CHECK(get(page, kFlag[rank]) == 8);
  }
  ::munmap(page, sizeof(SharedPage));
}

TEST_CASE("a deadlock across two processes is reported after the timeout",
          "[peers][process]") {
  ParsedKernel kernel = parseKernel(kWait);
  SharedPage *page = mapSharedPage();
  put(page, kFlag[0], 0);
  put(page, kFlag[1], 0);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank)
    pids[rank] = spawn(page, rank, [&, rank] {
      ::setenv("MOEC_EMULATED_PEER_TIMEOUT", "1", 1);
      GlobalMemory memory;
      const unsigned flag = addShared(memory, page, "flag", kFlag[rank], 4);
      return runAndReport(page, rank, kernel, memory,
                          {KernelArgValue::makeBuffer(flag)});
    });
  const int status[2] = {finish(pids[0]), finish(pids[1])};
  for (int rank = 0; rank < 2; ++rank) {
    const std::string error = page->error[rank];
    INFO("process " << rank << ": " << error);
    CHECK(status[rank] == 1);
    CHECK(error.rfind("emulator: deadlock: 1 workgroup spins and nothing can "
                      "change what they wait on: m::wait workgroup (0,0,0) "
                      "wave 0 at ",
                      0) == 0);
    CHECK(contains(error, "; no peer process advanced for "));
    CHECK(contains(error, "(MOEC_EMULATED_PEER_TIMEOUT 1 s): process " +
                              std::to_string(pids[1 - rank]) + " ("));
    // The timeout, not sooner, and not much later.
    CHECK(page->seconds[rank] >= 1.0);
    CHECK(page->seconds[rank] < 10.0);
  }
  ::munmap(page, sizeof(SharedPage));
}

TEST_CASE("a peer process that died ends the wait with its pid",
          "[peers][process]") {
  ParsedKernel kernel = parseKernel(kWait);
  SharedPage *page = mapSharedPage();
  page->linger = 0;
  put(page, kFlag[0], 0);
  const pid_t waiter = spawn(page, 0, [&] {
    ::setenv("MOEC_EMULATED_PEER_TIMEOUT", "30", 1);
    GlobalMemory memory;
    const unsigned flag = addShared(memory, page, "flag", kFlag[0], 4);
    return runAndReport(page, 0, kernel, memory,
                        {KernelArgValue::makeBuffer(flag)});
  });
  // Joins, then dies without leaving its slot (no exit handlers).
  const pid_t dying = spawn(page, 1, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return 0;
  });
  const int status = finish(waiter);
  CHECK(finish(dying) == 0);
  const std::string error = page->error[0];
  INFO(error);
  CHECK(status == 1);
  CHECK(error == "emulator: peer process " + std::to_string(dying) +
                     " ended while this run waits on memory it shares (the "
                     "process died or was killed without leaving its group)");
  CHECK(page->seconds[0] < 10.0);
  ::munmap(page, sizeof(SharedPage));
}

TEST_CASE("external buffers without a peer process deadlock at once",
          "[peers]") {
  ParsedKernel kernel = parseKernel(kWait);
  // Memory this test owns, bound in place: no other process maps it, and
  // this process is in no PeerGroup segment.
  std::vector<uint8_t> data(4, 0), written(4, 1);
  GlobalMemory memory;
  const unsigned flag =
      memory.addExternalBuffer("flag", 4, data.data(), written.data());
  CHECK(memory.isExternal(flag));
  CHECK(memory.data(flag) == data.data());
  LaunchConfig launch;
  launch.maxStepsPerWave = 1000000;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  auto result = runKernel(kernel.func, memory,
                          {KernelArgValue::makeBuffer(flag)}, launch, error);
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  REQUIRE(mlir::failed(result));
  INFO(error);
  CHECK(error.rfind("emulator: deadlock: 1 workgroup spins", 0) == 0);
  CHECK(contains(error, "; no other process shares this run's memory"));
  CHECK(seconds < 1.0);
}
