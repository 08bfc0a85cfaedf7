//===- layer_bench.cpp - host overhead of one layer forward -----*- C++ -*-===//
//
// The host side of Layer::forward (select, grids, argument packing, launch
// calls) with a HIP library whose launches return at once (null_hip.c), for
// every selection table of a bundle, M cycling over 1..max. The global
// operator new is replaced to count heap allocations during the timed
// forwards (there must be none).
// Usage:
//   moec-layer-bench BUNDLE NULL_HIP_LIBRARY [forwards]   (default 200000)
//
//===----------------------------------------------------------------------===//
#include "CountingAllocator.h"
#include "moec/bundle.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

using namespace moec::rt;

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: moec-layer-bench BUNDLE NULL_HIP_LIBRARY [forwards]\n");
    return 2;
  }
  const long forwards = argc > 3 ? std::atol(argv[3]) : 200000;
  std::string error;
  std::unique_ptr<Bundle> bundle = Bundle::open(argv[1], error);
  if (!bundle) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
  const Manifest &manifest = bundle->manifest();
  int status = 0;
  for (size_t t = 0; t < manifest.selection.size(); ++t) {
    const SelectionTable &table = bundle->selector().tables()[t];
    std::unique_ptr<HipLibrary> library = HipLibrary::load({argv[2]}, error);
    std::unique_ptr<HipDevice> device =
        library ? HipDevice::create(std::move(library), 0, error) : nullptr;
    if (!device) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 2;
    }
    KernelLoader loader(*device, *bundle);
    // The problem as the table's W13 kernels were compiled for it.
    LayerProblem problem;
    problem.epSize = table.ep;
    for (uint32_t k : manifest.configs[table.rows[0].config].kernels) {
      const KernelInfo &kernel = manifest.kernels[k];
      if (kernel.stage != Stage::W13)
        continue;
      for (const auto &[name, text] : kernel.attributes) {
        auto value = [&](const char *key) {
          size_t at = text.find(std::string(key) + " = ");
          return at == std::string::npos
                     ? 0u
                     : uint32_t(std::atol(text.c_str() + at + std::strlen(key) + 3));
        };
        if (name == "problem") {
          problem.hidden = value("hidden");
          problem.intermediate = value("intermediate");
          problem.experts = value("experts");
          problem.topK = value("top_k");
        }
        if (name == "shared_fp8_expert") {
          problem.experts -= 1;
          problem.topK -= 1;
        }
      }
    }
    std::unique_ptr<Layer> layer = Layer::create(loader, TableHandle{uint32_t(t)},
                                                 problem, error);
    if (!layer) {
      std::fprintf(stderr, "%s\n", error.c_str());
      status = 1;
      continue;
    }
    const LayerMemory &memory = layer->memory();
    std::vector<void *> owned;
    auto allocate = [&](uint64_t bytes) {
      void *pointer = std::aligned_alloc(256, (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256);
      owned.push_back(pointer);
      return pointer;
    };
    void *workspace = allocate(memory.workspaceBytes);
    layer->bindWorkspace(workspace, memory.workspaceBytes, error);
    std::vector<void *> peers;
    for (uint32_t r = 0; r < table.ep && memory.peerBytes; ++r)
      peers.push_back(allocate(memory.peerBytes));
    if (!peers.empty())
      layer->bindPeers(peers.data(), uint32_t(peers.size()), error);
    LayerWeights weights;
    weights.w13 = weights.w13Scale = weights.w2 = weights.w2Scale =
        weights.sharedW13 = weights.sharedW13Scale = weights.sharedW2 =
            weights.sharedW2Scale = workspace;
    layer->bindWeights(weights, error);
    LayerInputs inputs;
    inputs.hidden = inputs.topkIds = inputs.topkWeights = workspace;
    inputs.out = workspace;
    const uint32_t maxM = memory.maxTokens;
    const uint64_t before = heapAllocations();
    uint64_t launches = 0;
    int failures = 0;
    auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < forwards; ++i) {
      inputs.m = 1 + uint32_t(i % maxM);
      if (layer->forward(inputs, nullptr, error) != Layer::ForwardStatus::Ok)
        ++failures;
      launches += layer->lastForward().launches;
    }
    const double seconds = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
    const uint64_t allocations = heapAllocations() - before;
    std::printf("%-28s %8.0f ns/forward  %4.1f launches/forward  "
                "%llu heap allocations in %ld forwards%s\n",
                describeTableKey(table.network, table.ep, table.workspace).c_str(),
                seconds * 1e9 / double(forwards), double(launches) / double(forwards),
                (unsigned long long)allocations, forwards,
                failures ? " (FAILED forwards)" : "");
    if (failures) {
      std::fprintf(stderr, "  %s\n", error.c_str());
      status = 1;
    }
    layer.reset();
    for (void *pointer : owned)
      std::free(pointer);
  }
  return status;
}
