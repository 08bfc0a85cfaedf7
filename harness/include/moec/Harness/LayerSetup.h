//===- LayerSetup.h - a table's layer ranks on a device ---------*- C++ -*-===//
///
/// \file
/// What `moec selftest` and the device timer of `moec tune --device` share:
/// the facts of a selection table read from its kernels' attributes, one
/// rank's device, kernel loader, layer and buffers, device memory freed at
/// the end, and the allocation and binding of a rank's weights, workspace,
/// activations and symmetric buffer.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LAYERSETUP_H
#define MOEC_HARNESS_LAYERSETUP_H

#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/manifest.h"
#include "moec/selection.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moec::harness {

/// What a table's layer and the oracle need about it, read from its
/// kernels' attributes.
struct TableFacts {
  rt::LayerProblem problem;
  bool fused = false, shared = false, compact = false;
  int64_t interleave = 0;
  double swigluLimit = 0.0;
  /// W13's activation: GPT-OSS's SwiGLU (gpt_oss_swiglu, AITER's
  /// ActivationType.Swiglu) or SiLU.
  bool gptOssSwiglu = false;
  /// W13's activation is SiTUv2 (situ_v2, AITER's ActivationType.Situv2)
  /// with these betas.
  bool situV2 = false;
  double situBeta = 4.0, situLinearBeta = 25.0;
  /// The W13 and W2 kernels take per-expert FP32 biases (`bias`, AITER's
  /// bias1 / bias2).
  bool bias = false;
  int64_t fixedSlotCapacity = 0; ///< per local expert (fused fixed slot)
  /// W13's A rows (the token rows quant writes) and its output (the
  /// intermediate W2 reads): FP8 (A8W4) or MXFP4 (A4W4, activation or output
  /// f4E2M1FN); the oracle quantises in the same formats.
  bool tokensFp4 = false, intermediateFp4 = false;
  /// A16W4: W13 reads the BF16 tokens and writes a BF16 intermediate
  /// (activation bf16); the oracle reads both exactly.
  bool bf16Activations = false;
  /// Fused stage 2 sends FP8 1x32 combine rows (`payload = fp8`): the
  /// oracle models that rounding (ref::PeerPayload::Fp8).
  bool fp8PeerPayload = false;
};

const char *activationName(bool gptOssSwiglu);

/// Reads `facts` from the W13 and W2 kernels of every configuration of
/// `table`; false with a one-line `error` when they disagree on the
/// activation or the bias, or the table has no W13 kernel.
bool tableFacts(const rt::Manifest &manifest, const rt::SelectionTable &table,
                TableFacts &facts, std::string &error);

/// Device memory through the HIP symbols, freed at the end.
class DeviceMemory {
public:
  explicit DeviceMemory(const rt::HipDevice &device) : device_(device) {}
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  void *allocate(size_t bytes, std::string &error);
  bool upload(void *dst, const void *src, size_t bytes, std::string &error);
  bool download(void *dst, const void *src, size_t bytes, std::string &error);
  /// hipMemsetAsync on `stream` (null: the null stream).
  bool fill(void *dst, int value, size_t bytes, std::string &error,
            rt::hip::Stream stream = nullptr);

private:
  const rt::HipDevice &device_;
  std::vector<void *> owned_;
};

/// One rank's device: its HIP device, kernel loader and layer, and the
/// buffers bound to it.
struct Rank {
  std::unique_ptr<rt::HipDevice> device;
  std::unique_ptr<rt::KernelLoader> loader;
  std::unique_ptr<rt::Layer> layer;
  void *workspace = nullptr, *peer = nullptr;
  void *w13 = nullptr, *w13Scale = nullptr, *w2 = nullptr, *w2Scale = nullptr;
  void *sharedW13 = nullptr, *sharedW13Scale = nullptr, *sharedW2 = nullptr,
       *sharedW2Scale = nullptr;
  void *w13Bias = nullptr, *w2Bias = nullptr;
  void *hidden = nullptr, *ids = nullptr, *weights = nullptr, *out = nullptr;
};

/// Host copies of a layer's weights in the device layout. The routed
/// tensors hold `experts` experts (checkpoint numbering); a rank's local
/// expert l takes expert (first + l) mod `experts`, so a full set is
/// sliced per rank and a smaller one (a timing run needs no oracle)
/// repeats. Biases, when the table takes them: every routed expert's row
/// (FHMoE: the shared expert's last).
struct HostLayerWeights {
  int64_t experts = 0;
  std::vector<uint8_t> w13, w13Scales, w2, w2Scales;
  std::vector<uint8_t> sharedW13, sharedW13Scales, sharedW2, sharedW2Scales;
  std::vector<float> w13Bias, w2Bias;
};

/// Allocates rank `rankIndex` of `ep`'s weights (its local experts' slice),
/// workspace, activation buffers for `layerMemory.maxTokens` tokens and,
/// for a fused table, its symmetric buffer (zeroed), and binds the
/// workspace and weights to its layer. The caller binds the peers
/// (bindRankPeers) once every rank is set up.
bool setUpRank(Rank &rank, DeviceMemory &memory, const TableFacts &facts,
               uint32_t ep, uint32_t rankIndex, const HostLayerWeights &host,
               const rt::LayerMemory &layerMemory, std::string &error);

/// Fused tables: gives every rank's layer every rank's symmetric buffer.
bool bindRankPeers(std::vector<Rank> &ranks, std::string &error);

/// Seeded per-expert biases of a table that takes them: W13 [rows, 2I] and
/// W2 [rows, H] FP32, normally distributed, the same for a given seed.
void generateBiases(uint64_t seed, int64_t rows, int64_t hidden,
                    int64_t intermediate, std::vector<float> &w13,
                    std::vector<float> &w2);

/// A forward's inputs from a rank's buffers, for `m` tokens.
rt::LayerInputs rankInputs(const Rank &rank, uint32_t m);

} // namespace moec::harness

#endif // MOEC_HARNESS_LAYERSETUP_H
