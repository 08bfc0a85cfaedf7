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

/** The kernels of one bundle on one device; modules load lazily. Release
 *  it before the device and the bundle. */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOEC_RUNTIME_H */
