/* moec_layer_example: one MoE layer through the moec runtime's C API.
 *
 *   moec_layer_example BUNDLE NETWORK INPUT_DIR OUTPUT_DIR
 *
 * Opens BUNDLE, creates device 0 (the HIP library named by
 * $MOEC_HIP_LIBRARY, or the system's libamdhip64), resolves the table of
 * NETWORK at EP 1 (smallest workspace class), creates a layer,
 * uploads the inputs and weights `moec reference --write-inputs` writes
 * (hidden_states, topk_ids, topk_weights, w13, w13_scale, w2, w2_scale
 * .npy, and shared_* for FHMoE, in the checkpoint layout: gate rows then
 * up rows, `--interleave 0`), prepares the weights for the layer's kernels
 * (moec_prepare_expert_weights, moec_prepare_shared_expert), runs one
 * forward and writes
 * OUTPUT_DIR/output.npy (BF16 bits), which `moec reference --inputs
 * INPUT_DIR --compare OUTPUT_DIR` checks against the oracle.
 *
 * Plain C99 against libmoec_runtime.so: no HIP headers, no link-time HIP. */
#include "moec/moec_runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A .npy file: its data and shape (at most 4 dimensions). */
typedef struct npy_t {
  void *data;
  size_t bytes;
  size_t shape[4];
  int rank;
} npy_t;

static int fail(const char *what) {
  fprintf(stderr, "moec_layer_example: %s\n", what);
  return 1;
}

static int check(moec_status_t status, const char *what) {
  if (status == MOEC_STATUS_OK)
    return 0;
  fprintf(stderr, "moec_layer_example: %s: %s: %s\n", what,
          moec_status_name(status), moec_last_error_message());
  return 1;
}

/* Reads DIR/NAME.npy (version 1 header); 1 when it is missing. */
static int read_npy(const char *dir, const char *name, npy_t *out) {
  char path[4096], header[1024];
  unsigned char preamble[10];
  FILE *file;
  size_t header_length, count = 1;
  const char *shape;
  int i;
  memset(out, 0, sizeof *out);
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  file = fopen(path, "rb");
  if (!file)
    return 1;
  if (fread(preamble, 1, 10, file) != 10 || memcmp(preamble, "\x93NUMPY", 6) != 0 ||
      preamble[6] != 1) {
    fclose(file);
    return fail("not a version-1 .npy file");
  }
  header_length = (size_t)preamble[8] | ((size_t)preamble[9] << 8);
  if (header_length >= sizeof header || fread(header, 1, header_length, file) != header_length) {
    fclose(file);
    return fail("bad .npy header");
  }
  header[header_length] = 0;
  shape = strstr(header, "'shape': (");
  if (!shape) {
    fclose(file);
    return fail("no shape in .npy header");
  }
  shape += strlen("'shape': (");
  while (*shape && *shape != ')' && out->rank < 4) {
    char *end;
    out->shape[out->rank] = (size_t)strtoull(shape, &end, 10);
    if (end == shape)
      break;
    count *= out->shape[out->rank++];
    shape = end;
    while (*shape == ',' || *shape == ' ')
      ++shape;
  }
  for (i = 0; header[i]; ++i) /* item size from the descr: '<u2', '|u1', ... */
    if (header[i] == '\'' && (header[i + 1] == '<' || header[i + 1] == '|'))
      break;
  out->bytes = count * (size_t)(header[i + 3] - '0');
  out->data = malloc(out->bytes ? out->bytes : 1);
  if (!out->data || fread(out->data, 1, out->bytes, file) != out->bytes) {
    fclose(file);
    return fail("short .npy file");
  }
  fclose(file);
  return 0;
}

/* Writes DIR/output.npy: BF16 bits [rows, cols] as '<u2'. */
static int write_output(const char *dir, const uint16_t *bits, size_t rows, size_t cols) {
  char path[4096], header[128];
  FILE *file;
  size_t length;
  snprintf(path, sizeof path, "%s/output.npy", dir);
  length = (size_t)snprintf(header, sizeof header,
                            "{'descr': '<u2', 'fortran_order': False, 'shape': (%zu, %zu), }",
                            rows, cols);
  while ((10 + length + 1) % 64 != 0)
    header[length++] = ' ';
  header[length++] = '\n';
  file = fopen(path, "wb");
  if (!file)
    return fail("cannot write output.npy");
  fwrite("\x93NUMPY\x01\x00", 1, 8, file);
  fputc((int)(length & 0xFF), file);
  fputc((int)(length >> 8), file);
  fwrite(header, 1, length, file);
  fwrite(bits, 2, rows * cols, file);
  return fclose(file) == 0 ? 0 : fail("cannot write output.npy");
}

/* Copies a host array to a new device allocation. */
static int upload(moec_device_t *device, const npy_t *array, void **out) {
  *out = NULL;
  if (!array->data)
    return 0;
  return check(moec_device_alloc(device, array->bytes, out), "alloc") ||
         check(moec_device_copy_to_device(device, *out, array->data, array->bytes),
               "copy");
}

/* A moec_tensor_t over a loaded .npy array. */
static moec_tensor_t as_tensor(const npy_t *array, const char *dtype) {
  moec_tensor_t tensor;
  int i;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = array->data;
  tensor.ndim = (uint32_t)array->rank;
  for (i = 0; i < array->rank; ++i)
    tensor.shape[i] = (int64_t)array->shape[i];
  tensor.dtype = dtype;
  return tensor;
}

/* Replaces arrays[first..first+3] (W13, its scales, W2, its scales in the
 * checkpoint layout: gate rows then up rows) by the layout the layer's
 * kernels read (gate/up interleave, padding), prepared on the host. */
static int prepare_weights(moec_layer_t *layer, npy_t *arrays, int shared) {
  moec_weight_layout_t layout;
  moec_weight_sizes_t sizes;
  moec_tensor_t t[4];
  void *out[4];
  uint64_t bytes[4];
  int i, first = shared ? 7 : 3;
  if (check(moec_layer_weight_layout(layer, &layout), "weight layout") ||
      check(moec_weight_sizes(&layout, &sizes), "weight sizes"))
    return 1;
  bytes[0] = shared ? sizes.shared_w13 : sizes.w13;
  bytes[1] = shared ? sizes.shared_w13_scale : sizes.w13_scale;
  bytes[2] = shared ? sizes.shared_w2 : sizes.w2;
  bytes[3] = shared ? sizes.shared_w2_scale : sizes.w2_scale;
  for (i = 0; i < 4; ++i) {
    t[i] = as_tensor(&arrays[first + i],
                     (i % 2) ? "float8_e8m0fnu" : (shared ? "float8_e4m3fn" : "uint8"));
    out[i] = malloc((size_t)bytes[i]);
    if (!out[i])
      return fail("out of memory");
  }
  if (shared ? check(moec_prepare_shared_expert(&layout, &t[0], &t[1], &t[2], &t[3], out[0],
                                                out[1], out[2], out[3], 0),
                     "prepare shared expert")
             : check(moec_prepare_expert_weights(&layout, MOEC_WEIGHT_SOURCE_CHECKPOINT,
                                                 &t[0], &t[1], &t[2], &t[3], out[0],
                                                 out[1], out[2], out[3], 0),
                     "prepare expert weights"))
    return 1;
  for (i = 0; i < 4; ++i) {
    free(arrays[first + i].data);
    arrays[first + i].data = out[i];
    arrays[first + i].bytes = (size_t)bytes[i];
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *names[] = {"hidden_states", "topk_ids", "topk_weights", "w13", "w13_scale",
                         "w2", "w2_scale", "shared_w13", "shared_w13_scale",
                         "shared_w2", "shared_w2_scale"};
  npy_t arrays[11];
  void *device_arrays[11];
  moec_bundle_t *bundle = NULL;
  moec_device_t *device = NULL;
  moec_executable_t *executable = NULL;
  moec_layer_t *layer = NULL;
  moec_table_t table;
  moec_layer_problem_t problem;
  moec_layer_memory_t memory;
  moec_layer_weights_t weights;
  moec_config_info_t config;
  void *workspace = NULL, *out = NULL;
  uint16_t *host_out;
  uint32_t m, config_index, launches;
  int i, shared;
  const char *network;
  if (argc != 5)
    return fail("usage: moec_layer_example BUNDLE NETWORK INPUT_DIR OUTPUT_DIR");
  network = argv[2];
  for (i = 0; i < 11; ++i)
    if (read_npy(argv[3], names[i], &arrays[i]) && i < 7)
      return fail("missing input (run moec reference --write-inputs first)");
  shared = arrays[7].data != NULL;
  m = (uint32_t)arrays[0].shape[0];

  if (check(moec_bundle_open(argv[1], &bundle), argv[1]) ||
      check(moec_device_create(NULL, 0, &device), "device") ||
      check(moec_executable_create(device, bundle, &executable), "executable"))
    return 1;
  if (check(moec_bundle_resolve_table(bundle, network, 1, 0, &table), network))
    return 1;
  memset(&problem, 0, sizeof problem);
  problem.hidden = (uint32_t)arrays[0].shape[1];
  problem.intermediate = (uint32_t)arrays[5].shape[2] * 2; /* w2 [E, H, I/2] */
  problem.experts = (uint32_t)arrays[3].shape[0];
  problem.top_k = (uint32_t)arrays[1].shape[1];
  problem.ep_size = 1;
  if (check(moec_layer_create(executable, table, &problem, &layer), "layer") ||
      check(moec_layer_memory(layer, &memory), "layer memory") ||
      check(moec_device_alloc(device, (size_t)memory.workspace_bytes, &workspace), "alloc") ||
      check(moec_layer_bind_workspace(layer, workspace, (size_t)memory.workspace_bytes),
            "workspace"))
    return 1;
  /* The .npy weights are in the checkpoint layout (gate rows then up rows):
   * prepare them for this layer's kernels. */
  if (prepare_weights(layer, arrays, 0) || (shared && prepare_weights(layer, arrays, 1)))
    return 1;
  for (i = 0; i < 11; ++i)
    if (upload(device, &arrays[i], &device_arrays[i]))
      return 1;
  weights.w13 = device_arrays[3];
  weights.w13_scale = device_arrays[4];
  weights.w2 = device_arrays[5];
  weights.w2_scale = device_arrays[6];
  weights.shared_w13 = shared ? device_arrays[7] : NULL;
  weights.shared_w13_scale = shared ? device_arrays[8] : NULL;
  weights.shared_w2 = shared ? device_arrays[9] : NULL;
  weights.shared_w2_scale = shared ? device_arrays[10] : NULL;
  if (check(moec_layer_bind_weights(layer, &weights), "weights") ||
      check(moec_device_alloc(device, (size_t)m * problem.hidden * 2, &out), "alloc") ||
      check(moec_layer_forward(layer, m, device_arrays[0], device_arrays[1],
                               device_arrays[2], out, NULL),
            "forward") ||
      check(moec_device_synchronize(device, NULL), "synchronize"))
    return 1;
  host_out = malloc((size_t)m * problem.hidden * 2);
  if (!host_out ||
      check(moec_device_copy_to_host(device, host_out, out, (size_t)m * problem.hidden * 2),
            "copy back") ||
      check(moec_layer_last_forward(layer, &config_index, &launches), "last forward") ||
      check(moec_bundle_config_info(bundle, config_index, &config), "config"))
    return 1;
  printf("moec_layer_example: %s m=%u config=%s %u launches, workspace %llu bytes\n",
         network, m, config.id, launches, (unsigned long long)memory.workspace_bytes);
  if (write_output(argv[4], host_out, m, problem.hidden))
    return 1;
  for (i = 0; i < 11; ++i) {
    moec_device_free(device, device_arrays[i]);
    free(arrays[i].data);
  }
  moec_device_free(device, workspace);
  moec_device_free(device, out);
  free(host_out);
  moec_layer_release(layer);
  moec_executable_release(executable);
  moec_device_release(device);
  moec_bundle_close(bundle);
  return 0;
}
