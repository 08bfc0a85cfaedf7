/*===- moec_runtime.h - C API of the moec runtime ------------------------===*
 *
 * Conventions (after IREE's runtime API):
 *  - every function returns a moec_status_t; MOEC_STATUS_OK is 0;
 *  - outputs are out_* parameters, written only on success;
 *  - whoever creates an object owns it and releases it with the matching
 *    *_close / *_release function; borrowed pointers (strings, arrays) stay
 *    valid while their owner lives;
 *  - on failure, moec_last_error_message() returns a one-line message for
 *    the calling thread (valid until that thread's next API call);
 *  - no C++ exception ever crosses this API.
 * Plain C99; link with libmoec_runtime.so (or the static moec_runtime).
 *===----------------------------------------------------------------------===*/
#ifndef MOEC_RUNTIME_H
#define MOEC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#if defined(MOEC_RUNTIME_BUILDING)
#define MOEC_API __attribute__((visibility("default")))
#else
#define MOEC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes. */
typedef enum moec_status_e {
  MOEC_STATUS_OK = 0,
  MOEC_STATUS_INVALID_ARGUMENT = 1, /**< a null pointer, bad index, bad kind */
  MOEC_STATUS_NOT_FOUND = 2,        /**< no such table / kernel */
  MOEC_STATUS_IO_ERROR = 3,         /**< cannot open or read a file */
  MOEC_STATUS_CORRUPT_BUNDLE = 4,   /**< truncated, checksum, schema errors */
  MOEC_STATUS_SELECTION_MISS = 5,   /**< m above the table with policy "error" */
  MOEC_STATUS_NO_HIP_RUNTIME = 6,   /**< libamdhip64 not found or incomplete */
  MOEC_STATUS_NO_DEVICE = 7,        /**< hipInit / hipGetDeviceCount failed */
  MOEC_STATUS_HIP_ERROR = 8,        /**< a HIP call failed */
  MOEC_STATUS_RESOURCE_EXCEEDED = 9,/**< kernel needs more than the device has */
  MOEC_STATUS_INTERNAL = 10,        /**< unexpected failure (out of memory, ...) */
  MOEC_STATUS_ROW_NOT_COMPILED = 11,/**< the AITER row a key selects has no
                                         kernels in the bundle (skipped at
                                         compile time, or another activation) */
} moec_status_t;

/** One-line message of the calling thread's last failure ("" if none). */
MOEC_API const char *moec_last_error_message(void);
/** Name of a status code, e.g. "MOEC_STATUS_CORRUPT_BUNDLE". */
MOEC_API const char *moec_status_name(moec_status_t status);

/* ---- Bundles ---------------------------------------------------------- */

typedef struct moec_bundle_t moec_bundle_t;

/** Opens and verifies a bundle (mmap, checksums, manifest, tables). */
MOEC_API moec_status_t moec_bundle_open(const char *path,
                                        moec_bundle_t **out_bundle);
/** Flags of moec_bundle_open_with_flags. */
enum {
  /** Check each code object's checksum when it is first used instead of
   *  hashing every code object at open (for very large bundles). */
  MOEC_BUNDLE_OPEN_VERIFY_CODE_OBJECTS_ON_FIRST_USE = 1u << 0,
};
/** moec_bundle_open with flags (0 = the default: verify everything at open). */
MOEC_API moec_status_t moec_bundle_open_with_flags(const char *path, uint32_t flags,
                                                   moec_bundle_t **out_bundle);
/** Closes a bundle; NULL is ignored. */
MOEC_API void moec_bundle_close(moec_bundle_t *bundle);

/** Merges a selection override file (docs/selection.md) into the bundle's
 *  tables; out_rows_changed (may be NULL) receives replaced + added rows.
 *  Call before resolving tables. On failure nothing changes. */
MOEC_API moec_status_t moec_bundle_apply_overrides(moec_bundle_t *bundle,
                                                   const char *override_path,
                                                   uint32_t *out_rows_changed);

/** Target architecture recorded in the manifest ("gfx950"). */
MOEC_API moec_status_t moec_bundle_target_arch(const moec_bundle_t *bundle,
                                               const char **out_arch);

/** CUs of the part the bundle was compiled for: 256 for gfx950 (MI355X),
 *  128 for MI350P (manifest target.compute_units; a bundle that does not
 *  record it is its arch's first part). Compare with
 *  moec_device_compute_units: AITER rows and persistent grids are tuned for
 *  this count. */
MOEC_API moec_status_t moec_bundle_target_compute_units(
    const moec_bundle_t *bundle, uint32_t *out_compute_units);

MOEC_API moec_status_t moec_bundle_kernel_count(const moec_bundle_t *bundle,
                                                uint32_t *out_count);

/** Resource metadata of one kernel (NT_AMDGPU_METADATA values). */
typedef struct moec_kernel_resources_t {
  uint32_t vgpr, agpr, sgpr;
  uint32_t lds_bytes;
  uint32_t private_segment_bytes;
  uint32_t vgpr_spill, sgpr_spill;
  uint32_t wavefront_size;
  uint32_t max_flat_workgroup_size;
} moec_kernel_resources_t;

/** Borrowed view of one kernel; strings live as long as the bundle. */
typedef struct moec_kernel_info_t {
  const char *name;
  const char *symbol;
  const char *stage;
  const char *content_hash;
  uint32_t code_object;
  uint32_t workgroup_size[3];
  uint32_t arg_count;
  moec_kernel_resources_t resources;
} moec_kernel_info_t;

MOEC_API moec_status_t moec_bundle_kernel_info(const moec_bundle_t *bundle,
                                               uint32_t kernel_index,
                                               moec_kernel_info_t *out_info);

/** Index of the kernel named `name`; MOEC_STATUS_NOT_FOUND if none. */
MOEC_API moec_status_t moec_bundle_find_kernel(const moec_bundle_t *bundle,
                                               const char *name,
                                               uint32_t *out_kernel_index);

/** Argument kinds of the kernel ABI. */
typedef enum moec_arg_kind_e {
  MOEC_ARG_BUFFER = 0, /**< device pointer (8 bytes) */
  MOEC_ARG_I32 = 1,
  MOEC_ARG_I64 = 2,
} moec_arg_kind_t;

/** Name and kind of argument `arg_index` of a kernel. */
MOEC_API moec_status_t moec_bundle_kernel_arg(const moec_bundle_t *bundle,
                                              uint32_t kernel_index,
                                              uint32_t arg_index,
                                              const char **out_name,
                                              moec_arg_kind_t *out_kind);

/** A configuration: the kernels one selection launches, in order. */
typedef struct moec_config_info_t {
  const char *id;
  const char *provenance; /**< "measured" or "model-ranked" */
  uint32_t kernel_count;
  const uint32_t *kernels; /**< borrowed, kernel_count entries */
} moec_config_info_t;

MOEC_API moec_status_t moec_bundle_config_count(const moec_bundle_t *bundle,
                                                uint32_t *out_count);
MOEC_API moec_status_t moec_bundle_config_info(const moec_bundle_t *bundle,
                                               uint32_t config_index,
                                               moec_config_info_t *out_info);

/** Bytes of a code object (borrowed from the bundle's mmap; checksum
 *  verified before it is returned). */
MOEC_API moec_status_t moec_bundle_code_object(const moec_bundle_t *bundle,
                                               uint32_t code_object_index,
                                               const void **out_data,
                                               size_t *out_size);

/** A named value for grid rules ("H", "num_sorted", "num_tokens", ...). */
typedef struct moec_rule_variable_t {
  const char *name;
  int64_t value;
} moec_rule_variable_t;

/** Evaluates the kernel's grid rules (manifest launch.grid; exact
 *  arithmetic, ceil/floor/min/max, see grid_rule.h) into out_grid[3].
 *  MOEC_STATUS_INVALID_ARGUMENT with the rule named when a name is unknown
 *  or a value is not a whole number >= 1. */
MOEC_API moec_status_t moec_bundle_kernel_grid(const moec_bundle_t *bundle,
                                               uint32_t kernel_index,
                                               const moec_rule_variable_t *variables,
                                               uint32_t variable_count,
                                               uint32_t out_grid[3]);

/* ---- Selection -------------------------------------------------------- */

/** A resolved table (network, ep, workspace class). Plain value. */
typedef struct moec_table_t {
  uint32_t index;
} moec_table_t;

/** Resolves the table for (network, ep) with the smallest workspace class
 *  >= workspace. MOEC_STATUS_NOT_FOUND if there is none. Do this once. */
MOEC_API moec_status_t moec_bundle_resolve_table(const moec_bundle_t *bundle,
                                                 const char *network,
                                                 uint32_t ep, uint32_t workspace,
                                                 moec_table_t *out_table);

typedef struct moec_selection_t {
  uint32_t config;        /**< configuration index */
  uint32_t row;           /**< row index within the table */
  uint32_t row_m;         /**< the row's m bucket */
  uint8_t exact;          /**< row_m == m */
  uint8_t fallback;       /**< m above the largest row, policy "largest" */
  uint32_t kernel_count;  /**< kernels of the configuration */
  const uint32_t *kernels;/**< borrowed, kernel_count entries */
} moec_selection_t;

/** Selects the row for m (nearest, ties larger; m = 0 -> smallest row;
 *  above the largest row: fallback or MOEC_STATUS_SELECTION_MISS).
 *  Allocation-free; does not touch the error message on success. */
MOEC_API moec_status_t moec_bundle_select(const moec_bundle_t *bundle,
                                          moec_table_t table, uint32_t m,
                                          moec_selection_t *out_selection);

/* ---- AITER tuned-table lookup (docs/aiter-tables.md) ------------------ */

/** One key column of AITER's tuned CSV by its own name and value spelling,
 *  e.g. {"act_type", "ActivationType.Silu"}, {"topk", "6"}. */
typedef struct moec_aiter_column_t {
  const char *column;
  const char *value;
} moec_aiter_column_t;

/** The row AITER's lookup picks and the moec configuration compiled for it.
 *  Strings are borrowed from the bundle. */
typedef struct moec_aiter_selection_t {
  const char *kernel_name1;
  const char *kernel_name2;
  uint32_t block_m;
  uint32_t ksplit;
  uint32_t source_row;    /**< the row's line in its CSV (header = line 1) */
  const char *file;       /**< the CSV as given to moec compile */
  const char *rule;       /**< "exact", "act_type_fallback", "tier_fallback" */
  uint32_t token;         /**< get_padded_M(m), the bucket looked up first */
  uint32_t row_token;     /**< the row's token */
  uint32_t row;           /**< index into the manifest's aiter_rows */
  uint32_t config;        /**< configuration index */
  uint32_t kernel_count;  /**< kernels of the configuration */
  const uint32_t *kernels;/**< borrowed, kernel_count entries */
} moec_aiter_selection_t;

/** AITER's lookup (fused_moe.get_2stage_cfgs) for m tokens with the key
 *  given explicitly: all 13 key columns (gfx, cu_num, model_dim, inter_dim,
 *  expert, topk, act_type, dtype, q_dtype_a, q_dtype_w, q_type, use_g1u1,
 *  doweight_stage1), plus shared_expert_id, hidden_pad, intermediate_pad
 *  and gate_mode for FHMoE tables; token comes from m. Nothing is defaulted
 *  or adjusted (topk and expert as the CSV has them).
 *  MOEC_STATUS_SELECTION_MISS: no row (the message prints the key and the
 *  token buckets it has, or the nearest keys that exist);
 *  MOEC_STATUS_ROW_NOT_COMPILED: the row was skipped at compile time or is
 *  for another activation (the message names its file:line and reason);
 *  MOEC_STATUS_INVALID_ARGUMENT: an unknown, repeated or missing column, a
 *  non-integer value; MOEC_STATUS_NOT_FOUND: the bundle has no AITER rows.
 *  Allocation-free on success; does not touch the error message then. */
MOEC_API moec_status_t moec_bundle_select_aiter(const moec_bundle_t *bundle,
                                                uint64_t m,
                                                const moec_aiter_column_t *key,
                                                uint32_t key_count,
                                                moec_aiter_selection_t *out_selection);

/* ---- Devices and launches (HIP through dlopen) ------------------------- */

typedef struct moec_device_t moec_device_t;

/** Loads the HIP runtime and initialises device `ordinal`. hip_library may
 *  be NULL (search $MOEC_HIP_LIBRARY, or libamdhip64.so, .so.7, .so.6, .so.5,
 *  $ROCM_PATH/lib/libamdhip64.so) or a path tried alone.
 *  MOEC_STATUS_NO_HIP_RUNTIME / MOEC_STATUS_NO_DEVICE when absent. */
MOEC_API moec_status_t moec_device_create(const char *hip_library, int ordinal,
                                          moec_device_t **out_device);
MOEC_API void moec_device_release(moec_device_t *device);

/** Number of compute units reported by the device. */
MOEC_API moec_status_t moec_device_compute_units(const moec_device_t *device,
                                                 uint32_t *out_count);

/** The kernels of one bundle on one device; modules load lazily. It keeps
 *  its device and bundle alive, so handles may be released in any order
 *  (each release drops one reference; the last frees). */
typedef struct moec_executable_t moec_executable_t;

MOEC_API moec_status_t moec_executable_create(moec_device_t *device,
                                              const moec_bundle_t *bundle,
                                              moec_executable_t **out_executable);
MOEC_API void moec_executable_release(moec_executable_t *executable);

/** Loads the module of a kernel now (otherwise the first launch does). */
MOEC_API moec_status_t moec_executable_load_kernel(moec_executable_t *executable,
                                                   uint32_t kernel_index);

/** One argument; `kind` must match the kernel ABI. */
typedef struct moec_kernel_arg_t {
  moec_arg_kind_t kind;
  union {
    const void *buffer;
    int32_t i32;
    int64_t i64;
  } value;
} moec_kernel_arg_t;

/** Launches a kernel with grid[3] workgroups on `stream` (a hipStream_t, or
 *  NULL for the null stream), using the manifest's workgroup size. */
MOEC_API moec_status_t moec_executable_launch(moec_executable_t *executable,
                                              uint32_t kernel_index,
                                              const uint32_t grid[3],
                                              const moec_kernel_arg_t *args,
                                              uint32_t arg_count, void *stream);

/* ---- Device memory (for engines and tools without a HIP allocator) ---- */

/** hipMalloc on the device (256-byte aligned); *out_pointer is a device
 *  pointer. Free with moec_device_free. */
MOEC_API moec_status_t moec_device_alloc(moec_device_t *device, size_t bytes,
                                         void **out_pointer);
MOEC_API moec_status_t moec_device_free(moec_device_t *device, void *pointer);
/** Synchronous copies (they wait for the device's queued work). */
MOEC_API moec_status_t moec_device_copy_to_device(moec_device_t *device,
                                                  void *device_dst,
                                                  const void *host_src,
                                                  size_t bytes);
MOEC_API moec_status_t moec_device_copy_to_host(moec_device_t *device,
                                                void *host_dst,
                                                const void *device_src,
                                                size_t bytes);
/** Fills `bytes` bytes of device memory with `value` (stream-ordered). */
MOEC_API moec_status_t moec_device_fill(moec_device_t *device, void *device_dst,
                                        int value, size_t bytes, void *stream);
/** Makes `device` the calling thread's current device: launches and
 *  allocations go to the current device (several devices in one process). */
MOEC_API moec_status_t moec_device_make_current(moec_device_t *device);
/** Waits for every launch on `stream` (NULL: the null stream). */
MOEC_API moec_status_t moec_device_synchronize(moec_device_t *device,
                                               void *stream);

/** HIP IPC, for engines with no symmetric memory of their own: a 64-byte
 *  handle for the start of an allocation, opened in another process (or on
 *  another device of this one) to get a pointer to the same memory. */
typedef struct moec_ipc_handle_t {
  char bytes[64];
} moec_ipc_handle_t;
MOEC_API moec_status_t moec_device_ipc_handle(moec_device_t *device,
                                              void *pointer,
                                              moec_ipc_handle_t *out_handle);
MOEC_API moec_status_t moec_device_ipc_open(moec_device_t *device,
                                            const moec_ipc_handle_t *handle,
                                            void **out_pointer);
MOEC_API moec_status_t moec_device_ipc_close(moec_device_t *device,
                                             void *pointer);

/* ---- Streams and graphs: capture a forward, replay it ----------------- */

/** An instantiated HIP graph (hipGraphExec_t with its hipGraph_t) of the
 *  work one capture recorded; it keeps its device alive. */
typedef struct moec_graph_t moec_graph_t;

/** hipStreamCreate on the device: a stream of its own, e.g. to capture on
 *  (the null stream cannot be captured). Destroy it with
 *  moec_device_stream_destroy. These and the capture functions below need
 *  the HIP library's stream and graph entry points (ROCm's libamdhip64 and
 *  moec's emulated device have them); a library without them:
 *  MOEC_STATUS_NO_HIP_RUNTIME naming the missing symbol. */
MOEC_API moec_status_t moec_device_stream_create(moec_device_t *device,
                                                 void **out_stream);
MOEC_API moec_status_t moec_device_stream_destroy(moec_device_t *device,
                                                  void *stream);
/** hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal): from now on,
 *  launches, fills and copies on `stream` are recorded, not run (a layer's
 *  forward on it records its kernels). While the capture lasts, HIP refuses
 *  allocations (hipMalloc: hipErrorStreamCaptureUnsupported), synchronous
 *  copies and work on the null stream (hipErrorStreamCaptureImplicit), and
 *  each refusal invalidates the capture. A null stream:
 *  MOEC_STATUS_INVALID_ARGUMENT. */
MOEC_API moec_status_t moec_device_begin_capture(moec_device_t *device,
                                                 void *stream);
/** hipStreamEndCapture, then hipGraphInstantiate: *out_graph is the work
 *  recorded since moec_device_begin_capture. The stream stops capturing
 *  whatever the outcome; a capture invalidated by a refused call fails
 *  with MOEC_STATUS_HIP_ERROR and HIP's text
 *  ("hipErrorStreamCaptureInvalidated (901)"), and no graph. */
MOEC_API moec_status_t moec_device_end_capture(moec_device_t *device, void *stream,
                                               moec_graph_t **out_graph);
/** hipGraphLaunch on `stream` (NULL: the null stream): the recorded work
 *  again, with the kernel arguments captured (the same pointers) and the
 *  buffers' contents as they are when it runs; stream-ordered, so sync the
 *  stream before reading the outputs. */
MOEC_API moec_status_t moec_graph_launch(moec_graph_t *graph, void *stream);
/** hipGraphExecDestroy and hipGraphDestroy; NULL is ignored. */
MOEC_API void moec_graph_release(moec_graph_t *graph);

/* ---- Layers: a whole MoE layer in one call (docs/runtime-api.md) ------- */

/** The layer as the engine sees it: routed experts and routed top-k (an
 *  FHMoE table adds its shared expert itself), the EP rank and size, and
 *  the largest M a forward will pass (0: the table's workspace class). */
typedef struct moec_layer_problem_t {
  uint32_t hidden;
  uint32_t intermediate; /**< TP-local, padded as compiled (Flash TP4: 640) */
  uint32_t experts;
  uint32_t top_k;
  uint32_t ep_rank;
  uint32_t ep_size;
  uint32_t max_tokens;
} moec_layer_problem_t;

/** Device memory a layer needs. Fused MegaMoE tables also need one
 *  symmetric buffer per rank of peer_bytes (zeroed once at allocation,
 *  addressable by every rank), laid out at the offsets below. */
typedef struct moec_layer_memory_t {
  uint64_t workspace_bytes;
  uint64_t peer_bytes; /**< 0 for unfused tables */
  uint64_t peer_recv_a_offset, peer_recv_scale_offset, peer_recv_meta_offset;
  uint64_t peer_control_offset, peer_control_bytes, peer_combine_rows_offset;
  uint32_t max_tokens; /**< the largest M a forward accepts */
  uint8_t fused;
  uint8_t shared_expert;
} moec_layer_memory_t;

/** Device pointers to one layer's prepared weights (docs/families.md,
 *  "Weight layouts"); shared_* only for FHMoE tables, else NULL. */
typedef struct moec_layer_weights_t {
  const void *w13, *w13_scale, *w2, *w2_scale;
  const void *shared_w13, *shared_w13_scale, *shared_w2, *shared_w2_scale;
} moec_layer_weights_t;

/** What the device reported (moec_layer_read_status). */
typedef struct moec_layer_status_t {
  /** Routes that found no room (fused: receive rows, sticky until
   *  moec_layer_clear_status; unfused: the last forward's sorted list).
   *  Nonzero: the layer's output is incomplete and must not be used. */
  uint64_t overflow_routes;
  uint64_t forwards; /**< forwards launched (the fused kernels' epoch) */
} moec_layer_status_t;

typedef struct moec_layer_t moec_layer_t;

/** Plans a layer over `table` of the executable's bundle: checks the
 *  problem against every kernel of the table and loads them all. Release
 *  it before the executable. */
MOEC_API moec_status_t moec_layer_create(moec_executable_t *executable,
                                         moec_table_t table,
                                         const moec_layer_problem_t *problem,
                                         moec_layer_t **out_layer);
MOEC_API void moec_layer_release(moec_layer_t *layer);
MOEC_API moec_status_t moec_layer_memory(const moec_layer_t *layer,
                                         moec_layer_memory_t *out_memory);
/** Binds the workspace (>= workspace_bytes, 256-byte aligned; FHMoE: a
 *  synchronous copy writes the shared expert's routing slot into it). */
MOEC_API moec_status_t moec_layer_bind_workspace(moec_layer_t *layer,
                                                 void *workspace, size_t bytes);
/** Fused tables: the symmetric buffers of ranks 0..ep_size-1 (this rank's
 *  own at index ep_rank). */
MOEC_API moec_status_t moec_layer_bind_peers(moec_layer_t *layer,
                                             void *const *peer_buffers,
                                             uint32_t count);
/** The weights of the next forwards (pointers only; rebinding is cheap, so
 *  one layer object can serve every MoE layer of a model in turn). */
MOEC_API moec_status_t moec_layer_bind_weights(moec_layer_t *layer,
                                               const moec_layer_weights_t *weights);
/** Per-expert FP32 biases (AITER's bias1 / bias2) for tables whose W13 or
 *  W2 kernels take `bias` (moec compile --aiter-bias, table bias=true):
 *  this rank's local experts' rows, w13_bias [local experts, 2I] in
 *  logical order (gate column j at [e, j], up column j at [e, I + j]) and
 *  w2_bias [local experts, H]; FHMoE: the shared expert's row last. Taken
 *  by the next moec_layer_bind_weights, which refuses such a table without
 *  them; NULL: none. A separate call keeps moec_layer_weights_t's layout. */
MOEC_API moec_status_t moec_layer_bind_bias(moec_layer_t *layer,
                                            const void *w13_bias,
                                            const void *w2_bias);
/** One forward on `stream`: m is the common maximum source-token count of
 *  all EP ranks (one all-reduce of max; an empty rank passes it too, with
 *  ids -1). hidden BF16 [m, H], topk_ids int32 [m, top_k], topk_weights
 *  FP32 [m, top_k], out BF16 [m, H]. Ids of -1 or outside [0, experts) add
 *  exactly zero. Unfused EP tables: out is this rank's partial sum over its
 *  local experts (the engine sums it over ranks). Allocation-free. */
MOEC_API moec_status_t moec_layer_forward(moec_layer_t *layer, uint32_t m,
                                          const void *hidden,
                                          const int32_t *topk_ids,
                                          const float *topk_weights, void *out,
                                          void *stream);
/** The rows an all-to-all dispatcher (DeepEP, MORI, vLLM's modular
 *  kernels) delivered to this EP rank, for moec_layer_forward_experts. */
typedef struct moec_expert_rows_t {
  uint32_t rows;
  const void *hidden;       /**< BF16 [rows, H] */
  /** int32 [rows, top_k]: this rank's experts by local id in [0, local
   *  experts); any other id (-1, another rank's expert) adds exactly zero. */
  const int32_t *local_ids;
  const float *weights;     /**< FP32 [rows, top_k] routing weights */
  /** Host [local experts]: the routes per local expert the dispatcher
   *  reports, which size the sorted list (an undercount shows as
   *  overflow_routes in moec_layer_read_status); NULL: every slot. */
  const uint32_t *expert_counts;
  void *out;                /**< BF16 [rows, H] */
} moec_expert_rows_t;

/** The experts-only entry, for expert parallelism through an external
 *  all-to-all: the delivered rows through this rank's experts (the same
 *  quant, sort, W13, W2 and combine kernels as moec_layer_forward), each
 *  output row the weighted sum of its local slots, ready for the
 *  dispatcher's combine. No peer traffic. Unfused tables without a shared
 *  expert (else MOEC_STATUS_INVALID_ARGUMENT); rows <= max_tokens; counts
 *  summing above rows * top_k are refused. Statuses and allocation as
 *  moec_layer_forward. */
MOEC_API moec_status_t moec_layer_forward_experts(moec_layer_t *layer,
                                                  const moec_expert_rows_t *rows,
                                                  void *stream);
/** The configuration the last forward ran (a moec_bundle_config_info index)
 *  and how many kernels it launched. */
MOEC_API moec_status_t moec_layer_last_forward(const moec_layer_t *layer,
                                               uint32_t *out_config,
                                               uint32_t *out_launches);
/** Reads the status words (synchronous: sync the stream first). */
MOEC_API moec_status_t moec_layer_read_status(moec_layer_t *layer,
                                              moec_layer_status_t *out_status);
/** Clears the fused overflow word after the engine handled a failed layer. */
MOEC_API moec_status_t moec_layer_clear_status(moec_layer_t *layer);

/* ---- Weight preparation (host; docs/weight-preparation.md) ------------- */

/** A host tensor: data, shape (ndim <= 4) and a PyTorch dtype name:
 *  "uint8", "float4_e2m1fn_x2", "float8_e4m3fn", "float8_e8m0fnu",
 *  "float32", "bfloat16", "int32". */
typedef struct moec_tensor_t {
  const void *data;
  uint32_t ndim;
  int64_t shape[4];
  const char *dtype;
} moec_tensor_t;

/** Where routed MXFP4 expert weights come from. */
typedef enum moec_weight_source_e {
  /** W13 [E, 2I', H/2] gate rows then up rows + E8M0 [E, 2I', H/32]; W2
   *  [E, H, I'/2] + [E, H, I'/32]; I' <= I (padded with zeros). */
  MOEC_WEIGHT_SOURCE_CHECKPOINT = 0,
  /** AITER's a8w4 preparation: shuffle_weight_a16w4(w1, 16, True),
   *  shuffle_scale_a16w4(w1_scale, E, True), shuffle_weight_a16w4(w2, 16,
   *  False), shuffle_scale_a16w4(w2_scale, E, False) or e8m0_shuffle. */
  MOEC_WEIGHT_SOURCE_AITER = 1,
  /** AITER's a16w4 preparation: as above with gate_up False for W13. */
  MOEC_WEIGHT_SOURCE_AITER_A16W4 = 2,
  /** AITER's CK preshuffle: shuffle_weight(w, (16, 16)) + e8m0_shuffle. */
  MOEC_WEIGHT_SOURCE_AITER_PRESHUFFLE_16X16 = 3,
} moec_weight_source_t;

/** What a layer's kernels read: H, padded I, routed experts of this rank,
 *  W13's gate/up interleave (0: gate rows then up rows) and whether an FHMoE
 *  FP8 shared expert is bound too. */
typedef struct moec_weight_layout_t {
  uint32_t hidden;
  uint32_t intermediate;
  uint32_t experts;
  uint32_t gate_up_interleave;
  uint8_t shared_expert;
} moec_weight_layout_t;

/** Bytes of each prepared tensor (shared_* 0 without a shared expert). */
typedef struct moec_weight_sizes_t {
  uint64_t w13, w13_scale, w2, w2_scale;
  uint64_t shared_w13, shared_w13_scale, shared_w2, shared_w2_scale;
} moec_weight_sizes_t;

/** The weight layout this layer's kernels read. */
MOEC_API moec_status_t moec_layer_weight_layout(const moec_layer_t *layer,
                                                moec_weight_layout_t *out_layout);
MOEC_API moec_status_t moec_weight_sizes(const moec_weight_layout_t *layout,
                                         moec_weight_sizes_t *out_sizes);
/** Writes routed expert weights in the kernels' layout into host buffers of
 *  moec_weight_sizes' sizes (then moec_device_copy_to_device). A tensor of
 *  the wrong shape or dtype: MOEC_STATUS_INVALID_ARGUMENT naming it and the
 *  expected shape. threads 0: every core. */
MOEC_API moec_status_t moec_prepare_expert_weights(
    const moec_weight_layout_t *layout, moec_weight_source_t source,
    const moec_tensor_t *w13, const moec_tensor_t *w13_scale,
    const moec_tensor_t *w2, const moec_tensor_t *w2_scale, void *out_w13,
    void *out_w13_scale, void *out_w2, void *out_w2_scale, uint32_t threads);
/** The same from a checkpoint that stores gate [E, I', H/2] and up
 *  [E, I', H/2] separately (each with [E, I', H/32] scales). */
MOEC_API moec_status_t moec_prepare_expert_weights_gate_up(
    const moec_weight_layout_t *layout, const moec_tensor_t *gate,
    const moec_tensor_t *gate_scale, const moec_tensor_t *up,
    const moec_tensor_t *up_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads);
/** The FHMoE shared expert: FP8 E4M3FN W13 [2I', H] (gate rows then up
 *  rows) and W2 [H, I'], each with E8M0 1x32 scales ([rows, cols/32]) or
 *  DeepSeek's float32 128x128 block scales ([ceil(rows/128),
 *  ceil(cols/128)], converted to 1x32 with the activation recipe). */
MOEC_API moec_status_t moec_prepare_shared_expert(
    const moec_weight_layout_t *layout, const moec_tensor_t *w13,
    const moec_tensor_t *w13_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads);
/** What converting block scales changed (moec_prepare_shared_expert_ex). */
typedef struct moec_conversion_report_t {
  uint64_t converted_elements;
  uint64_t inexact_elements;           /**< requantised value differs */
  uint64_t non_power_of_two_block_scales;
  double max_relative_error;           /**< |error| / amax of its 1x32 block */
} moec_conversion_report_t;
/** moec_prepare_shared_expert with gate and up given separately (up and
 *  up_scale NULL: w13 holds both) and a conversion report (may be NULL). */
MOEC_API moec_status_t moec_prepare_shared_expert_ex(
    const moec_weight_layout_t *layout, const moec_tensor_t *w13,
    const moec_tensor_t *w13_scale, const moec_tensor_t *up,
    const moec_tensor_t *up_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads,
    moec_conversion_report_t *out_report);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOEC_RUNTIME_H */
