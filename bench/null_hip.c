/* libmoec_null_hip.so: a HIP library whose calls return at once, for
 * timing the host side of the runtime (moec-layer-bench). Memory is host
 * memory; copies and fills are not done; launches do nothing. */
#include <stdlib.h>
#include <string.h>

#define NULL_HIP_EXPORT __attribute__((visibility("default")))

static int function_token;

NULL_HIP_EXPORT int hipInit(unsigned flags) { (void)flags; return 0; }
NULL_HIP_EXPORT int hipGetDeviceCount(int *count) { *count = 1; return 0; }
NULL_HIP_EXPORT int hipSetDevice(int device) { return device == 0 ? 0 : 101; }
NULL_HIP_EXPORT int hipDeviceGetAttribute(int *value, int attribute, int device) {
  (void)device;
  switch (attribute) {
  case 56: *value = 1024; break;   /* max threads per block */
  case 63: *value = 256; break;    /* compute units (MI355X) */
  case 74: *value = 163840; break; /* LDS per workgroup (gfx950) */
  case 87: *value = 64; break;     /* wave size */
  default: *value = 0;
  }
  return 0;
}
NULL_HIP_EXPORT int hipModuleLoadData(void **module, const void *image) {
  *module = (void *)image;
  return 0;
}
NULL_HIP_EXPORT int hipModuleGetFunction(void **function, void *module, const char *name) {
  (void)module;
  (void)name;
  *function = &function_token;
  return 0;
}
NULL_HIP_EXPORT int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz,
                                          unsigned shared, void *stream, void **params,
                                          void **extra) {
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz;
  (void)shared; (void)stream; (void)params; (void)extra;
  return 0;
}
NULL_HIP_EXPORT int hipModuleUnload(void *module) { (void)module; return 0; }
NULL_HIP_EXPORT const char *hipGetErrorString(int error) { (void)error; return "null HIP"; }
NULL_HIP_EXPORT int hipDeviceSynchronize(void) { return 0; }
NULL_HIP_EXPORT int hipMalloc(void **pointer, size_t size) {
  *pointer = aligned_alloc(256, (size + 255) / 256 * 256);
  return *pointer ? 0 : 2;
}
NULL_HIP_EXPORT int hipFree(void *pointer) { free(pointer); return 0; }
NULL_HIP_EXPORT int hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  (void)kind;
  memcpy(dst, src, size);
  return 0;
}
NULL_HIP_EXPORT int hipMemsetAsync(void *dst, int value, size_t size, void *stream) {
  (void)dst; (void)value; (void)size; (void)stream;
  return 0;
}
NULL_HIP_EXPORT int hipMemcpy2DAsync(void *dst, size_t dp, const void *src, size_t sp,
                                     size_t w, size_t h, int kind, void *stream) {
  (void)dst; (void)dp; (void)src; (void)sp; (void)w; (void)h; (void)kind; (void)stream;
  return 0;
}
NULL_HIP_EXPORT int hipStreamSynchronize(void *stream) { (void)stream; return 0; }
struct null_ipc_handle { char reserved[64]; };
NULL_HIP_EXPORT int hipIpcGetMemHandle(struct null_ipc_handle *h, void *p) {
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &p, sizeof p);
  return 0;
}
NULL_HIP_EXPORT int hipIpcOpenMemHandle(void **p, struct null_ipc_handle h, unsigned f) {
  (void)f;
  memcpy(p, h.reserved, sizeof *p);
  return 0;
}
NULL_HIP_EXPORT int hipIpcCloseMemHandle(void *p) { (void)p; return 0; }
