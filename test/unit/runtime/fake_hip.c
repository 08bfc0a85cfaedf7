/* A stand-in for libamdhip64 used by the runtime tests (no GPU, no HIP on the
 * build machine). It implements the runtime's symbol table with recorded
 * calls; MOEC_FAKE_HIP_MODE selects failures:
 *   ok (default) | init101 | count100 | count0 | nobinary | smalllds |
 *   memcpy1 (hipMemcpy returns hipErrorInvalidValue)
 * Built with FAKE_HIP_OMIT_LAUNCH it lacks hipModuleLaunchKernel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_EXPORT __attribute__((visibility("default")))

struct fake_hip_launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  void *stream;
  size_t kernarg_size;
  unsigned char kernarg[256];
  char function[256];
};

struct fake_function {
  char name[256];
};

static const void *last_image;
static int load_count;
static int unload_count;
static int launch_count;
static struct fake_hip_launch last_launch;
static struct fake_function functions[64];
static unsigned function_count;

static int mode_is(const char *name) {
  const char *mode = getenv("MOEC_FAKE_HIP_MODE");
  return mode && strcmp(mode, name) == 0;
}

FAKE_EXPORT int hipInit(unsigned flags) {
  (void)flags;
  return mode_is("init101") ? 101 : 0;
}

FAKE_EXPORT int hipGetDeviceCount(int *count) {
  if (mode_is("count100")) {
    *count = 0;
    return 100;
  }
  *count = mode_is("count0") ? 0 : 2;
  return 0;
}

FAKE_EXPORT int hipSetDevice(int device) { return device >= 0 && device < 2 ? 0 : 101; }

FAKE_EXPORT int hipDeviceGetAttribute(int *value, int attribute, int device) {
  (void)device;
  switch (attribute) {
  case 56: /* max threads per block */
    *value = 1024;
    return 0;
  case 63: /* multiprocessor count */
    *value = 256;
    return 0;
  case 74: /* max shared memory per block */
    *value = mode_is("smalllds") ? 65536 : 163840;
    return 0;
  case 87: /* warp size */
    *value = 64;
    return 0;
  }
  return 1; /* hipErrorInvalidValue */
}

FAKE_EXPORT int hipModuleLoadData(void **module, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0)
    return 200; /* hipErrorInvalidImage */
  if (mode_is("nobinary"))
    return 209; /* hipErrorNoBinaryForGpu */
  last_image = image;
  ++load_count;
  *module = malloc(16);
  return 0;
}

FAKE_EXPORT int hipModuleGetFunction(void **function, void *module, const char *name) {
  struct fake_function *f;
  if (!module)
    return 400;
  /* Functions live in a fixed pool (a real hipFunction_t is owned by its
   * module; the fake never frees them, and needs no heap for them). */
  if (function_count == sizeof(functions) / sizeof(functions[0]))
    function_count = 0;
  f = &functions[function_count++];
  strncpy(f->name, name, sizeof(f->name) - 1);
  f->name[sizeof(f->name) - 1] = 0;
  *function = f;
  return 0;
}

#ifndef FAKE_HIP_OMIT_LAUNCH
FAKE_EXPORT int hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy,
                                      unsigned gz, unsigned bx, unsigned by,
                                      unsigned bz, unsigned shared, void *stream,
                                      void **params, void **extra) {
  (void)params;
  memset(&last_launch, 0, sizeof(last_launch));
  last_launch.grid[0] = gx;
  last_launch.grid[1] = gy;
  last_launch.grid[2] = gz;
  last_launch.block[0] = bx;
  last_launch.block[1] = by;
  last_launch.block[2] = bz;
  last_launch.shared_bytes = shared;
  last_launch.stream = stream;
  strcpy(last_launch.function, ((struct fake_function *)function)->name);
  if (extra && extra[0] == (void *)1 && extra[2] == (void *)2 && extra[4] == (void *)3) {
    size_t size = *(size_t *)extra[3];
    if (size > sizeof(last_launch.kernarg))
      return 1;
    last_launch.kernarg_size = size;
    memcpy(last_launch.kernarg, extra[1], size);
  }
  ++launch_count;
  return 0;
}
#endif

FAKE_EXPORT int hipModuleUnload(void *module) {
  free(module);
  ++unload_count;
  return 0;
}

FAKE_EXPORT const char *hipGetErrorString(int error) {
  switch (error) {
  case 0:
    return "hipSuccess";
  case 100:
    return "hipErrorNoDevice";
  case 101:
    return "hipErrorInvalidDevice";
  case 209:
    return "hipErrorNoBinaryForGpu";
  }
  return "hipErrorUnknown";
}

FAKE_EXPORT int hipDeviceSynchronize(void) { return 0; }
FAKE_EXPORT int hipMalloc(void **pointer, size_t size) {
  *pointer = malloc(size);
  return *pointer ? 0 : 2;
}
FAKE_EXPORT int hipFree(void *pointer) {
  free(pointer);
  return 0;
}
FAKE_EXPORT int hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  (void)kind;
  if (mode_is("memcpy1"))
    return 1; /* hipErrorInvalidValue */
  memcpy(dst, src, size);
  return 0;
}

/* Introspection for the tests. */
/* Asynchronous copies are done at once (host memory stands in for device
 * memory); the fake launches nothing, so ordering cannot matter. */
FAKE_EXPORT int hipMemsetAsync(void *dst, int value, size_t size, void *stream) {
  (void)stream;
  memset(dst, value, size);
  return 0;
}
FAKE_EXPORT int hipMemcpy2DAsync(void *dst, size_t dst_pitch, const void *src,
                                 size_t src_pitch, size_t width, size_t height,
                                 int kind, void *stream) {
  size_t row;
  (void)kind;
  (void)stream;
  for (row = 0; row < height; ++row)
    memcpy((char *)dst + row * dst_pitch, (const char *)src + row * src_pitch, width);
  return 0;
}
FAKE_EXPORT int hipStreamSynchronize(void *stream) {
  (void)stream;
  return 0;
}
struct fake_ipc_handle {
  char reserved[64];
};
FAKE_EXPORT int hipIpcGetMemHandle(struct fake_ipc_handle *handle, void *pointer) {
  memset(handle->reserved, 0, sizeof handle->reserved);
  memcpy(handle->reserved, &pointer, sizeof pointer);
  return 0;
}
FAKE_EXPORT int hipIpcOpenMemHandle(void **pointer, struct fake_ipc_handle handle,
                                    unsigned flags) {
  (void)flags;
  memcpy(pointer, handle.reserved, sizeof *pointer);
  return 0;
}
FAKE_EXPORT int hipIpcCloseMemHandle(void *pointer) {
  (void)pointer;
  return 0;
}

FAKE_EXPORT const void *fake_hip_last_image(void) { return last_image; }
FAKE_EXPORT int fake_hip_load_count(void) { return load_count; }
FAKE_EXPORT int fake_hip_unload_count(void) { return unload_count; }
FAKE_EXPORT int fake_hip_launch_count(void) { return launch_count; }
FAKE_EXPORT const struct fake_hip_launch *fake_hip_last_launch(void) { return &last_launch; }
