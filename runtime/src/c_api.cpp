//===- c_api.cpp - C API over the C++ runtime -------------------*- C++ -*-===//
//
// Every entry point catches everything: no exception crosses the C API.
//
//===----------------------------------------------------------------------===//
#include "moec/moec_runtime.h"

#include "moec/aiter_select.h"
#include "moec/bundle.h"
#include "moec/grid_rule.h"
#include "moec/hip_loader.h"
#include "moec/layer.h"
#include "moec/status.h"
#include "moec/weights.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <sys/stat.h>

using namespace moec::rt;

// Handles share what they use, so releasing them in any order is safe: an
// executable keeps its device and bundle, a layer its executable, alive
// (language bindings cannot always control the order, e.g. at interpreter
// exit).
struct moec_bundle_t {
  std::shared_ptr<Bundle> bundle;
};

struct moec_device_t {
  std::shared_ptr<HipDevice> device;
};

/// A device's loaded kernels of one bundle, with both kept alive.
struct ExecutableState {
  ExecutableState(std::shared_ptr<HipDevice> device,
                  std::shared_ptr<Bundle> bundle)
      : device(std::move(device)), bundle(std::move(bundle)),
        loader(*this->device, *this->bundle) {}
  std::shared_ptr<HipDevice> device;
  std::shared_ptr<Bundle> bundle;
  KernelLoader loader; // declared last: destroyed first
};

struct moec_executable_t {
  std::shared_ptr<ExecutableState> state;
  KernelLoader &loader;
};

/// An instantiated graph of one capture; it keeps its device (and so the
/// HIP library whose functions destroy it) alive.
struct moec_graph_t {
  std::shared_ptr<HipDevice> device;
  hip::Graph graph = nullptr;
  hip::GraphExec exec = nullptr;
  ~moec_graph_t() {
    if (const HipTimingSymbols *t = device->library().timing()) {
      if (exec)
        t->hipGraphExecDestroy(exec);
      if (graph)
        t->hipGraphDestroy(graph);
    }
  }
};

struct moec_layer_t {
  std::shared_ptr<ExecutableState> executable; // outlives `layer`
  std::unique_ptr<Layer> layer;
  /// moec_layer_bind_bias's pointers, added to the next weight binding.
  const void *w13Bias = nullptr, *w2Bias = nullptr;
};

namespace {

thread_local std::string lastError;

moec_status_t fail(moec_status_t status, std::string message) {
  try {
    lastError = std::move(message);
  } catch (...) {
  }
  return status;
}

template <typename Body>
moec_status_t guarded(Body &&body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(MOEC_STATUS_INTERNAL, "out of memory");
  } catch (const std::exception &e) {
    return fail(MOEC_STATUS_INTERNAL, e.what());
  } catch (...) {
    return fail(MOEC_STATUS_INTERNAL, "unexpected error");
  }
}

// The runtime's Status is moec_status_t value for value, so a failure's
// status passes through the C API as a cast.
#define MOEC_SAME_STATUS(name, cName)                                          \
  static_assert(static_cast<int>(Status::name) == cName,                       \
                "moec::rt::Status::" #name " must equal " #cName);
MOEC_SAME_STATUS(Ok, MOEC_STATUS_OK)
MOEC_SAME_STATUS(InvalidArgument, MOEC_STATUS_INVALID_ARGUMENT)
MOEC_SAME_STATUS(NotFound, MOEC_STATUS_NOT_FOUND)
MOEC_SAME_STATUS(IoError, MOEC_STATUS_IO_ERROR)
MOEC_SAME_STATUS(CorruptBundle, MOEC_STATUS_CORRUPT_BUNDLE)
MOEC_SAME_STATUS(SelectionMiss, MOEC_STATUS_SELECTION_MISS)
MOEC_SAME_STATUS(NoHipRuntime, MOEC_STATUS_NO_HIP_RUNTIME)
MOEC_SAME_STATUS(NoDevice, MOEC_STATUS_NO_DEVICE)
MOEC_SAME_STATUS(HipError, MOEC_STATUS_HIP_ERROR)
MOEC_SAME_STATUS(ResourceExceeded, MOEC_STATUS_RESOURCE_EXCEEDED)
MOEC_SAME_STATUS(Internal, MOEC_STATUS_INTERNAL)
MOEC_SAME_STATUS(RowNotCompiled, MOEC_STATUS_ROW_NOT_COMPILED)
#undef MOEC_SAME_STATUS
static_assert(kLastStatus == Status::RowNotCompiled,
              "a new Status needs its moec_status_t and a check above");

/// A runtime failure as the C API reports it. A failure that forgot its
/// status is a runtime bug: INTERNAL, never a success.
moec_status_t fail(Error &&error) {
  const moec_status_t status = error.status == Status::Ok
                                   ? MOEC_STATUS_INTERNAL
                                   : static_cast<moec_status_t>(error.status);
  return fail(status, std::move(error.message));
}

/// A forward's status as the C API's, recording the message on failure.
moec_status_t forwardStatus(Layer::ForwardStatus status, const std::string &error) {
  switch (status) {
  case Layer::ForwardStatus::Ok:
    return MOEC_STATUS_OK;
  case Layer::ForwardStatus::InvalidArgument:
    return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
  case Layer::ForwardStatus::SelectionMiss:
    return fail(MOEC_STATUS_SELECTION_MISS, error);
  case Layer::ForwardStatus::HipError:
    return fail(MOEC_STATUS_HIP_ERROR, error);
  }
  return fail(MOEC_STATUS_INTERNAL, error);
}

} // namespace

extern "C" {

const char *moec_last_error_message(void) { return lastError.c_str(); }

const char *moec_status_name(moec_status_t status) {
  switch (status) {
  case MOEC_STATUS_OK:
    return "MOEC_STATUS_OK";
  case MOEC_STATUS_INVALID_ARGUMENT:
    return "MOEC_STATUS_INVALID_ARGUMENT";
  case MOEC_STATUS_NOT_FOUND:
    return "MOEC_STATUS_NOT_FOUND";
  case MOEC_STATUS_IO_ERROR:
    return "MOEC_STATUS_IO_ERROR";
  case MOEC_STATUS_CORRUPT_BUNDLE:
    return "MOEC_STATUS_CORRUPT_BUNDLE";
  case MOEC_STATUS_SELECTION_MISS:
    return "MOEC_STATUS_SELECTION_MISS";
  case MOEC_STATUS_NO_HIP_RUNTIME:
    return "MOEC_STATUS_NO_HIP_RUNTIME";
  case MOEC_STATUS_NO_DEVICE:
    return "MOEC_STATUS_NO_DEVICE";
  case MOEC_STATUS_HIP_ERROR:
    return "MOEC_STATUS_HIP_ERROR";
  case MOEC_STATUS_RESOURCE_EXCEEDED:
    return "MOEC_STATUS_RESOURCE_EXCEEDED";
  case MOEC_STATUS_INTERNAL:
    return "MOEC_STATUS_INTERNAL";
  case MOEC_STATUS_ROW_NOT_COMPILED:
    return "MOEC_STATUS_ROW_NOT_COMPILED";
  }
  return "MOEC_STATUS_UNKNOWN";
}

moec_status_t moec_bundle_open(const char *path, moec_bundle_t **out_bundle) {
  return moec_bundle_open_with_flags(path, 0, out_bundle);
}

moec_status_t moec_bundle_open_with_flags(const char *path, uint32_t flags,
                                          moec_bundle_t **out_bundle) {
  return guarded([&]() -> moec_status_t {
    if (!path || !out_bundle)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_open: null argument");
    if (flags & ~uint32_t(MOEC_BUNDLE_OPEN_VERIFY_CODE_OBJECTS_ON_FIRST_USE))
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_bundle_open_with_flags: unknown flags " + std::to_string(flags));
    // A path that does not exist keeps the C API's short message; every
    // other failure's status comes from the reader.
    struct stat info;
    if (::stat(path, &info) != 0)
      return fail(MOEC_STATUS_IO_ERROR, std::string(path) + ": cannot open");
    BundleOpenOptions options;
    if (flags & MOEC_BUNDLE_OPEN_VERIFY_CODE_OBJECTS_ON_FIRST_USE)
      options.codeObjects = CodeObjectVerification::OnFirstUse;
    Error error;
    std::unique_ptr<Bundle> bundle = Bundle::open(path, error, options);
    if (!bundle)
      return fail(std::move(error));
    *out_bundle = new moec_bundle_t{std::move(bundle)};
    return MOEC_STATUS_OK;
  });
}

void moec_bundle_close(moec_bundle_t *bundle) { delete bundle; }

moec_status_t moec_bundle_apply_overrides(moec_bundle_t *bundle,
                                          const char *override_path,
                                          uint32_t *out_rows_changed) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !override_path)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_bundle_apply_overrides: null argument");
    OverrideReport report;
    Error error;
    if (!bundle->bundle->applySelectionOverridesFile(override_path, report, error))
      return fail(std::move(error));
    if (out_rows_changed)
      *out_rows_changed = report.replaced + report.added;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_target_arch(const moec_bundle_t *bundle,
                                      const char **out_arch) {
  if (!bundle || !out_arch)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_target_arch: null argument");
  *out_arch = bundle->bundle->manifest().target.arch.c_str();
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_target_compute_units(const moec_bundle_t *bundle,
                                               uint32_t *out_compute_units) {
  if (!bundle || !out_compute_units)
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "moec_bundle_target_compute_units: null argument");
  // parseManifest refuses a bundle whose part moec does not know.
  *out_compute_units =
      moec::rt::partOf(bundle->bundle->manifest().target)->computeUnits;
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_kernel_count(const moec_bundle_t *bundle,
                                       uint32_t *out_count) {
  if (!bundle || !out_count)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_kernel_count: null argument");
  *out_count = static_cast<uint32_t>(bundle->bundle->manifest().kernels.size());
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_kernel_info(const moec_bundle_t *bundle,
                                      uint32_t kernel_index,
                                      moec_kernel_info_t *out_info) {
  if (!bundle || !out_info)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_kernel_info: null argument");
  const auto &kernels = bundle->bundle->manifest().kernels;
  if (kernel_index >= kernels.size())
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "kernel " + std::to_string(kernel_index) + " out of range (" +
                    std::to_string(kernels.size()) + " kernels)");
  const KernelInfo &kernel = kernels[kernel_index];
  moec_kernel_info_t info;
  info.name = kernel.name.c_str();
  info.symbol = kernel.symbol.c_str();
  info.stage = stageName(kernel.stage);
  info.content_hash = kernel.contentHash.c_str();
  info.code_object = kernel.codeObject;
  for (int d = 0; d < 3; ++d)
    info.workgroup_size[d] = kernel.launch.workgroupSize[d];
  info.arg_count = static_cast<uint32_t>(kernel.abi.size());
  const KernelResources &r = kernel.resources;
  info.resources = {r.vgpr,      r.agpr,      r.sgpr,          r.ldsBytes,
                    r.privateSegmentBytes, r.vgprSpill, r.sgprSpill,
                    r.wavefrontSize, r.maxFlatWorkgroupSize};
  *out_info = info;
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_find_kernel(const moec_bundle_t *bundle, const char *name,
                                      uint32_t *out_kernel_index) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !name || !out_kernel_index)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_find_kernel: null argument");
    int64_t index = bundle->bundle->findKernel(name);
    if (index < 0)
      return fail(MOEC_STATUS_NOT_FOUND, std::string("no kernel named '") + name + "'");
    *out_kernel_index = static_cast<uint32_t>(index);
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_kernel_arg(const moec_bundle_t *bundle,
                                     uint32_t kernel_index, uint32_t arg_index,
                                     const char **out_name,
                                     moec_arg_kind_t *out_kind) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !out_name || !out_kind)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_kernel_arg: null argument");
    const auto &kernels = bundle->bundle->manifest().kernels;
    if (kernel_index >= kernels.size() || arg_index >= kernels[kernel_index].abi.size())
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "kernel " + std::to_string(kernel_index) + " argument " +
                      std::to_string(arg_index) + " out of range");
    const KernelArgInfo &arg = kernels[kernel_index].abi[arg_index];
    *out_name = arg.name.c_str();
    *out_kind = static_cast<moec_arg_kind_t>(arg.kind);
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_config_count(const moec_bundle_t *bundle,
                                       uint32_t *out_count) {
  if (!bundle || !out_count)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_config_count: null argument");
  *out_count = static_cast<uint32_t>(bundle->bundle->manifest().configs.size());
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_config_info(const moec_bundle_t *bundle,
                                      uint32_t config_index,
                                      moec_config_info_t *out_info) {
  if (!bundle || !out_info)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_config_info: null argument");
  const auto &configs = bundle->bundle->manifest().configs;
  if (config_index >= configs.size())
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "configuration " + std::to_string(config_index) + " out of range");
  const ConfigInfo &config = configs[config_index];
  out_info->id = config.id.c_str();
  out_info->provenance = provenanceName(config.provenance);
  out_info->kernel_count = static_cast<uint32_t>(config.kernels.size());
  out_info->kernels = config.kernels.data();
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_code_object(const moec_bundle_t *bundle,
                                      uint32_t code_object_index,
                                      const void **out_data, size_t *out_size) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !out_data || !out_size)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_code_object: null argument");
    if (code_object_index >= bundle->bundle->codeObjectCount())
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "code object " + std::to_string(code_object_index) + " out of range");
    CodeObjectView view;
    Error error;
    if (!bundle->bundle->codeObject(code_object_index, view, error))
      return fail(std::move(error));
    *out_data = view.data;
    *out_size = view.size;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_kernel_grid(const moec_bundle_t *bundle, uint32_t kernel_index,
                                      const moec_rule_variable_t *variables,
                                      uint32_t variable_count, uint32_t out_grid[3]) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !out_grid || (variable_count > 0 && !variables))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_kernel_grid: null argument");
    const auto &kernels = bundle->bundle->manifest().kernels;
    if (kernel_index >= kernels.size())
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "kernel " + std::to_string(kernel_index) + " out of range (" +
                      std::to_string(kernels.size()) + " kernels)");
    // Engines pass a handful of names: keep them on the stack so a grid
    // costs no heap allocation; more than that is allowed, just not free.
    constexpr uint32_t kStackVariables = 32;
    RuleVariable onStack[kStackVariables];
    std::vector<RuleVariable> onHeap;
    RuleVariable *values = onStack;
    if (variable_count > kStackVariables) {
      onHeap.resize(variable_count);
      values = onHeap.data();
    }
    for (uint32_t i = 0; i < variable_count; ++i) {
      if (!variables[i].name)
        return fail(MOEC_STATUS_INVALID_ARGUMENT,
                    "moec_bundle_kernel_grid: variable " + std::to_string(i) + " has no name");
      values[i].name = variables[i].name;
      values[i].value = variables[i].value;
    }
    std::array<uint32_t, 3> grid;
    std::string error;
    if (!computeLaunchGrid(kernels[kernel_index], values, variable_count, grid, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    for (int d = 0; d < 3; ++d)
      out_grid[d] = grid[d];
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_resolve_table(const moec_bundle_t *bundle,
                                        const char *network, uint32_t ep,
                                        uint32_t workspace, moec_table_t *out_table) {
  return guarded([&]() -> moec_status_t {
    if (!bundle || !network || !out_table)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_bundle_resolve_table: null argument");
    TableHandle handle;
    std::string error;
    if (!bundle->bundle->selector().resolveTable(network, ep, workspace, handle, error))
      return fail(MOEC_STATUS_NOT_FOUND, bundle->bundle->path() + ": " + error);
    out_table->index = handle.index;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_bundle_select(const moec_bundle_t *bundle, moec_table_t table,
                                 uint32_t m, moec_selection_t *out_selection) {
  if (!bundle || !out_selection)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_select: null argument");
  const Selector &selector = bundle->bundle->selector();
  if (table.index >= selector.tables().size())
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_bundle_select: invalid table handle");
  const Selection selection = selector.select(TableHandle{table.index}, m);
  if (selection.status == SelectStatus::Miss) {
    const SelectionTable &t = selector.tables()[table.index];
    return guarded([&]() -> moec_status_t {
      return fail(MOEC_STATUS_SELECTION_MISS, describeSelectionMiss(t, m));
    });
  }
  const ConfigInfo &config = bundle->bundle->manifest().configs[selection.config];
  out_selection->config = selection.config;
  out_selection->row = selection.row;
  out_selection->row_m = selection.rowM;
  out_selection->exact = selection.exact ? 1 : 0;
  out_selection->fallback = selection.status == SelectStatus::Fallback ? 1 : 0;
  out_selection->kernel_count = static_cast<uint32_t>(config.kernels.size());
  out_selection->kernels = config.kernels.data();
  return MOEC_STATUS_OK;
}

moec_status_t moec_bundle_select_aiter(const moec_bundle_t *bundle, uint64_t m,
                                       const moec_aiter_column_t *key,
                                       uint32_t key_count,
                                       moec_aiter_selection_t *out_selection) {
  if (!bundle || !out_selection || (!key && key_count))
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "moec_bundle_select_aiter: null argument");
  AiterKeyColumns columns;
  for (uint32_t i = 0; i < key_count; ++i) {
    if (!key[i].column || !key[i].value)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_bundle_select_aiter: key entry " + std::to_string(i) +
                      " has a null column or value");
    const auto error = columns.set(key[i].column, key[i].value);
    if (error != AiterKeyColumns::Error::None)
      return guarded([&]() -> moec_status_t {
        return fail(MOEC_STATUS_INVALID_ARGUMENT,
                    std::string("moec_bundle_select_aiter: key column ") +
                        key[i].column + "=" + key[i].value + ": " +
                        AiterKeyColumns::errorText(error));
      });
  }
  if (columns.firstMissing() != SIZE_MAX)
    return guarded([&]() -> moec_status_t {
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_bundle_select_aiter: the key needs " +
                      columns.missingColumns() +
                      " (the key is explicit: nothing is defaulted)");
    });
  const Manifest &manifest = bundle->bundle->manifest();
  if (manifest.aiterRows.empty())
    return guarded([&]() -> moec_status_t {
      return fail(MOEC_STATUS_NOT_FOUND,
                  bundle->bundle->path() +
                      ": holds no AITER rows (compiled from a moec tuning table)");
    });
  const AiterSelection selection = selectAiter(manifest.aiterRows, columns.key(), m);
  if (selection.status != AiterStatus::Hit)
    return guarded([&]() -> moec_status_t {
      return fail(selection.status == AiterStatus::Miss
                      ? MOEC_STATUS_SELECTION_MISS
                      : MOEC_STATUS_ROW_NOT_COMPILED,
                  bundle->bundle->path() + ": " +
                      describeAiterRefusal(manifest, columns.key(), selection, m));
    });
  const AiterRowInfo &row = manifest.aiterRows[selection.row];
  const ConfigInfo &config = manifest.configs[row.config];
  out_selection->kernel_name1 = row.kernelName1.c_str();
  out_selection->kernel_name2 = row.kernelName2.c_str();
  out_selection->block_m = row.blockM;
  out_selection->ksplit = row.ksplit;
  out_selection->source_row = row.line;
  out_selection->file = manifest.sources[row.source].path.c_str();
  out_selection->rule = aiterRuleName(selection.rule);
  out_selection->token = selection.token;
  out_selection->row_token = row.token;
  out_selection->row = selection.row;
  out_selection->config = row.config;
  out_selection->kernel_count = static_cast<uint32_t>(config.kernels.size());
  out_selection->kernels = config.kernels.data();
  return MOEC_STATUS_OK;
}

moec_status_t moec_device_create(const char *hip_library, int ordinal,
                                 moec_device_t **out_device) {
  return guarded([&]() -> moec_status_t {
    if (!out_device)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_create: null argument");
    std::vector<std::string> candidates =
        hip_library ? std::vector<std::string>{hip_library}
                    : defaultHipLibraryCandidates();
    Error error;
    std::unique_ptr<HipLibrary> library = HipLibrary::load(candidates, error);
    if (!library)
      return fail(std::move(error));
    std::unique_ptr<HipDevice> device =
        HipDevice::create(std::move(library), ordinal, error);
    if (!device)
      return fail(std::move(error));
    *out_device = new moec_device_t{std::move(device)};
    return MOEC_STATUS_OK;
  });
}

void moec_device_release(moec_device_t *device) { delete device; }

moec_status_t moec_device_compute_units(const moec_device_t *device,
                                        uint32_t *out_count) {
  if (!device || !out_count)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_compute_units: null argument");
  *out_count = static_cast<uint32_t>(device->device->computeUnits());
  return MOEC_STATUS_OK;
}

moec_status_t moec_executable_create(moec_device_t *device, const moec_bundle_t *bundle,
                                     moec_executable_t **out_executable) {
  return guarded([&]() -> moec_status_t {
    if (!device || !bundle || !out_executable)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_executable_create: null argument");
    auto state = std::make_shared<ExecutableState>(device->device, bundle->bundle);
    KernelLoader &loader = state->loader;
    *out_executable = new moec_executable_t{std::move(state), loader};
    return MOEC_STATUS_OK;
  });
}

void moec_executable_release(moec_executable_t *executable) { delete executable; }

namespace {

moec_status_t loadChecked(moec_executable_t *executable, uint32_t kernel_index,
                          const Bundle &bundle) {
  const auto &kernels = bundle.manifest().kernels;
  if (kernel_index >= kernels.size())
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "kernel " + std::to_string(kernel_index) + " out of range (" +
                    std::to_string(kernels.size()) + " kernels)");
  // loadKernel checks the kernel's resources before its first load
  // (RESOURCE_EXCEEDED) and its code object's checksum (CORRUPT_BUNDLE).
  Error error;
  if (!executable->loader.loadKernel(kernel_index, error))
    return fail(std::move(error));
  return MOEC_STATUS_OK;
}

} // namespace

moec_status_t moec_executable_load_kernel(moec_executable_t *executable,
                                          uint32_t kernel_index) {
  return guarded([&]() -> moec_status_t {
    if (!executable)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_executable_load_kernel: null argument");
    return loadChecked(executable, kernel_index, executable->loader.bundle());
  });
}

moec_status_t moec_executable_launch(moec_executable_t *executable,
                                     uint32_t kernel_index, const uint32_t grid[3],
                                     const moec_kernel_arg_t *args,
                                     uint32_t arg_count, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!executable || !grid || (arg_count > 0 && !args))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_executable_launch: null argument");
    const Bundle &bundle = executable->loader.bundle();
    moec_status_t status = loadChecked(executable, kernel_index, bundle);
    if (status != MOEC_STATUS_OK)
      return status;
    const KernelInfo &kernel = bundle.manifest().kernels[kernel_index];
    std::vector<KernelArgValue> values(arg_count);
    for (uint32_t i = 0; i < arg_count; ++i) {
      switch (args[i].kind) {
      case MOEC_ARG_BUFFER:
        values[i] = KernelArgValue::buffer(args[i].value.buffer);
        break;
      case MOEC_ARG_I32:
        values[i] = KernelArgValue::int32(args[i].value.i32);
        break;
      case MOEC_ARG_I64:
        values[i] = KernelArgValue::int64(args[i].value.i64);
        break;
      default:
        return fail(MOEC_STATUS_INVALID_ARGUMENT,
                    kernel.name + ": argument " + std::to_string(i) + " has an unknown kind");
      }
    }
    // launch packs the arguments too (INVALID_ARGUMENT when they do not
    // match the ABI), and refuses an empty grid (INVALID_ARGUMENT).
    Error error;
    if (!executable->loader.launch(kernel_index, {grid[0], grid[1], grid[2]},
                                   values.data(), values.size(), stream, error))
      return fail(std::move(error));
    return MOEC_STATUS_OK;
  });
}

} // extern "C"

namespace {

/// A HIP call of a device helper: the status, or the failure with `what`.
moec_status_t hipResult(const moec_device_t *device, hip::Error status,
                        const char *what) {
  if (status == hip::kSuccess)
    return MOEC_STATUS_OK;
  return fail(MOEC_STATUS_HIP_ERROR,
              std::string(what) + " failed: " +
                  device->device->library().describe(status));
}

} // namespace

extern "C" {

moec_status_t moec_device_alloc(moec_device_t *device, size_t bytes,
                                void **out_pointer) {
  return guarded([&]() -> moec_status_t {
    if (!device || !out_pointer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_alloc: null argument");
    std::string error;
    if (!device->device->makeCurrent(error))
      return fail(MOEC_STATUS_HIP_ERROR, error);
    void *pointer = nullptr;
    moec_status_t status = hipResult(
        device, device->device->hipApi().hipMalloc(&pointer, bytes ? bytes : 1),
        "hipMalloc");
    if (status == MOEC_STATUS_OK)
      *out_pointer = pointer;
    return status;
  });
}

moec_status_t moec_device_free(moec_device_t *device, void *pointer) {
  return guarded([&]() -> moec_status_t {
    if (!device)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_free: null device");
    if (!pointer)
      return MOEC_STATUS_OK;
    return hipResult(device, device->device->hipApi().hipFree(pointer), "hipFree");
  });
}

moec_status_t moec_device_copy_to_device(moec_device_t *device, void *device_dst,
                                         const void *host_src, size_t bytes) {
  return guarded([&]() -> moec_status_t {
    if (!device || (bytes && (!device_dst || !host_src)))
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_device_copy_to_device: null argument");
    if (!bytes)
      return MOEC_STATUS_OK;
    return hipResult(device,
                     device->device->hipApi().hipMemcpy(device_dst, host_src, bytes,
                                                        hip::kMemcpyHostToDevice),
                     "hipMemcpy (host to device)");
  });
}

moec_status_t moec_device_copy_to_host(moec_device_t *device, void *host_dst,
                                       const void *device_src, size_t bytes) {
  return guarded([&]() -> moec_status_t {
    if (!device || (bytes && (!host_dst || !device_src)))
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_device_copy_to_host: null argument");
    if (!bytes)
      return MOEC_STATUS_OK;
    return hipResult(device,
                     device->device->hipApi().hipMemcpy(host_dst, device_src, bytes,
                                                        hip::kMemcpyDeviceToHost),
                     "hipMemcpy (device to host)");
  });
}

moec_status_t moec_device_fill(moec_device_t *device, void *device_dst, int value,
                               size_t bytes, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!device || (bytes && !device_dst))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_fill: null argument");
    if (!bytes)
      return MOEC_STATUS_OK;
    return hipResult(device,
                     device->device->hipApi().hipMemsetAsync(device_dst, value,
                                                             bytes, stream),
                     "hipMemsetAsync");
  });
}

moec_status_t moec_device_make_current(moec_device_t *device) {
  return guarded([&]() -> moec_status_t {
    if (!device)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_make_current: null device");
    std::string error;
    if (!device->device->makeCurrent(error))
      return fail(MOEC_STATUS_HIP_ERROR, error);
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_device_synchronize(moec_device_t *device, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!device)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_synchronize: null device");
    return hipResult(device, device->device->hipApi().hipStreamSynchronize(stream),
                     "hipStreamSynchronize");
  });
}

moec_status_t moec_device_ipc_handle(moec_device_t *device, void *pointer,
                                     moec_ipc_handle_t *out_handle) {
  return guarded([&]() -> moec_status_t {
    if (!device || !pointer || !out_handle)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_ipc_handle: null argument");
    hip::IpcMemHandle handle;
    moec_status_t status = hipResult(
        device, device->device->hipApi().hipIpcGetMemHandle(&handle, pointer),
        "hipIpcGetMemHandle");
    if (status == MOEC_STATUS_OK) {
      static_assert(sizeof(handle.reserved) == sizeof(out_handle->bytes), "");
      std::memcpy(out_handle->bytes, handle.reserved, sizeof(handle.reserved));
    }
    return status;
  });
}

moec_status_t moec_device_ipc_open(moec_device_t *device,
                                   const moec_ipc_handle_t *handle,
                                   void **out_pointer) {
  return guarded([&]() -> moec_status_t {
    if (!device || !handle || !out_pointer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_ipc_open: null argument");
    hip::IpcMemHandle raw;
    std::memcpy(raw.reserved, handle->bytes, sizeof(raw.reserved));
    void *pointer = nullptr;
    // hipIpcMemLazyEnablePeerAccess (1), as HIP's own users pass it.
    moec_status_t status = hipResult(
        device, device->device->hipApi().hipIpcOpenMemHandle(&pointer, raw, 1u),
        "hipIpcOpenMemHandle");
    if (status == MOEC_STATUS_OK)
      *out_pointer = pointer;
    return status;
  });
}

moec_status_t moec_device_ipc_close(moec_device_t *device, void *pointer) {
  return guarded([&]() -> moec_status_t {
    if (!device || !pointer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_ipc_close: null argument");
    return hipResult(device, device->device->hipApi().hipIpcCloseMemHandle(pointer),
                     "hipIpcCloseMemHandle");
  });
}

} // extern "C"

namespace {

/// The stream and graph entry points of the device's HIP library, or null
/// with the failure recorded (MOEC_STATUS_NO_HIP_RUNTIME naming what the
/// library lacks).
const HipTimingSymbols *streamApi(const moec_device_t *device, const char *what,
                                  moec_status_t &status) {
  const HipTimingSymbols *api = device->device->library().timing();
  if (!api)
    status = fail(MOEC_STATUS_NO_HIP_RUNTIME,
                  std::string(what) + ": no stream capture in this HIP library (" +
                      device->device->library().timingError() + ")");
  return api;
}

} // namespace

extern "C" {

moec_status_t moec_device_stream_create(moec_device_t *device, void **out_stream) {
  return guarded([&]() -> moec_status_t {
    if (!device || !out_stream)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_stream_create: null argument");
    moec_status_t status = MOEC_STATUS_OK;
    const HipTimingSymbols *api = streamApi(device, "moec_device_stream_create", status);
    if (!api)
      return status;
    std::string error;
    if (!device->device->makeCurrent(error))
      return fail(MOEC_STATUS_HIP_ERROR, error);
    hip::Stream stream = nullptr;
    status = hipResult(device, api->hipStreamCreate(&stream), "hipStreamCreate");
    if (status == MOEC_STATUS_OK)
      *out_stream = stream;
    return status;
  });
}

moec_status_t moec_device_stream_destroy(moec_device_t *device, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!device || !stream)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_stream_destroy: null argument");
    moec_status_t status = MOEC_STATUS_OK;
    const HipTimingSymbols *api = streamApi(device, "moec_device_stream_destroy", status);
    if (!api)
      return status;
    return hipResult(device, api->hipStreamDestroy(stream), "hipStreamDestroy");
  });
}

moec_status_t moec_device_begin_capture(moec_device_t *device, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!device)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_begin_capture: null device");
    if (!stream)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_device_begin_capture: the null stream cannot be captured "
                  "(moec_device_stream_create makes a stream)");
    moec_status_t status = MOEC_STATUS_OK;
    const HipTimingSymbols *api = streamApi(device, "moec_device_begin_capture", status);
    if (!api)
      return status;
    std::string error;
    if (!device->device->makeCurrent(error))
      return fail(MOEC_STATUS_HIP_ERROR, error);
    return hipResult(device,
                     api->hipStreamBeginCapture(stream, hip::kStreamCaptureModeGlobal),
                     "hipStreamBeginCapture");
  });
}

moec_status_t moec_device_end_capture(moec_device_t *device, void *stream,
                                      moec_graph_t **out_graph) {
  return guarded([&]() -> moec_status_t {
    if (!device || !stream || !out_graph)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_device_end_capture: null argument");
    moec_status_t status = MOEC_STATUS_OK;
    const HipTimingSymbols *api = streamApi(device, "moec_device_end_capture", status);
    if (!api)
      return status;
    auto graph = std::make_unique<moec_graph_t>();
    graph->device = device->device;
    status = hipResult(device, api->hipStreamEndCapture(stream, &graph->graph),
                       "hipStreamEndCapture");
    if (status != MOEC_STATUS_OK)
      return status;
    if (!graph->graph)
      return fail(MOEC_STATUS_HIP_ERROR, "hipStreamEndCapture returned no graph");
    char log[256] = {};
    hip::GraphNode errorNode = nullptr;
    status = hipResult(device,
                       api->hipGraphInstantiate(&graph->exec, graph->graph, &errorNode,
                                                log, sizeof(log)),
                       "hipGraphInstantiate");
    if (status != MOEC_STATUS_OK) {
      if (log[0])
        lastError += std::string(": ") + log;
      return status;
    }
    *out_graph = graph.release();
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_graph_launch(moec_graph_t *graph, void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!graph)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_graph_launch: null graph");
    const HipTimingSymbols *api = graph->device->library().timing();
    std::string error;
    if (!graph->device->makeCurrent(error))
      return fail(MOEC_STATUS_HIP_ERROR, error);
    hip::Error result = api->hipGraphLaunch(graph->exec, stream);
    if (result == hip::kSuccess)
      return MOEC_STATUS_OK;
    return fail(MOEC_STATUS_HIP_ERROR,
                "hipGraphLaunch failed: " + graph->device->library().describe(result));
  });
}

void moec_graph_release(moec_graph_t *graph) { delete graph; }

moec_status_t moec_layer_create(moec_executable_t *executable, moec_table_t table,
                                const moec_layer_problem_t *problem,
                                moec_layer_t **out_layer) {
  return guarded([&]() -> moec_status_t {
    if (!executable || !problem || !out_layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_create: null argument");
    LayerProblem p;
    p.hidden = problem->hidden;
    p.intermediate = problem->intermediate;
    p.experts = problem->experts;
    p.topK = problem->top_k;
    p.epRank = problem->ep_rank;
    p.epSize = problem->ep_size;
    p.maxTokens = problem->max_tokens;
    Error error;
    std::unique_ptr<Layer> layer =
        Layer::create(executable->loader, TableHandle{table.index}, p, error);
    if (!layer)
      return fail(std::move(error));
    *out_layer = new moec_layer_t{executable->state, std::move(layer)};
    return MOEC_STATUS_OK;
  });
}

void moec_layer_release(moec_layer_t *layer) { delete layer; }

moec_status_t moec_layer_memory(const moec_layer_t *layer,
                                moec_layer_memory_t *out_memory) {
  if (!layer || !out_memory)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_memory: null argument");
  const LayerMemory &memory = layer->layer->memory();
  moec_layer_memory_t result{};
  result.workspace_bytes = memory.workspaceBytes;
  result.peer_bytes = memory.peerBytes;
  result.peer_recv_a_offset = memory.peer.recvA;
  result.peer_recv_scale_offset = memory.peer.recvScale;
  result.peer_recv_meta_offset = memory.peer.recvMeta;
  result.peer_control_offset = memory.peer.control;
  result.peer_control_bytes = memory.peer.controlBytes;
  result.peer_combine_rows_offset = memory.peer.combineRows;
  result.max_tokens = memory.maxTokens;
  result.fused = layer->layer->fused() ? 1 : 0;
  result.shared_expert = layer->layer->sharedExpert() ? 1 : 0;
  *out_memory = result;
  return MOEC_STATUS_OK;
}

moec_status_t moec_layer_bind_workspace(moec_layer_t *layer, void *workspace,
                                        size_t bytes) {
  return guarded([&]() -> moec_status_t {
    if (!layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_bind_workspace: null layer");
    Error error;
    if (!layer->layer->bindWorkspace(workspace, bytes, error))
      return fail(std::move(error));
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_layer_bind_peers(moec_layer_t *layer, void *const *peer_buffers,
                                    uint32_t count) {
  return guarded([&]() -> moec_status_t {
    if (!layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_bind_peers: null layer");
    std::string error;
    if (!layer->layer->bindPeers(peer_buffers, count, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_layer_bind_weights(moec_layer_t *layer,
                                      const moec_layer_weights_t *weights) {
  return guarded([&]() -> moec_status_t {
    if (!layer || !weights)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_bind_weights: null argument");
    LayerWeights w;
    w.w13 = weights->w13;
    w.w13Scale = weights->w13_scale;
    w.w2 = weights->w2;
    w.w2Scale = weights->w2_scale;
    w.sharedW13 = weights->shared_w13;
    w.sharedW13Scale = weights->shared_w13_scale;
    w.sharedW2 = weights->shared_w2;
    w.sharedW2Scale = weights->shared_w2_scale;
    w.w13Bias = layer->w13Bias;
    w.w2Bias = layer->w2Bias;
    std::string error;
    if (!layer->layer->bindWeights(w, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_layer_bind_bias(moec_layer_t *layer, const void *w13_bias,
                                   const void *w2_bias) {
  return guarded([&]() -> moec_status_t {
    if (!layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_bind_bias: null layer");
    layer->w13Bias = w13_bias;
    layer->w2Bias = w2_bias;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_layer_forward(moec_layer_t *layer, uint32_t m, const void *hidden,
                                 const int32_t *topk_ids, const float *topk_weights,
                                 void *out, void *stream) {
  // The hot path: no allocation unless it fails (the message).
  return guarded([&]() -> moec_status_t {
    if (!layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_forward: null layer");
    LayerInputs inputs;
    inputs.m = m;
    inputs.hidden = hidden;
    inputs.topkIds = topk_ids;
    inputs.topkWeights = topk_weights;
    inputs.out = out;
    thread_local std::string error;
    return forwardStatus(layer->layer->forward(inputs, stream, error), error);
  });
}

moec_status_t moec_layer_forward_experts(moec_layer_t *layer,
                                         const moec_expert_rows_t *rows,
                                         void *stream) {
  return guarded([&]() -> moec_status_t {
    if (!layer || !rows)
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_layer_forward_experts: null layer or rows");
    ExpertRows expertRows;
    expertRows.rows = rows->rows;
    expertRows.hidden = rows->hidden;
    expertRows.localIds = rows->local_ids;
    expertRows.weights = rows->weights;
    expertRows.expertCounts = rows->expert_counts;
    expertRows.out = rows->out;
    thread_local std::string error;
    return forwardStatus(layer->layer->forwardExperts(expertRows, stream, error),
                         error);
  });
}

moec_status_t moec_layer_last_forward(const moec_layer_t *layer, uint32_t *out_config,
                                      uint32_t *out_launches) {
  if (!layer || !out_config || !out_launches)
    return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_last_forward: null argument");
  *out_config = layer->layer->lastForward().config;
  *out_launches = layer->layer->lastForward().launches;
  return MOEC_STATUS_OK;
}

moec_status_t moec_layer_read_status(moec_layer_t *layer,
                                     moec_layer_status_t *out_status) {
  return guarded([&]() -> moec_status_t {
    if (!layer || !out_status)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_read_status: null argument");
    LayerStatus status;
    Error error;
    if (!layer->layer->readStatus(status, error))
      return fail(std::move(error));
    out_status->overflow_routes = status.overflowRoutes;
    out_status->forwards = status.forwards;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_layer_clear_status(moec_layer_t *layer) {
  return guarded([&]() -> moec_status_t {
    if (!layer)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_clear_status: null layer");
    Error error;
    if (!layer->layer->clearStatus(error))
      return fail(std::move(error));
    return MOEC_STATUS_OK;
  });
}

} // extern "C"

//===----------------------------------------------------------------------===//
// Weight preparation
//===----------------------------------------------------------------------===//

namespace {

/// A C tensor as a TensorRef; false (with a message naming it) when its
/// rank is above 4. A null tensor is an empty TensorRef.
bool toTensorRef(const moec_tensor_t *tensor, const char *name, TensorRef &out,
                 std::string &error) {
  out = TensorRef{};
  if (!tensor)
    return true;
  if (tensor->ndim > 4) {
    error = std::string(name) + ": " + std::to_string(tensor->ndim) +
            " dimensions, at most 4";
    return false;
  }
  out.data = tensor->data;
  out.ndim = tensor->ndim;
  for (uint32_t i = 0; i < tensor->ndim; ++i)
    out.shape[i] = tensor->shape[i];
  out.dtype = tensor->dtype ? std::string_view(tensor->dtype) : std::string_view();
  return true;
}

WeightLayout toWeightLayout(const moec_weight_layout_t &layout) {
  WeightLayout result;
  result.hidden = layout.hidden;
  result.intermediate = layout.intermediate;
  result.experts = layout.experts;
  result.gateUpInterleave = layout.gate_up_interleave;
  result.sharedExpert = layout.shared_expert != 0;
  return result;
}

moec_status_t prepareExperts(const char *function,
                             const moec_weight_layout_t *layout,
                             WeightSource source, const moec_tensor_t *w13,
                             const moec_tensor_t *w13_scale,
                             const moec_tensor_t *up, const moec_tensor_t *up_scale,
                             const moec_tensor_t *w2,
                             const moec_tensor_t *w2_scale, void *out_w13,
                             void *out_w13_scale, void *out_w2,
                             void *out_w2_scale, uint32_t threads) {
  return guarded([&]() -> moec_status_t {
    if (!layout || !w13 || !w13_scale || !w2 || !w2_scale)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, std::string(function) + ": null argument");
    std::string error;
    ExpertWeightInputs inputs;
    if (!toTensorRef(w13, "w13", inputs.w13, error) ||
        !toTensorRef(w13_scale, "w13_scale", inputs.w13Scale, error) ||
        !toTensorRef(up, "up", inputs.up, error) ||
        !toTensorRef(up_scale, "up_scale", inputs.upScale, error) ||
        !toTensorRef(w2, "w2", inputs.w2, error) ||
        !toTensorRef(w2_scale, "w2_scale", inputs.w2Scale, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    PreparedWeights out{out_w13, out_w13_scale, out_w2, out_w2_scale};
    if (!prepareExpertWeights(toWeightLayout(*layout), source, inputs, out,
                              threads, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    return MOEC_STATUS_OK;
  });
}

} // namespace

extern "C" {

moec_status_t moec_layer_weight_layout(const moec_layer_t *layer,
                                       moec_weight_layout_t *out_layout) {
  return guarded([&]() -> moec_status_t {
    if (!layer || !out_layout)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_layer_weight_layout: null argument");
    const Layer &l = *layer->layer;
    const LayerProblem &problem = l.problem();
    moec_weight_layout_t result{};
    result.hidden = problem.hidden;
    result.intermediate = problem.intermediate;
    result.experts = problem.experts / std::max<uint32_t>(1, problem.epSize);
    result.gate_up_interleave = l.gateUpInterleave();
    result.shared_expert = l.sharedExpert() ? 1 : 0;
    *out_layout = result;
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_weight_sizes(const moec_weight_layout_t *layout,
                                moec_weight_sizes_t *out_sizes) {
  return guarded([&]() -> moec_status_t {
    if (!layout || !out_sizes)
      return fail(MOEC_STATUS_INVALID_ARGUMENT, "moec_weight_sizes: null argument");
    const WeightLayout l = toWeightLayout(*layout);
    std::string error;
    if (!checkWeightLayout(l, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    const WeightSizes sizes = weightSizes(l);
    *out_sizes = moec_weight_sizes_t{sizes.w13,       sizes.w13Scale,
                                     sizes.w2,        sizes.w2Scale,
                                     sizes.sharedW13, sizes.sharedW13Scale,
                                     sizes.sharedW2,  sizes.sharedW2Scale};
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_prepare_expert_weights(
    const moec_weight_layout_t *layout, moec_weight_source_t source,
    const moec_tensor_t *w13, const moec_tensor_t *w13_scale,
    const moec_tensor_t *w2, const moec_tensor_t *w2_scale, void *out_w13,
    void *out_w13_scale, void *out_w2, void *out_w2_scale, uint32_t threads) {
  WeightSource kind;
  switch (source) {
  case MOEC_WEIGHT_SOURCE_CHECKPOINT:
    kind = WeightSource::Checkpoint;
    break;
  case MOEC_WEIGHT_SOURCE_AITER:
    kind = WeightSource::Aiter;
    break;
  case MOEC_WEIGHT_SOURCE_AITER_A16W4:
    kind = WeightSource::AiterA16W4;
    break;
  case MOEC_WEIGHT_SOURCE_AITER_PRESHUFFLE_16X16:
    kind = WeightSource::AiterPreshuffle16x16;
    break;
  default:
    return guarded([&]() -> moec_status_t {
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_prepare_expert_weights: unknown weight source " +
                      std::to_string(int(source)));
    });
  }
  return prepareExperts("moec_prepare_expert_weights", layout, kind, w13,
                        w13_scale, nullptr, nullptr, w2, w2_scale, out_w13,
                        out_w13_scale, out_w2, out_w2_scale, threads);
}

moec_status_t moec_prepare_expert_weights_gate_up(
    const moec_weight_layout_t *layout, const moec_tensor_t *gate,
    const moec_tensor_t *gate_scale, const moec_tensor_t *up,
    const moec_tensor_t *up_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads) {
  if (!up || !up_scale)
    return fail(MOEC_STATUS_INVALID_ARGUMENT,
                "moec_prepare_expert_weights_gate_up: null argument");
  return prepareExperts("moec_prepare_expert_weights_gate_up", layout,
                        WeightSource::Checkpoint, gate, gate_scale, up, up_scale,
                        w2, w2_scale, out_w13, out_w13_scale, out_w2,
                        out_w2_scale, threads);
}

moec_status_t moec_prepare_shared_expert_ex(
    const moec_weight_layout_t *layout, const moec_tensor_t *w13,
    const moec_tensor_t *w13_scale, const moec_tensor_t *up,
    const moec_tensor_t *up_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads,
    moec_conversion_report_t *out_report) {
  return guarded([&]() -> moec_status_t {
    if (!layout || !w13 || !w13_scale || !w2 || !w2_scale || (!up != !up_scale))
      return fail(MOEC_STATUS_INVALID_ARGUMENT,
                  "moec_prepare_shared_expert: null argument");
    std::string error;
    SharedExpertInputs inputs;
    if (!toTensorRef(w13, "shared_w13", inputs.w13, error) ||
        !toTensorRef(w13_scale, "shared_w13_scale", inputs.w13Scale, error) ||
        !toTensorRef(up, "shared_up", inputs.up, error) ||
        !toTensorRef(up_scale, "shared_up_scale", inputs.upScale, error) ||
        !toTensorRef(w2, "shared_w2", inputs.w2, error) ||
        !toTensorRef(w2_scale, "shared_w2_scale", inputs.w2Scale, error))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    PreparedWeights out{out_w13, out_w13_scale, out_w2, out_w2_scale};
    ConversionReport report;
    if (!prepareSharedExpert(toWeightLayout(*layout), inputs, out, threads,
                             error, &report))
      return fail(MOEC_STATUS_INVALID_ARGUMENT, error);
    if (out_report)
      *out_report = moec_conversion_report_t{
          report.convertedElements, report.inexactElements,
          report.nonPowerOfTwoBlockScales, report.maxRelativeError};
    return MOEC_STATUS_OK;
  });
}

moec_status_t moec_prepare_shared_expert(
    const moec_weight_layout_t *layout, const moec_tensor_t *w13,
    const moec_tensor_t *w13_scale, const moec_tensor_t *w2,
    const moec_tensor_t *w2_scale, void *out_w13, void *out_w13_scale,
    void *out_w2, void *out_w2_scale, uint32_t threads) {
  return moec_prepare_shared_expert_ex(layout, w13, w13_scale, nullptr, nullptr,
                                       w2, w2_scale, out_w13, out_w13_scale,
                                       out_w2, out_w2_scale, threads, nullptr);
}

} // extern "C"
