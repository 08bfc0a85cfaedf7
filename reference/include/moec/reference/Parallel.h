//===- Parallel.h - a minimal parallel-for over std::thread -----*- C++ -*-===//
#ifndef MOEC_REFERENCE_PARALLEL_H
#define MOEC_REFERENCE_PARALLEL_H

#include <cstdint>
#include <functional>

namespace moec::ref {

/// Number of worker threads to use for a request of `requested` (0 means all
/// hardware threads; always at least 1).
int resolveThreadCount(int requested);

/// Calls body(worker, item) for every item in [0, count), spread dynamically
/// over resolveThreadCount(numThreads) threads; `worker` is in
/// [0, threads) so bodies can keep per-thread scratch. Results must not
/// depend on which thread runs an item: every item writes its own outputs.
void parallelFor(int64_t count, int numThreads,
                 const std::function<void(int worker, int64_t item)> &body);

} // namespace moec::ref

#endif // MOEC_REFERENCE_PARALLEL_H
