//===- Parallel.cpp - a minimal parallel-for over std::thread -------------===//

#include "moec/reference/Parallel.h"

#include <atomic>
#include <thread>
#include <vector>

namespace moec::ref {

int resolveThreadCount(int requested) {
  if (requested > 0)
    return requested;
  unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

void parallelFor(int64_t count, int numThreads,
                 const std::function<void(int worker, int64_t item)> &body) {
  int threads = resolveThreadCount(numThreads);
  if (threads > count)
    threads = static_cast<int>(count > 0 ? count : 1);
  if (threads <= 1) {
    for (int64_t item = 0; item < count; ++item)
      body(0, item);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t item = next.fetch_add(1); item < count;
         item = next.fetch_add(1))
      body(worker, item);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int worker = 1; worker < threads; ++worker)
    pool.emplace_back(work, worker);
  work(0);
  for (std::thread &thread : pool)
    thread.join();
}

} // namespace moec::ref
