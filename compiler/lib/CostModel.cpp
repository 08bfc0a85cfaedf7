//===- CostModel.cpp - predicted time of a stage kernel on MI355X ---------===//
///
/// \file
/// docs/cost-model.md has the formulas, constants and sources.
///
//===----------------------------------------------------------------------===//

#include "moec/Compiler/CostModel.h"

#include "moec/target/occupancy.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <cmath>

namespace moec {

TileCounts countTile(const GemmStageShape &s) {
  // W13 reads both the gate and the up rows of its tileN intermediate
  // columns; W2's N tiles the hidden size. K is the other dimension.
  const bool w13 = s.stage == abi::Stage::W13;
  const double k = double(w13 ? s.hidden : s.intermediate);
  const double bRows = double(w13 ? 2 * s.tileN : s.tileN);
  const double m = double(s.tileM);
  TileCounts c;
  c.source = "analytic";
  // A: FP8 rows + one E8M0 scale per 32; B: E2M1 pairs + one scale per 32.
  const double aBytes = m * k + m * k / 32;
  const double bBytes = bRows * k / 2 + bRows * k / 32;
  c.globalBytesRead = aBytes + bBytes;
  // W13 writes FP8 + scales of its tileN SwiGLU outputs, W2 BF16 rows.
  c.globalBytesWritten =
      w13 ? m * double(s.tileN) * (1.0 + 1.0 / 32) : m * double(s.tileN) * 2;
  // Both operands are staged through LDS once (only A with b_direct, whose
  // weights go straight to registers); the waves split N, so every wave
  // reads the whole A slice and its own share of B.
  const double bLds = s.bDirect ? 0 : bBytes;
  c.ldsBytesWritten = aBytes + bLds;
  c.ldsBytesRead = double(s.waves) * aBytes + bLds;
  c.ldsBankConflicts = 0;
  const double mm = s.mfma32 ? 32 : 16, mn = mm, mk = s.mfma32 ? 64 : 128;
  c.scaledMfmas = std::ceil(m / mm) * std::ceil(bRows / mn) * (k / mk);
  // Per K step of 256 and wave: address arithmetic, loads, LDS reads,
  // waits and the loop: about 24 instructions, plus the epilogue.
  c.otherInstructions = double(s.waves) * (k / 256) * 24 + m * s.tileN / 64;
  return c;
}

bool costModelParameters(const std::string &name,
                         CostModelParameters &parameters) {
  if (name == "moec-cost-2") {
    parameters = CostModelParameters();
    return true;
  }
  if (name == "moec-cost-3") {
    // Fitted by `moec model-check --fit` on the training part of the
    // published figures (docs/cost-model.md, "moec-cost-3").
    parameters = CostModelParameters();
    parameters.launchOverheadUs = 3.97597;
    parameters.hbmEfficiency = 1;
    parameters.cuBytesPerSecond = 4.33936e10;
    parameters.tileRoundUs = 0.354647;
    parameters.otherIssuePerSimdCycle = 1;
    parameters.ldsThroughputScale = 3.528;
    parameters.peerBytesPerSecond = 1.90036e11;
    parameters.exchangeFixedUs = 148.988;
    parameters.randomRouting = false;
    return true;
  }
  return false;
}

namespace {

/// E[ceil(X / tile)] for X ~ Binomial(n, p): the expected M tiles of one
/// expert under random routing. The pmf is walked outwards from its mode
/// (where it cannot underflow) to 12 standard deviations either side.
double expectedTilesOfBinomial(double n, double p, double tile) {
  if (n <= 0)
    return 0;
  if (p >= 1)
    return std::ceil(n / tile - 1e-9);
  const double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  const double low = std::max(0.0, std::floor(mean - 12 * sd - 1));
  const double high = std::min(n, std::ceil(mean + 12 * sd + 1));
  const double mode = std::min(high, std::max(low, std::floor((n + 1) * p)));
  const double atMode =
      std::exp(std::lgamma(n + 1) - std::lgamma(mode + 1) -
               std::lgamma(n - mode + 1) + mode * std::log(p) +
               (n - mode) * std::log1p(-p));
  const double odds = p / (1 - p);
  double expected = 0, pmf = atMode;
  for (double x = mode; x <= high; ++x) {
    expected += pmf * std::ceil(x / tile - 1e-9);
    pmf *= (n - x) / (x + 1) * odds;
  }
  pmf = atMode;
  for (double x = mode; x > low; --x) {
    pmf *= x / (n - x + 1) / odds;
    expected += pmf * std::ceil((x - 1) / tile - 1e-9);
  }
  return expected;
}

} // namespace

TileGrid tileGrid(const GemmStageShape &s, int64_t m, bool randomRouting) {
  TileGrid g;
  const double ep = double(std::max<int64_t>(1, s.ep));
  const double experts = double(std::max<int64_t>(1, s.experts));
  const double local = experts / ep;
  const double routes = double(m) * ep * double(s.topK); // all ranks
  g.rowsPerRank = routes / ep;
  // Balanced routing: each route lands on one of E experts uniformly.
  g.activeExperts =
      local * (1.0 - std::pow(1.0 - 1.0 / experts, routes));
  g.rowsPerExpert = g.activeExperts > 0 ? g.rowsPerRank / g.activeExperts : 0;
  const double tilesPerExpert =
      std::max(1.0, std::ceil(g.rowsPerExpert / double(s.tileM) - 1e-9));
  g.mTiles = m == 0 ? 0 : std::ceil(g.activeExperts) * tilesPerExpert;
  if (randomRouting && m > 0)
    g.mTiles = local * expectedTilesOfBinomial(routes, 1.0 / experts,
                                               double(s.tileM));
  g.paddedRows = g.mTiles * double(s.tileM);
  const double columns =
      double(s.stage == abi::Stage::W13 ? s.intermediate : s.hidden);
  g.nTiles = std::ceil(columns / double(s.tileN));
  return g;
}

StagePrediction predictStage(const GemmStageShape &shape,
                             const rt::KernelResources &resources,
                             uint32_t workgroupSize, int64_t m,
                             const CostModelParameters &p,
                             const target::TargetInfo &chip,
                             const TileCounts *counted) {
  StagePrediction out;
  out.grid = tileGrid(shape, m, p.randomRouting);
  const TileCounts tile = counted ? *counted : countTile(shape);
  const target::OccupancyEstimate occupancy =
      target::estimateOccupancy(chip, resourceUse(resources, workgroupSize));
  out.workgroupsPerCu = std::max<uint32_t>(1, occupancy.workgroupsPerCu);
  const double tiles = out.grid.tiles();
  const double us = 1e6;
  out.launchUs = p.launchOverheadUs;
  if (tiles <= 0) {
    out.totalUs = out.launchUs;
    return out;
  }
  // HBM: every tile's bytes (no L2 reuse assumed across tiles).
  const double tileBytes = tile.globalBytesRead + tile.globalBytesWritten;
  out.hbmUs =
      tiles * tileBytes / (chip.hbmBytesPerSecond * p.hbmEfficiency) * us;
  // Tiles go round-robin over the CUs; a CU runs up to workgroupsPerCu at
  // once, and its MFMAs issue on the SIMDs its resident waves occupy.
  const double tilesPerCu = std::ceil(tiles / chip.computeUnits);
  const double residentTiles =
      std::min(tilesPerCu, double(out.workgroupsPerCu));
  const double busySimds =
      std::min<double>(chip.simdsPerCu, residentTiles * double(shape.waves));
  const double mfmaCycles = shape.mfma32 ? chip.scaledMfma32x32x64Fp8Cycles
                                         : chip.scaledMfma16x16x128Fp8Cycles;
  out.mfmaUs = tilesPerCu * tile.scaledMfmas * mfmaCycles / busySimds /
               chip.peakClockHz * us;
  out.issueUs = tilesPerCu * tile.otherInstructions /
                (busySimds * p.otherIssuePerSimdCycle) / chip.peakClockHz * us;
  // A bank conflict is one more cycle of the CU's LDS, in which it moves
  // nothing else.
  out.ldsUs = tilesPerCu *
              ((tile.ldsBytesRead + tile.ldsBytesWritten) /
                   chip.ldsBytesPerCuCycle +
               tile.ldsBankConflicts) /
              chip.peakClockHz * us / p.ldsThroughputScale;
  // A CU's tiles share what one CU can stream; each round of resident
  // tiles pays its fixed prologue and epilogue.
  if (p.cuBytesPerSecond > 0)
    out.cuMemoryUs = tilesPerCu * tileBytes / p.cuBytesPerSecond * us;
  out.tileRoundsUs = std::ceil(tilesPerCu / residentTiles - 1e-9) * p.tileRoundUs;
  out.totalUs = std::max({out.hbmUs, out.ldsUs, out.mfmaUs + out.issueUs,
                          out.cuMemoryUs}) +
                out.tileRoundsUs + out.launchUs;
  return out;
}

double predictPeerExchange(int64_t hidden, int64_t topK, int64_t ep, int64_t m,
                           double returnBytesPerHidden,
                           const CostModelParameters &p) {
  if (ep <= 1)
    return 0;
  // Each peer's share (1 / ep of the routes) crosses its own link, and
  // the links run in parallel.
  double us = p.exchangeFixedUs;
  if (p.peerBytesPerSecond > 0)
    us += double(m) * double(topK) * double(hidden) *
          (1 + returnBytesPerHidden) / double(ep) / p.peerBytesPerSecond * 1e6;
  return us;
}

} // namespace moec
