//===- layer.h - a whole MoE layer in one call ------------------*- C++ -*-===//
//
// A Layer turns one resolved selection table of a bundle into a MoE layer an
// engine calls with device pointers: it plans every buffer the table's
// configurations use, binds each kernel argument (by its ABI name) to one of
// them, and per forward selects the configuration for M, computes the grids,
// packs the arguments and launches the kernels in order on the engine's
// stream. docs/runtime-api.md, "Layers", is the contract; the shapes are
// those of docs/families.md.
//
// Memory: the engine allocates and binds
//  - the workspace (LayerMemory::workspaceBytes, device memory private to
//    this rank: the quantised tokens, the sorted route lists, the
//    intermediate, the route rows);
//  - for fused MegaMoE tables, one symmetric buffer per rank
//    (LayerMemory::peerBytes, zeroed once at allocation), whose addresses
//    every rank knows (IPC handles or a symmetric heap): the receive rows,
//    their metadata, the control words and the combine rows, at the offsets
//    LayerMemory::peer gives, identical on every rank;
//  - the weights, by pointer (no copy), in the layout the manifest names.
//
// forward() is allocation-free and takes no lock; one forward at a time per
// Layer.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_LAYER_H
#define MOEC_LAYER_H

#include "moec/hip_loader.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moec::rt {

/// The layer as the engine sees it. `experts` and `topK` count routed
/// experts and routed slots per token: an FHMoE table's shared expert is
/// added by the layer (internal E + 1 experts, top-k + 1 routes).
struct LayerProblem {
  uint32_t hidden = 0;
  /// TP-local, padded as the kernels were compiled (Flash TP4: 640).
  uint32_t intermediate = 0;
  uint32_t experts = 0;
  uint32_t topK = 0;
  uint32_t epRank = 0;
  uint32_t epSize = 1;
  /// Largest M any forward will pass; 0: the table's workspace class (and,
  /// for fused tables, at most the kernels' max_tokens).
  uint32_t maxTokens = 0;
};

/// Where one symmetric buffer holds what, in bytes from its start.
struct PeerLayout {
  uint64_t recvA = 0, recvScale = 0, recvMeta = 0, control = 0,
           combineRows = 0;
  uint64_t controlBytes = 0;
};

/// Device memory a layer needs.
struct LayerMemory {
  uint64_t workspaceBytes = 0;
  /// 0 unless the table is fused MegaMoE.
  uint64_t peerBytes = 0;
  PeerLayout peer;
  /// The largest M a forward accepts.
  uint32_t maxTokens = 0;
};

/// Device pointers to one layer's prepared weights (docs/families.md,
/// "Weight layouts"). The shared_* fields are for FHMoE tables only.
struct LayerWeights {
  const void *w13 = nullptr, *w13Scale = nullptr;
  const void *w2 = nullptr, *w2Scale = nullptr;
  const void *sharedW13 = nullptr, *sharedW13Scale = nullptr;
  const void *sharedW2 = nullptr, *sharedW2Scale = nullptr;
  /// Per-expert FP32 biases (AITER's bias1 / bias2), for tables whose W13
  /// or W2 kernels take `bias` (Layer::biasedW13/biasedW2), else unused:
  /// this rank's local experts' rows, W13 [local experts, 2I] in logical
  /// order (gate column j at [e, j], up column j at [e, I + j], whatever
  /// the weights' interleave) and W2 [local experts, H]; FHMoE: the shared
  /// expert's row last.
  const void *w13Bias = nullptr, *w2Bias = nullptr;
};

/// One forward's device pointers. M is the common maximum source-token
/// count of all ranks (EP: an all-reduce of max; an empty rank passes that
/// M too, with its rows' ids -1).
struct LayerInputs {
  uint32_t m = 0;
  const void *hidden = nullptr;      ///< BF16 [M, H]
  const void *topkIds = nullptr;     ///< int32 [M, top_k]
  const void *topkWeights = nullptr; ///< FP32 [M, top_k]
  void *out = nullptr;               ///< BF16 [M, H]
};

/// The rows an all-to-all dispatcher (DeepEP, MORI, vLLM's modular
/// kernels) delivered to this EP rank, for forwardExperts. Each row is one
/// token with its routing: its slots naming this rank's experts by local id
/// in [0, local experts) are computed, every other slot (-1, another rank's
/// expert) adds exactly zero.
struct ExpertRows {
  uint32_t rows = 0;
  const void *hidden = nullptr;   ///< BF16 [rows, H]
  const void *localIds = nullptr; ///< int32 [rows, top_k], local expert ids
  const void *weights = nullptr;  ///< FP32 [rows, top_k]
  /// Host [local experts]: the routes per local expert the dispatcher
  /// reports; the sorted list is then launched for exactly those routes
  /// (an undercount is reported by readStatus as overflow routes). Null:
  /// sized for every slot of every row.
  const uint32_t *expertCounts = nullptr;
  void *out = nullptr; ///< BF16 [rows, H]: each row's weighted sum
};

/// What the device reported about the forwards so far (readStatus).
struct LayerStatus {
  /// Fused: routes that found no receive row (sticky until clearStatus);
  /// unfused: routes the last forward's sort could not place.
  uint64_t overflowRoutes = 0;
  /// Forwards launched (the fused kernels' epoch).
  uint64_t forwards = 0;
};

/// What the last forward launched (for reports and tests).
struct ForwardInfo {
  uint32_t config = UINT32_MAX;
  bool fallback = false;
  uint32_t launches = 0;
};

class Layer {
public:
  /// Plans the layer for table `table` of the loader's bundle. Checks the
  /// problem against every kernel of the table's configurations and that
  /// every argument has a binding; loads every kernel (so a forward never
  /// loads). Errors name the table, config, kernel or argument:
  /// Status::InvalidArgument when the problem or the table does not fit,
  /// else KernelLoader::loadKernel's status.
  static std::unique_ptr<Layer> create(KernelLoader &loader, TableHandle table,
                                       const LayerProblem &problem, Error &error);
  /// create() for callers that only need the message.
  static std::unique_ptr<Layer> create(KernelLoader &loader, TableHandle table,
                                       const LayerProblem &problem,
                                       std::string &error);
  ~Layer();
  Layer(const Layer &) = delete;
  Layer &operator=(const Layer &) = delete;

  const LayerMemory &memory() const { return memory_; }
  bool fused() const { return fused_; }
  bool sharedExpert() const { return sharedExpert_; }
  /// The problem the layer was planned for.
  const LayerProblem &problem() const;
  /// W13's gate/up row interleave G (the W13 kernels' gate_up_interleave;
  /// 0: gate rows then up rows), what prepared weights must use.
  uint32_t gateUpInterleave() const { return gateUpInterleave_; }
  /// Whether some W13 (W2) kernel of the table takes a per-expert bias, so
  /// LayerWeights::w13Bias (w2Bias) is required.
  bool biasedW13() const { return biasedW13_; }
  bool biasedW2() const { return biasedW2_; }

  /// Binds the workspace (>= memory().workspaceBytes, 256-byte aligned).
  /// FHMoE: also writes the shared expert's constant routing slot into it
  /// (a synchronous copy), so bind before the first forward.
  /// Status::InvalidArgument for a workspace too small or misaligned,
  /// Status::HipError when the copy fails.
  bool bindWorkspace(void *workspace, uint64_t bytes, Error &error);
  /// bindWorkspace() for callers that only need the message.
  bool bindWorkspace(void *workspace, uint64_t bytes, std::string &error);
  /// Fused tables: the symmetric buffers of ranks 0..ep-1 (this rank's
  /// included, at index epRank). Every failure is a Status::InvalidArgument.
  bool bindPeers(void *const *bases, uint32_t count, std::string &error);
  /// The weights the next forwards use (pointers only). Every failure is a
  /// Status::InvalidArgument.
  bool bindWeights(const LayerWeights &weights, std::string &error);

  /// Why a forward failed: the few Status values a forward can have, each
  /// meaning the Status of the same name (an enum of its own, so the hot
  /// path returns it without an Error).
  enum class ForwardStatus { Ok, InvalidArgument, SelectionMiss, HipError };
  /// Selects, computes grids, packs arguments and launches on `stream`.
  /// Allocation-free on success; `error` is written only on failure.
  ForwardStatus forward(const LayerInputs &inputs, hip::Stream stream,
                        std::string &error);
  /// The experts-only entry: the rows a dispatcher delivered, computed by
  /// this rank's experts and weighted, for the dispatcher's combine (no
  /// peer traffic of its own). The same kernels as forward() after the
  /// dispatch: quant, sort by local expert, W13, W2, combine. Unfused
  /// tables without a shared expert (the shared expert belongs to the
  /// token's own rank); rows at most memory().maxTokens. The statuses of
  /// forward().
  ForwardStatus forwardExperts(const ExpertRows &rows, hip::Stream stream,
                               std::string &error);
  const ForwardInfo &lastForward() const { return last_; }

  /// Reads the status words (a synchronous device-to-host copy: sync the
  /// stream first). Status::InvalidArgument when the buffer holding them is
  /// not bound yet, Status::HipError when the copy fails.
  bool readStatus(LayerStatus &out, Error &error);
  /// readStatus() for callers that only need the message.
  bool readStatus(LayerStatus &out, std::string &error);
  /// Zeroes the fused overflow word (after handling a failed layer); the
  /// statuses of readStatus.
  bool clearStatus(Error &error);
  /// clearStatus() for callers that only need the message.
  bool clearStatus(std::string &error);

  struct Plan;

private:
  Layer() = default;
  /// forward() and forwardExperts(): `dispatched` takes the ids as local
  /// ids and zeroes every route row; `expertCounts` (may be null) sizes
  /// the sorted list.
  ForwardStatus run(const LayerInputs &inputs, bool dispatched,
                    const uint32_t *expertCounts, hip::Stream stream,
                    std::string &error);
  std::unique_ptr<Plan> plan_;
  LayerMemory memory_;
  bool fused_ = false, sharedExpert_ = false;
  bool biasedW13_ = false, biasedW2_ = false;
  uint32_t gateUpInterleave_ = 0;
  ForwardInfo last_;
};

} // namespace moec::rt

#endif // MOEC_LAYER_H
