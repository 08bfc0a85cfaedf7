/*===- emulated_hip.h - the emulated HIP device's own entry points -*- C -*-===*
 *
 * libmoec_emulated_hip.so exports the HIP entry points the moec runtime uses
 * (runtime/include/moec/hip_loader.h, MOEC_HIP_SYMBOLS) plus the memory,
 * stream, event and IPC calls tests need; its kernel launches run on the CPU
 * emulator over the kernel IR stored next to each code object in a bundle.
 * These are the entry points a real HIP library does not have; callers look
 * them up with dlsym and work unchanged without them. See docs/emulator.md,
 * "The emulated HIP device".
 *
 *===----------------------------------------------------------------------===*/
#ifndef MOEC_EMULATED_HIP_H
#define MOEC_EMULATED_HIP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Registers the kernel IR (MLIR bytecode or text of a module holding the
 *  kernel's gpu.module) that `codeObject` was compiled from. The device keys
 *  it by the XXH64 of the code object's ELF image (the bytes its headers
 *  span, which is how hipModuleLoadData, given no size, finds it again).
 *  Returns 0 (hipSuccess), or hipErrorInvalidValue / hipErrorInvalidImage
 *  with the reason in moecEmulatedLastError(). The moec runtime calls it
 *  (when the library exports it) before loading a kernel whose bundle
 *  stores IR. */
int moecEmulatedRegisterKernelIr(const void *codeObject, size_t size,
                                 const void *ir, size_t irSize);

/** The message of the last failed call on this thread ("" if none): which
 *  argument, which finding, why a code object was refused. */
const char *moecEmulatedLastError(void);

/** Launch mode: 0 runs every launch when it is made (the launch returns the
 *  result); 1 queues launches per stream and runs them at the next
 *  synchronising call, all devices' pending launches together. Default:
 *  $MOEC_EMULATED_DEFER_LAUNCHES, else 1 when $MOEC_EMULATED_DEVICES > 1.
 *  Pending launches are run first. Returns the status of that run. */
int moecEmulatedSetDeferredLaunches(int deferred);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MOEC_EMULATED_HIP_H */
