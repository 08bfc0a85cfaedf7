//===- StageHarness.cpp - sort and combine stages on the emulator ---------===//

#include "moec/Emulator/StageHarness.h"

#include "moec/reference/Formats.h"
#include "moec/reference/Stages.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <cmath>
#include <cstring>

using namespace mlir;

namespace moec::emu {

LogicalResult runSort(Operation *funcOp, int64_t tileM, int64_t localExperts,
                      const std::vector<int32_t> &topkIds, int64_t tokens,
                      int64_t topK, int64_t expertOffset,
                      const LaunchConfig &launchIn, SortOutcome &outcome,
                      std::string &error) {
  auto func = cast<gpu::GPUFuncOp>(funcOp);
  const int64_t numRoutes = tokens * topK;
  const int64_t capacity =
      (numRoutes + localExperts * (tileM - 1) + tileM - 1) / tileM * tileM;
  GlobalMemory memory;
  const unsigned ids = memory.addBuffer("topk_ids", size_t(numRoutes) * 4);
  memory.write(ids, 0, topkIds.data(), size_t(numRoutes) * 4);
  const unsigned sorted = memory.addBuffer("sorted_routes", size_t(capacity) * 4);
  const unsigned tiles = memory.addBuffer("tile_experts", size_t(capacity / tileM) * 4);
  const unsigned status = memory.addBuffer("status", 8);
  memory.poison(sorted);
  memory.poison(tiles);
  memory.poison(status);
  LaunchConfig launch = launchIn;
  launch.grid = {1, 1, 1};
  std::vector<KernelArgValue> args = {
      KernelArgValue::makeBuffer(ids),    KernelArgValue::makeBuffer(sorted),
      KernelArgValue::makeBuffer(tiles),  KernelArgValue::makeBuffer(status),
      KernelArgValue::makeScalar(tokens), KernelArgValue::makeScalar(expertOffset),
      KernelArgValue::makeScalar(capacity)};
  outcome = SortOutcome();
  FailureOr<RunResult> run = runKernel(func, memory, args, launch, error);
  if (failed(run))
    return failure();
  outcome.run = std::move(*run);

  std::vector<int32_t> shifted(topkIds.begin(), topkIds.begin() + numRoutes);
  for (int32_t &id : shifted)
    id = (id >= expertOffset && id < expertOffset + localExperts)
             ? static_cast<int32_t>(id - expertOffset)
             : -1;
  ref::SortedRoutes want;
  std::string problem;
  if (ref::Status s = ref::buildSortedRoutes(shifted.data(), tokens, topK,
                                             localExperts, tileM, want);
      !s) {
    outcome.summary = "oracle failed: " + s.message();
    return success();
  }
  const int32_t *gotStatus = reinterpret_cast<const int32_t *>(memory.data(status));
  outcome.used = gotStatus[0];
  outcome.needed = gotStatus[1];
  const int64_t wantLen = static_cast<int64_t>(want.routeIds.size());
  int64_t mismatches = 0, unwritten = 0;
  if (!memory.written(status)[0] || !memory.written(status)[4])
    problem += "status not written; ";
  if (outcome.used != wantLen || outcome.needed != wantLen)
    problem += "status (" + std::to_string(outcome.used) + ", " +
               std::to_string(outcome.needed) + ") != (" +
               std::to_string(wantLen) + ", " + std::to_string(wantLen) + "); ";
  const int32_t *gotRoutes = reinterpret_cast<const int32_t *>(memory.data(sorted));
  const int32_t *gotTiles = reinterpret_cast<const int32_t *>(memory.data(tiles));
  for (int64_t i = 0; i < wantLen && i < capacity; ++i) {
    unwritten += !memory.written(sorted)[4 * i];
    mismatches += gotRoutes[i] != want.routeIds[size_t(i)];
  }
  for (int64_t t = 0; t < capacity / tileM; ++t) {
    unwritten += !memory.written(tiles)[4 * t];
    const int32_t expected = t < want.numTiles() ? want.tileExperts[size_t(t)] : -1;
    mismatches += gotTiles[t] != expected;
  }
  if (mismatches)
    problem += std::to_string(mismatches) + " entries differ from the oracle; ";
  if (unwritten)
    problem += std::to_string(unwritten) + " entries unwritten; ";
  outcome.sorted = want;
  outcome.sorted.routeIds.assign(gotRoutes, gotRoutes + std::min(wantLen, capacity));
  outcome.sorted.tileExperts.assign(gotTiles, gotTiles + std::min(wantLen, capacity) / tileM);
  outcome.pass = problem.empty() && outcome.run.totalFindings() == 0;
  outcome.summary = "list of " + std::to_string(outcome.used) + " entries (" +
                    std::to_string(want.numTiles()) + " tiles), " +
                    (problem.empty() ? std::string("identical to the oracle")
                                     : problem) +
                    ", " + std::to_string(outcome.run.totalFindings()) +
                    " findings";
  return success();
}

namespace {

double ulpBf16(double x) {
  x = std::fabs(x);
  if (!(x >= std::ldexp(1.0, -126)))
    return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::ilogb(x) - 7);
}

} // namespace

LogicalResult runCombine(Operation *funcOp, int64_t hidden, int64_t experts,
                         int64_t gridX, const CombineRows &input,
                         const std::vector<int32_t> &topkIds,
                         const std::vector<float> &topkWeights, int64_t tokens,
                         int64_t topK, const LaunchConfig &launchIn,
                         CombineOutcome &outcome, std::string &error) {
  auto func = cast<gpu::GPUFuncOp>(funcOp);
  const int64_t numRoutes = tokens * topK;
  const int64_t splitK = input.splitK;
  const size_t stored = size_t(numRoutes * hidden * splitK);
  const size_t itemBytes = splitK > 1 ? 4 : 2;
  GlobalMemory memory;
  const unsigned rowsId = memory.addBuffer("rows", stored * itemBytes);
  memory.write(rowsId, 0,
               splitK > 1 ? static_cast<const void *>(input.partials.data())
                          : static_cast<const void *>(input.bf16.data()),
               stored * itemBytes);
  // Rows nobody produced stay poisoned: the combine must not read them.
  for (size_t i = 0; i < stored; ++i)
    if (!input.written[i])
      std::memset(memory.written(rowsId) + itemBytes * i, 0, itemBytes);
  const unsigned ids = memory.addBuffer("topk_ids", size_t(numRoutes) * 4);
  memory.write(ids, 0, topkIds.data(), size_t(numRoutes) * 4);
  const unsigned weights = memory.addBuffer("topk_weights", size_t(numRoutes) * 4);
  memory.write(weights, 0, topkWeights.data(), size_t(numRoutes) * 4);
  const unsigned out = memory.addBuffer("out", size_t(tokens * hidden) * 2);
  memory.poison(out);
  outcome = CombineOutcome();
  if (tokens > 0) {
    LaunchConfig launch = launchIn;
    launch.grid = {std::max<int64_t>(gridX, 1), 1, 1};
    std::vector<KernelArgValue> args = {
        KernelArgValue::makeBuffer(rowsId), KernelArgValue::makeBuffer(ids),
        KernelArgValue::makeBuffer(weights), KernelArgValue::makeBuffer(out),
        KernelArgValue::makeScalar(tokens)};
    FailureOr<RunResult> run = runKernel(func, memory, args, launch, error);
    if (failed(run))
      return failure();
    outcome.run = std::move(*run);
  }
  const size_t elements = size_t(tokens * hidden);
  outcome.outBits.resize(elements);
  outcome.outWritten.resize(elements);
  std::memcpy(outcome.outBits.data(), memory.data(out), elements * 2);
  for (size_t i = 0; i < elements; ++i)
    outcome.outWritten[i] = memory.written(out)[2 * i] && memory.written(out)[2 * i + 1];

  // Oracle over the same BF16 rows (rows not produced read as zero there;
  // a valid route always has its row, which the findings check).
  // Route rows as the kernel reduces them: BF16 values, or the partials
  // summed in slice order; |row| sums for the tolerance.
  std::vector<double> rowValues(size_t(numRoutes * hidden), 0.0),
      rowMagnitudes(size_t(numRoutes * hidden), 0.0);
  for (int64_t r = 0; r < numRoutes; ++r)
    for (int64_t h = 0; h < hidden; ++h) {
      const size_t i = size_t(r * hidden + h);
      if (splitK == 1) {
        if (input.written[i])
          rowValues[i] = ref::decodeBf16(input.bf16[i]);
        rowMagnitudes[i] = std::fabs(rowValues[i]);
        continue;
      }
      for (int64_t z = 0; z < splitK; ++z) {
        const size_t p = size_t((r * splitK + z) * hidden + h);
        if (!input.written[p])
          continue;
        rowValues[i] += input.partials[p];
        rowMagnitudes[i] += std::fabs(input.partials[p]);
      }
    }
  outcome.oracle.assign(elements, 0.0);
  ref::combineRoutes(rowValues.data(), topkIds.data(), topkWeights.data(),
                     tokens, topK, experts, hidden, outcome.oracle.data());
  double errSq = 0.0, refSq = 0.0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < hidden; ++h) {
      const size_t i = size_t(t * hidden + h);
      outcome.unwritten += !outcome.outWritten[i];
      double absSum = 0.0;
      for (int64_t k = 0; k < topK; ++k)
        if (ref::isValidExpert(topkIds[size_t(t * topK + k)], experts))
          absSum += std::fabs(double(topkWeights[size_t(t * topK + k)])) *
                    rowMagnitudes[size_t((t * topK + k) * hidden + h)];
      const double want = outcome.oracle[i];
      const double got = ref::decodeBf16(outcome.outBits[i]);
      ++outcome.elementsChecked;
      const double err = std::fabs(got - want);
      const double tol = ulpBf16(std::max(std::fabs(want), std::fabs(got))) +
                         double(topK + splitK) * std::ldexp(1.0, -24) * absSum;
      if (!(err <= tol))
        ++outcome.elementsOverTolerance;
      if (std::isfinite(err))
        outcome.worstErrorOverTolerance =
            std::max(outcome.worstErrorOverTolerance, err / tol);
      errSq += err * err;
      refSq += want * want;
    }
  outcome.relL2 = refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
  outcome.pass = outcome.run.totalFindings() == 0 && outcome.unwritten == 0 &&
                 outcome.elementsOverTolerance == 0 &&
                 outcome.relL2 <= kW2RelL2Bound;
  char text[256];
  std::snprintf(text, sizeof(text),
                "rel L2 %.3e, worst err/tol %.3f, %lld over tolerance, %lld "
                "unwritten, %llu findings",
                outcome.relL2, outcome.worstErrorOverTolerance,
                (long long)outcome.elementsOverTolerance,
                (long long)outcome.unwritten,
                (unsigned long long)outcome.run.totalFindings());
  outcome.summary = text;
  return success();
}

} // namespace moec::emu
