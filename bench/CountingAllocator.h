//===- CountingAllocator.h - heap allocations so far -------------*- C++ -*-===//
#ifndef MOEC_BENCH_COUNTINGALLOCATOR_H
#define MOEC_BENCH_COUNTINGALLOCATOR_H

#include <atomic>
#include <cstdint>

/// Global operator new calls so far (CountingAllocator.cpp replaces it).
uint64_t heapAllocations();

#endif // MOEC_BENCH_COUNTINGALLOCATOR_H
