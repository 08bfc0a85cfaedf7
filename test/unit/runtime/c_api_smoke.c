/* Compiled as C99 with -pedantic -Werror: proves moec_runtime.h is valid C
 * and that libmoec_runtime.so links on its own. Exercises the failure paths
 * that need no bundle and no GPU. */
#include "moec/moec_runtime.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);      \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  moec_bundle_t *bundle = NULL;
  moec_device_t *device = NULL;
  moec_table_t table;
  moec_selection_t selection;
  moec_kernel_info_t info;
  moec_kernel_arg_t arg;
  moec_status_t status;

  status = moec_bundle_open("/nonexistent/bundle.moeb", &bundle);
  EXPECT(status == MOEC_STATUS_IO_ERROR);
  EXPECT(bundle == NULL);
  EXPECT(strstr(moec_last_error_message(), "/nonexistent/bundle.moeb") != NULL);
  EXPECT(strcmp(moec_status_name(status), "MOEC_STATUS_IO_ERROR") == 0);

  status = moec_device_create("/nonexistent/libamdhip64.so", 0, &device);
  EXPECT(status == MOEC_STATUS_NO_HIP_RUNTIME);
  EXPECT(device == NULL);
  EXPECT(strncmp(moec_last_error_message(), "no HIP runtime", 14) == 0);

  table.index = 0;
  EXPECT(moec_bundle_select(NULL, table, 1, &selection) == MOEC_STATUS_INVALID_ARGUMENT);
  EXPECT(moec_bundle_kernel_info(NULL, 0, &info) == MOEC_STATUS_INVALID_ARGUMENT);
  arg.kind = MOEC_ARG_I32;
  arg.value.i32 = 1;
  EXPECT(arg.value.i32 == 1);
  moec_bundle_close(NULL);
  moec_device_release(NULL);
  moec_executable_release(NULL);

  if (failures == 0)
    printf("moec C API smoke test: ok\n");
  return failures == 0 ? 0 : 1;
}
