//===- CountingAllocator.cpp - global operator new that counts -------------===//
//
// Linked into the benchmarks that check a hot path allocates nothing: every
// global operator new adds one to heapAllocations().
//
//===----------------------------------------------------------------------===//
#include "CountingAllocator.h"

#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> allocations{0};
} // namespace

uint64_t heapAllocations() {
  return allocations.load(std::memory_order_relaxed);
}

void *operator new(size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void *memory = std::malloc(size ? size : 1))
    return memory;
  throw std::bad_alloc();
}
void *operator new[](size_t size) { return ::operator new(size); }
void operator delete(void *memory) noexcept { std::free(memory); }
void operator delete[](void *memory) noexcept { std::free(memory); }
void operator delete(void *memory, size_t) noexcept { std::free(memory); }
void operator delete[](void *memory, size_t) noexcept { std::free(memory); }
