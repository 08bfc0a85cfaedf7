//===- manifest.cpp - manifest schema v1 parsing and validation -*- C++ -*-===//
#include "moec/manifest.h"

#include "grid_check.h"
#include "json_fields.h"
#include "moec/selection.h"
#include "moec/target/target_info.h"

#include <algorithm>
#include <cctype>

#include <unordered_set>
#include <tuple>

namespace moec::rt {

using detail::expectArray;
using detail::expectObject;
using detail::fieldPath;
using detail::findField;
using detail::indexPath;
using detail::knownFieldsOnly;
using detail::Json;
using detail::readString;
using detail::readU32;

const char *kernelFamilyName(KernelFamily family) noexcept {
  switch (family) {
  case KernelFamily::MegaMoe:
    return "megamoe";
  case KernelFamily::Tp:
    return "tp";
  case KernelFamily::FhMoe:
    return "fhmoe";
  }
  return "?";
}

const char *transportName(Transport transport) noexcept {
  switch (transport) {
  case Transport::FixedSlot:
    return "fixed-slot";
  case Transport::Compact:
    return "compact";
  case Transport::None:
    return "none";
  }
  return "?";
}

const char *aboveMaxPolicyName(AboveMaxPolicy policy) noexcept {
  return policy == AboveMaxPolicy::Largest ? "largest" : "error";
}

const char *provenanceName(Provenance provenance) noexcept {
  return provenance == Provenance::Measured ? "measured" : "model-ranked";
}

namespace {

/// The largest workgroup any chip moec knows runs: the bound of a
/// manifest's workgroup sizes, whatever its target.
uint32_t maxWorkgroupSize() {
  uint32_t largest = 0;
  for (const target::TargetInfo *chip : target::kKnownTargets)
    largest = std::max(largest, chip->maxWorkgroupSize);
  return largest;
}

/// An optional object field: absent -> nullptr and true; wrong type -> false.
bool optionalObject(const Json &parent, std::string_view key,
                    const std::string &where, const Json *&out,
                    std::string &error) {
  out = findField(parent, key);
  if (!out)
    return true;
  return expectObject(*out, fieldPath(where, key), error);
}

bool parseTarget(const Json &root, Manifest &m, std::string &error) {
  const Json *target = findField(root, "target");
  if (!target) {
    error = "target: missing";
    return false;
  }
  if (!expectObject(*target, "target", error) ||
      !knownFieldsOnly(*target, "target",
                       {"arch", "features", "code_object_version",
                        "compute_units"},
                       error))
    return false;
  if (!readString(*target, "arch", "target", true, m.target.arch, error) ||
      !readString(*target, "features", "target", false, m.target.features,
                  error) ||
      !readU32(*target, "code_object_version", "target", false,
               m.target.codeObjectVersion, error) ||
      !readU32(*target, "compute_units", "target", false,
               m.target.computeUnits, error))
    return false;
  // The code objects are checked against the chip's facts (ELF mach,
  // register files, LDS): a chip without facts cannot be checked.
  if (!target::lookupPart(m.target.arch, 0)) {
    std::string known;
    for (const target::TargetInfo *chip : target::kKnownTargets)
      if (target::lookupPart(chip->arch, 0) == chip)
        known += std::string(known.empty() ? "" : ", ") + chip->arch;
    error = "target.arch: '" + m.target.arch + "' is not a chip moec knows (" +
            known + ")";
    return false;
  }
  if (!partOf(m.target)) {
    error = "target.compute_units: " + std::to_string(m.target.computeUnits) +
            " is not a part of " + m.target.arch + " moec knows (" +
            target::partComputeUnits(m.target.arch) + " CUs)";
    return false;
  }
  return true;
}

bool parseCompiler(const Json &root, Manifest &m, std::string &error) {
  const Json *compiler = nullptr;
  if (!optionalObject(root, "compiler", "", compiler, error))
    return false;
  if (!compiler)
    return true;
  const std::string where = "compiler";
  if (!knownFieldsOnly(*compiler, where,
                       {"name", "version", "llvm", "fingerprint"}, error))
    return false;
  return readString(*compiler, "name", where, false, m.compiler.name, error) &&
         readString(*compiler, "version", where, false, m.compiler.version, error) &&
         readString(*compiler, "llvm", where, false, m.compiler.llvm, error) &&
         readString(*compiler, "fingerprint", where, false, m.compiler.fingerprint,
                    error);
}

bool parseNumerics(const Json &root, Manifest &m, std::string &error) {
  const Json *numerics = nullptr;
  if (!optionalObject(root, "numerics", "", numerics, error))
    return false;
  if (!numerics)
    return true;
  for (auto it = numerics->begin(); it != numerics->end(); ++it)
    m.numerics.emplace_back(it.key(), it.value().is_string()
                                          ? it.value().get<std::string>()
                                          : it.value().dump());
  return true;
}

bool parseSources(const Json &root, Manifest &m, std::string &error) {
  const Json *sources = findField(root, "sources");
  if (!sources)
    return true;
  if (!expectArray(*sources, "sources", error))
    return false;
  for (size_t i = 0; i < sources->size(); ++i) {
    const std::string where = indexPath("sources", i);
    const Json &entry = (*sources)[i];
    SourceFile source;
    if (!expectObject(entry, where, error) ||
        !knownFieldsOnly(entry, where, {"path", "hash"}, error) ||
        !readString(entry, "path", where, true, source.path, error) ||
        !readString(entry, "hash", where, false, source.hash, error))
      return false;
    m.sources.push_back(std::move(source));
  }
  return true;
}

bool parseArgument(const Json &entry, const std::string &where,
                   KernelArgInfo &arg, std::string &error) {
  std::string kind, access;
  if (!expectObject(entry, where, error) ||
      !knownFieldsOnly(entry, where,
                       {"name", "kind", "dtype", "access", "shape"}, error) ||
      !readString(entry, "name", where, true, arg.name, error) ||
      !readString(entry, "kind", where, true, kind, error) ||
      !readString(entry, "dtype", where, false, arg.dtype, error) ||
      !readString(entry, "access", where, false, access, error) ||
      !readString(entry, "shape", where, false, arg.shape, error))
    return false;
  if (kind == "buffer")
    arg.kind = ArgKind::Buffer;
  else if (kind == "i32")
    arg.kind = ArgKind::I32;
  else if (kind == "i64")
    arg.kind = ArgKind::I64;
  else {
    error = fieldPath(where, "kind") + ": unknown argument kind '" + kind +
            "' (expected buffer, i32 or i64)";
    return false;
  }
  if (access.empty() || access == "none")
    arg.access = ArgAccess::None;
  else if (access == "read")
    arg.access = ArgAccess::Read;
  else if (access == "write")
    arg.access = ArgAccess::Write;
  else if (access == "readwrite")
    arg.access = ArgAccess::ReadWrite;
  else {
    error = fieldPath(where, "access") + ": unknown access '" + access +
            "' (expected read, write or readwrite)";
    return false;
  }
  return true;
}

bool parseLaunch(const Json &kernel, const std::string &kernelPath,
                 LaunchInfo &launch, std::string &error) {
  const std::string where = fieldPath(kernelPath, "launch");
  const Json *launchJson = findField(kernel, "launch");
  if (!launchJson) {
    error = where + ": missing";
    return false;
  }
  if (!expectObject(*launchJson, where, error) ||
      !knownFieldsOnly(*launchJson, where, {"workgroup_size", "grid"}, error))
    return false;
  const std::string sizePath = fieldPath(where, "workgroup_size");
  const Json *size = findField(*launchJson, "workgroup_size");
  if (!size) {
    error = sizePath + ": missing";
    return false;
  }
  if (!size->is_array() || size->size() != 3) {
    error = sizePath + ": expected an array of 3 unsigned integers";
    return false;
  }
  uint64_t total = 1;
  for (size_t d = 0; d < 3; ++d) {
    const Json &dim = (*size)[d];
    if (!dim.is_number_integer() || dim.get<int64_t>() < 1 ||
        dim.get<int64_t>() > int64_t(maxWorkgroupSize())) {
      error = indexPath(sizePath, d) + ": expected an integer in [1, " +
              std::to_string(maxWorkgroupSize()) + "]";
      return false;
    }
    launch.workgroupSize[d] = static_cast<uint32_t>(dim.get<int64_t>());
    total *= launch.workgroupSize[d];
  }
  if (total > maxWorkgroupSize()) {
    error = sizePath + ": " + std::to_string(total) +
            " threads per workgroup (max " +
            std::to_string(maxWorkgroupSize()) + ")";
    return false;
  }
  const Json *grid = nullptr;
  if (!optionalObject(*launchJson, "grid", where, grid, error))
    return false;
  if (grid) {
    // Each rule present is compiled now, so a bad one makes the bundle
    // invalid at open and computeLaunchGrid never parses text.
    const std::string gridPath = fieldPath(where, "grid");
    if (!knownFieldsOnly(*grid, gridPath, {"x", "y", "z"}, error))
      return false;
    std::string *texts[3] = {&launch.gridX, &launch.gridY, &launch.gridZ};
    const char *axes[3] = {"x", "y", "z"};
    for (int d = 0; d < 3; ++d) {
      if (!readString(*grid, axes[d], gridPath, false, *texts[d], error))
        return false;
      std::string problem;
      if (findField(*grid, axes[d]) &&
          !launch.gridPrograms[d].compile(*texts[d], problem)) {
        error = fieldPath(gridPath, axes[d]) + ": " + problem;
        return false;
      }
    }
  }
  return true;
}

bool parseResources(const Json &kernel, const std::string &kernelPath,
                    KernelResources &r, std::string &error) {
  const std::string where = fieldPath(kernelPath, "resources");
  const Json *resources = findField(kernel, "resources");
  if (!resources) {
    error = where + ": missing";
    return false;
  }
  if (!expectObject(*resources, where, error) ||
      !knownFieldsOnly(*resources, where,
                       {"vgpr", "agpr", "sgpr", "lds_bytes",
                        "private_segment_bytes", "vgpr_spill", "sgpr_spill",
                        "wavefront_size", "max_flat_workgroup_size"},
                       error))
    return false;
  return readU32(*resources, "vgpr", where, true, r.vgpr, error) &&
         readU32(*resources, "agpr", where, false, r.agpr, error) &&
         readU32(*resources, "sgpr", where, true, r.sgpr, error) &&
         readU32(*resources, "lds_bytes", where, true, r.ldsBytes, error) &&
         readU32(*resources, "private_segment_bytes", where, false,
                 r.privateSegmentBytes, error) &&
         readU32(*resources, "vgpr_spill", where, false, r.vgprSpill, error) &&
         readU32(*resources, "sgpr_spill", where, false, r.sgprSpill, error) &&
         readU32(*resources, "wavefront_size", where, false, r.wavefrontSize,
                 error) &&
         readU32(*resources, "max_flat_workgroup_size", where, false,
                 r.maxFlatWorkgroupSize, error);
}

/// Kernel names become file names (`moec extract`) and symbols are looked
/// up in code objects: both keep to a plain identifier alphabet, so no name
/// can reach outside a directory, hide a suffix behind a NUL or be empty.
bool isIdentifier(const std::string &text, bool allowDot) {
  if (text.empty() || text.size() > 255 ||
      std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')
    return false;
  for (char c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        !(allowDot && c == '.'))
      return false;
  return true;
}

/// Every resource number within what the bundle's chip has (or, for a chip
/// moec has no facts for, what any chip it knows has): a kernel beyond them
/// cannot exist, and arithmetic on such numbers (alignments, divisions)
/// must never see them.
bool checkResources(const KernelResources &r, const std::string &arch,
                    const std::string &kernelPath, std::string &error) {
  const target::TargetInfo *chip = target::lookupTargetInfo(arch);
  uint32_t registers = 0, sgprs = 0, lds = 0;
  bool waveSizeKnown = false;
  for (const target::TargetInfo *known : target::kKnownTargets)
    if (!chip || known == chip) {
      registers = std::max(registers, known->totalVgprs);
      sgprs = std::max(sgprs, known->addressableSgprs + known->extraSgprs);
      lds = std::max(lds, known->ldsBytesPerCu);
      waveSizeKnown |= r.wavefrontSize == known->wavefrontSize;
    }
  const std::string where = fieldPath(kernelPath, "resources");
  auto bad = [&](const char *field, uint32_t value, const std::string &rule) {
    error = fieldPath(where, field) + ": " + std::to_string(value) + " " + rule;
    return false;
  };
  if (r.vgpr > registers)
    return bad("vgpr", r.vgpr, "exceeds the " + std::to_string(registers) +
                                   " registers of a lane");
  if (r.agpr > r.vgpr)
    return bad("agpr", r.agpr, "exceeds vgpr, the unified count it is part of");
  if (r.sgpr > sgprs)
    return bad("sgpr", r.sgpr, "exceeds the " + std::to_string(sgprs) +
                                   " SGPRs a kernel can use");
  if (r.ldsBytes > lds)
    return bad("lds_bytes", r.ldsBytes,
               "exceeds the " + std::to_string(lds) + " bytes of LDS");
  if (!waveSizeKnown)
    return bad("wavefront_size", r.wavefrontSize, "is not the chip's wave size");
  if (r.maxFlatWorkgroupSize > maxWorkgroupSize())
    return bad("max_flat_workgroup_size", r.maxFlatWorkgroupSize,
               "exceeds " + std::to_string(maxWorkgroupSize()));
  return true;
}

/// The kernel's "stage": required, one of the stages a layer runs.
bool readStage(const Json &kernel, const std::string &kernelPath, Stage &stage,
               std::string &error) {
  std::string text;
  if (!readString(kernel, "stage", kernelPath, true, text, error))
    return false;
  if (std::optional<Stage> parsed = abi::parseStage(text)) {
    stage = *parsed;
    return true;
  }
  error = fieldPath(kernelPath, "stage") + ": unknown stage '" + text +
          "' (expected quant, sort, w13, w2 or combine)";
  return false;
}

/// A launch of more lanes than the code object was compiled for cannot run
/// (the hardware refuses it, or worse, the kernel's barriers and LDS
/// layout assume fewer waves), so such a manifest contradicts itself and
/// is refused at open rather than at launch. The code object's
/// max_flat_workgroup_size bounds the launch's workgroup size; an absent
/// field reads as 0 and so bounds every launch.
bool checkLaunchFitsResources(const LaunchInfo &launch,
                              const KernelResources &r,
                              const std::string &kernelPath,
                              std::string &error) {
  const uint64_t lanes = uint64_t(launch.workgroupSize[0]) *
                         launch.workgroupSize[1] * launch.workgroupSize[2];
  if (lanes <= r.maxFlatWorkgroupSize)
    return true;
  error = fieldPath(fieldPath(kernelPath, "resources"),
                    "max_flat_workgroup_size") +
          ": " + std::to_string(r.maxFlatWorkgroupSize) +
          " but launch.workgroup_size asks for " + std::to_string(lanes) +
          " lanes per workgroup";
  return false;
}

bool parseKernels(const Json &root, uint32_t codeObjectCount, Manifest &m,
                  std::string &error) {
  const Json *kernels = findField(root, "kernels");
  if (!kernels) {
    error = "kernels: missing";
    return false;
  }
  if (!expectArray(*kernels, "kernels", error))
    return false;
  std::unordered_set<std::string> names;
  m.kernels.reserve(kernels->size());
  for (size_t i = 0; i < kernels->size(); ++i) {
    const std::string where = indexPath("kernels", i);
    const Json &entry = (*kernels)[i];
    KernelInfo kernel;
    if (!expectObject(entry, where, error) ||
        !knownFieldsOnly(entry, where,
                         {"name", "symbol", "code_object", "stage",
                          "attributes", "abi", "launch", "resources",
                          "content_hash", "table_names", "ir",
                          "weight_layout", "isa_repairs"},
                         error) ||
        !readString(entry, "name", where, true, kernel.name, error) ||
        !readString(entry, "symbol", where, true, kernel.symbol, error) ||
        !readU32(entry, "code_object", where, true, kernel.codeObject, error) ||
        !readStage(entry, where, kernel.stage, error) ||
        !readString(entry, "content_hash", where, false, kernel.contentHash, error) ||
        !readString(entry, "weight_layout", where, false, kernel.weightLayout,
                    error))
      return false;
    if (!isIdentifier(kernel.name, /*allowDot=*/false)) {
      error = fieldPath(where, "name") +
              ": expected 1 to 255 of [A-Za-z0-9_], not starting with a digit";
      return false;
    }
    if (!isIdentifier(kernel.symbol, /*allowDot=*/true)) {
      error = fieldPath(where, "symbol") +
              ": expected 1 to 255 of [A-Za-z0-9_.], not starting with a digit "
              "or '.'";
      return false;
    }
    if (!names.insert(kernel.name).second) {
      error = fieldPath(where, "name") + ": duplicate kernel name '" + kernel.name + "'";
      return false;
    }
    if (kernel.codeObject >= codeObjectCount) {
      error = fieldPath(where, "code_object") + ": index " +
              std::to_string(kernel.codeObject) + " but the bundle has " +
              std::to_string(codeObjectCount) + " code objects";
      return false;
    }
    const Json *attributes = nullptr;
    if (!optionalObject(entry, "attributes", where, attributes, error))
      return false;
    if (attributes)
      for (auto it = attributes->begin(); it != attributes->end(); ++it) {
        std::string text;
        if (!readString(*attributes, it.key(), fieldPath(where, "attributes"),
                        true, text, error))
          return false;
        kernel.attributes.emplace_back(it.key(), std::move(text));
      }
    if (const Json *names = findField(entry, "table_names")) {
      const std::string namesPath = fieldPath(where, "table_names");
      if (!expectArray(*names, namesPath, error))
        return false;
      for (size_t n = 0; n < names->size(); ++n) {
        if (!(*names)[n].is_string()) {
          error = indexPath(namesPath, n) + ": expected a string";
          return false;
        }
        kernel.tableNames.push_back((*names)[n].get<std::string>());
      }
    }
    if (const Json *repairs = findField(entry, "isa_repairs")) {
      const std::string repairsPath = fieldPath(where, "isa_repairs");
      if (!expectArray(*repairs, repairsPath, error))
        return false;
      for (size_t r = 0; r < repairs->size(); ++r) {
        const std::string at = indexPath(repairsPath, r);
        IsaRepairInfo repair;
        if (!expectObject((*repairs)[r], at, error) ||
            !knownFieldsOnly((*repairs)[r], at,
                             {"address", "wait_states", "rule"}, error) ||
            !readU32((*repairs)[r], "address", at, true, repair.address, error) ||
            !readU32((*repairs)[r], "wait_states", at, true, repair.waitStates,
                     error) ||
            !readString((*repairs)[r], "rule", at, true, repair.rule, error))
          return false;
        kernel.isaRepairs.push_back(std::move(repair));
      }
    }
    const Json *ir = nullptr;
    if (!optionalObject(entry, "ir", where, ir, error))
      return false;
    if (ir) {
      const std::string irPath = fieldPath(where, "ir");
      if (!knownFieldsOnly(*ir, irPath, {"object", "hash"}, error))
        return false;
      if (!readU32(*ir, "object", irPath, true, kernel.ir.object, error) ||
          !readString(*ir, "hash", irPath, true, kernel.ir.hash, error))
        return false;
      if (kernel.ir.object >= codeObjectCount) {
        error = fieldPath(irPath, "object") + ": index " +
                std::to_string(kernel.ir.object) + " but the bundle has " +
                std::to_string(codeObjectCount) + " code objects";
        return false;
      }
    }
    if (const Json *abi = findField(entry, "abi")) {
      const std::string abiPath = fieldPath(where, "abi");
      if (!expectArray(*abi, abiPath, error))
        return false;
      for (size_t a = 0; a < abi->size(); ++a) {
        KernelArgInfo arg;
        if (!parseArgument((*abi)[a], indexPath(abiPath, a), arg, error))
          return false;
        kernel.abi.push_back(std::move(arg));
      }
    }
    // A manifest without wavefront_size means the wave size of its part.
    kernel.resources.wavefrontSize = partOf(m.target)->wavefrontSize;
    if (!parseLaunch(entry, where, kernel.launch, error) ||
        !parseResources(entry, where, kernel.resources, error) ||
        !checkResources(kernel.resources, m.target.arch, where, error) ||
        !checkLaunchFitsResources(kernel.launch, kernel.resources, where,
                                  error))
      return false;
    m.kernels.push_back(std::move(kernel));
  }
  return true;
}

bool parseConfigs(const Json &root, Manifest &m, std::string &error) {
  const Json *configs = findField(root, "configs");
  if (!configs) {
    error = "configs: missing";
    return false;
  }
  if (!expectArray(*configs, "configs", error))
    return false;
  std::unordered_set<std::string> ids;
  for (size_t i = 0; i < configs->size(); ++i) {
    const std::string where = indexPath("configs", i);
    const Json &entry = (*configs)[i];
    ConfigInfo config;
    std::string provenance;
    if (!expectObject(entry, where, error) ||
        !knownFieldsOnly(entry, where, {"id", "kernels", "provenance"}, error) ||
        !readString(entry, "id", where, true, config.id, error) ||
        !readString(entry, "provenance", where, false, provenance, error))
      return false;
    if (!ids.insert(config.id).second) {
      error = fieldPath(where, "id") + ": duplicate configuration id '" + config.id + "'";
      return false;
    }
    if (provenance.empty() || provenance == "measured")
      config.provenance = Provenance::Measured;
    else if (provenance == "model-ranked")
      config.provenance = Provenance::ModelRanked;
    else {
      error = fieldPath(where, "provenance") + ": unknown provenance '" +
              provenance + "' (expected measured or model-ranked)";
      return false;
    }
    const std::string kernelsPath = fieldPath(where, "kernels");
    const Json *kernels = findField(entry, "kernels");
    if (!kernels) {
      error = kernelsPath + ": missing";
      return false;
    }
    if (!expectArray(*kernels, kernelsPath, error))
      return false;
    if (kernels->empty()) {
      error = kernelsPath + ": a configuration needs at least one kernel";
      return false;
    }
    for (size_t k = 0; k < kernels->size(); ++k) {
      const Json &index = (*kernels)[k];
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          static_cast<uint64_t>(index.get<int64_t>()) >= m.kernels.size()) {
        error = indexPath(kernelsPath, k) + ": expected a kernel index below " +
                std::to_string(m.kernels.size());
        return false;
      }
      config.kernels.push_back(static_cast<uint32_t>(index.get<int64_t>()));
    }
    m.configs.push_back(std::move(config));
  }
  return true;
}

/// A time in microseconds: a finite number >= 0.
bool readMicroseconds(const Json &object, const char *key,
                      const std::string &where, double &out,
                      std::string &error) {
  const Json *value = findField(object, key);
  if (!value || !value->is_number() || !(value->get<double>() >= 0) ||
      value->get<double>() > 1e12) {
    error = fieldPath(where, key) + ": expected a time in microseconds >= 0";
    return false;
  }
  out = value->get<double>();
  return true;
}

/// A row's provenance fields: none, or "model-ranked" with model and
/// predicted_us, or "measured" with device, method, date and measured_us
/// (and optionally the model's prediction). Nothing unmeasured is labelled
/// measured: measured_us and its fields only come with "measured".
bool parseRowProvenance(const Json &row, const std::string &where,
                        RowProvenance &out, std::string &error) {
  std::string kind;
  if (!readString(row, "provenance", where, false, kind, error))
    return false;
  auto has = [&](const char *key) { return findField(row, key) != nullptr; };
  if (kind.empty()) {
    for (const char *key : {"model", "predicted_us", "device", "method", "date",
                            "measured_us"})
      if (has(key)) {
        error = fieldPath(where, key) + ": needs a provenance";
        return false;
      }
    return true;
  }
  out.present = true;
  if (kind == "model-ranked") {
    out.kind = Provenance::ModelRanked;
    for (const char *key : {"device", "method", "date", "measured_us"})
      if (has(key)) {
        error = fieldPath(where, key) + ": only a measured row has it";
        return false;
      }
    return readString(row, "model", where, true, out.model, error) &&
           readMicroseconds(row, "predicted_us", where, out.predictedUs, error);
  }
  if (kind != "measured") {
    error = fieldPath(where, "provenance") + ": unknown provenance '" + kind +
            "' (expected measured or model-ranked)";
    return false;
  }
  out.kind = Provenance::Measured;
  if (!readString(row, "device", where, true, out.device, error) ||
      !readString(row, "method", where, true, out.method, error) ||
      !readString(row, "date", where, true, out.date, error) ||
      !readMicroseconds(row, "measured_us", where, out.measuredUs, error))
    return false;
  if (has("model") != has("predicted_us")) {
    error = where + ": model and predicted_us come together";
    return false;
  }
  return !has("model") ||
         (readString(row, "model", where, true, out.model, error) &&
          readMicroseconds(row, "predicted_us", where, out.predictedUs, error));
}

bool parseSelection(const Json &root, Manifest &m, std::string &error) {
  const Json *selection = findField(root, "selection");
  if (!selection) {
    error = "selection: missing";
    return false;
  }
  if (!expectArray(*selection, "selection", error))
    return false;
  for (size_t i = 0; i < selection->size(); ++i) {
    SelectionTable table;
    detail::TableFieldsPresent present;
    const std::string where = indexPath("selection", i);
    const Json &entry = (*selection)[i];
    if (!knownFieldsOnly(entry, where,
                         {"network", "family", "ep", "workspace", "transport",
                          "above_max", "max_tokens", "rows"},
                         error))
      return false;
    if (const Json *rows = findField(entry, "rows"); rows && rows->is_array())
      for (size_t r = 0; r < rows->size(); ++r)
        if (!knownFieldsOnly((*rows)[r], indexPath(fieldPath(where, "rows"), r),
                             {"m", "config", "provenance", "model",
                              "predicted_us", "device", "method", "date",
                              "measured_us"},
                             error))
          return false;
    if (!detail::parseSelectionTableJson((*selection)[i], indexPath("selection", i),
                                         m.configs, /*partial=*/false, table,
                                         present, error) ||
        !readU32(entry, "max_tokens", where, false, table.maxTokens, error))
      return false;
    const Json &rows = *findField(entry, "rows");
    for (size_t r = 0; r < table.rows.size(); ++r)
      if (!parseRowProvenance(rows[r],
                              indexPath(fieldPath(where, "rows"), r),
                              table.rows[r].provenance, error))
        return false;
    m.selection.push_back(std::move(table));
  }
  return validateSelectionTables(m.selection, m.configs.size(), error);
}

Json serializeKernel(const KernelInfo &kernel) {
  Json attributes = Json::object();
  for (const auto &[name, text] : kernel.attributes)
    attributes[name] = text;
  Json abi = Json::array();
  for (const KernelArgInfo &arg : kernel.abi)
    abi.push_back({{"name", arg.name},
                   {"kind", argKindName(arg.kind)},
                   {"dtype", arg.dtype},
                   {"access", argAccessName(arg.access)},
                   {"shape", arg.shape}});
  const KernelResources &r = kernel.resources;
  const LaunchInfo &launch = kernel.launch;
  Json out = {
      {"name", kernel.name},
      {"symbol", kernel.symbol},
      {"code_object", kernel.codeObject},
      {"stage", stageName(kernel.stage)},
      {"attributes", attributes},
      {"abi", abi},
      {"launch",
       {{"workgroup_size",
         {launch.workgroupSize[0], launch.workgroupSize[1],
          launch.workgroupSize[2]}}}},
      {"resources",
       {{"vgpr", r.vgpr},
        {"agpr", r.agpr},
        {"sgpr", r.sgpr},
        {"lds_bytes", r.ldsBytes},
        {"private_segment_bytes", r.privateSegmentBytes},
        {"vgpr_spill", r.vgprSpill},
        {"sgpr_spill", r.sgprSpill},
        {"wavefront_size", r.wavefrontSize},
        {"max_flat_workgroup_size", r.maxFlatWorkgroupSize}}},
      {"content_hash", kernel.contentHash},
      {"table_names", kernel.tableNames},
  };
  // Only the grid rules present: an empty rule is invalid, and the reader
  // compiles every rule it is given.
  Json grid = Json::object();
  const std::string *rules[3] = {&launch.gridX, &launch.gridY, &launch.gridZ};
  const char *axes[3] = {"x", "y", "z"};
  for (int d = 0; d < 3; ++d)
    if (!rules[d]->empty())
      grid[axes[d]] = *rules[d];
  if (!grid.empty())
    out["launch"]["grid"] = grid;
  if (kernel.ir.present())
    out["ir"] = {{"object", kernel.ir.object}, {"hash", kernel.ir.hash}};
  if (!kernel.isaRepairs.empty()) {
    Json repairs = Json::array();
    for (const IsaRepairInfo &r : kernel.isaRepairs)
      repairs.push_back({{"address", r.address},
                         {"wait_states", r.waitStates},
                         {"rule", r.rule}});
    out["isa_repairs"] = repairs;
  }
  if (!kernel.weightLayout.empty())
    out["weight_layout"] = kernel.weightLayout;
  return out;
}

bool parseAiterRows(const Json &root, Manifest &m, std::string &error) {
  const Json *rows = findField(root, "aiter_rows");
  if (!rows)
    return true;
  if (!expectArray(*rows, "aiter_rows", error))
    return false;
  for (size_t i = 0; i < rows->size(); ++i) {
    const std::string where = indexPath("aiter_rows", i);
    const Json &entry = (*rows)[i];
    AiterRowInfo row;
    if (!expectObject(entry, where, error) ||
        !knownFieldsOnly(
            entry, where,
            {"gfx", "cu_num", "token", "model_dim", "inter_dim", "expert",
             "topk", "act_type", "dtype", "q_dtype_a", "q_dtype_w", "q_type",
             "use_g1u1", "doweight_stage1", "fhmoe", "shared_expert_id",
             "hidden_pad", "intermediate_pad", "gate_mode", "kernelName1",
             "kernelName2", "block_m", "ksplit", "source", "line", "config",
             "skipped", "notes", "substituted_from"},
            error) ||
        !readString(entry, "gfx", where, true, row.gfx, error) ||
        !readU32(entry, "cu_num", where, true, row.cuNum, error) ||
        !readU32(entry, "token", where, true, row.token, error) ||
        !readU32(entry, "model_dim", where, true, row.modelDim, error) ||
        !readU32(entry, "inter_dim", where, true, row.interDim, error) ||
        !readU32(entry, "expert", where, true, row.expert, error) ||
        !readU32(entry, "topk", where, true, row.topk, error) ||
        !readString(entry, "act_type", where, true, row.actType, error) ||
        !readString(entry, "dtype", where, true, row.dtype, error) ||
        !readString(entry, "q_dtype_a", where, true, row.qDtypeA, error) ||
        !readString(entry, "q_dtype_w", where, true, row.qDtypeW, error) ||
        !readString(entry, "q_type", where, true, row.qType, error) ||
        !readU32(entry, "use_g1u1", where, true, row.useG1u1, error) ||
        !readU32(entry, "doweight_stage1", where, true, row.doweightStage1,
                 error) ||
        !readString(entry, "kernelName1", where, true, row.kernelName1, error) ||
        !readString(entry, "kernelName2", where, true, row.kernelName2, error) ||
        !readU32(entry, "block_m", where, true, row.blockM, error) ||
        !readU32(entry, "ksplit", where, true, row.ksplit, error) ||
        !readU32(entry, "source", where, true, row.source, error) ||
        !readU32(entry, "line", where, true, row.line, error))
      return false;
    const Json *fhmoe = findField(entry, "fhmoe");
    if (!fhmoe || !fhmoe->is_boolean()) {
      error = fieldPath(where, "fhmoe") + ": expected true or false";
      return false;
    }
    row.fhmoe = fhmoe->get<bool>();
    if (row.fhmoe) {
      if (!readU32(entry, "shared_expert_id", where, true, row.sharedExpertId,
                   error) ||
          !readU32(entry, "hidden_pad", where, true, row.hiddenPad, error) ||
          !readU32(entry, "intermediate_pad", where, true, row.intermediatePad,
                   error) ||
          !readString(entry, "gate_mode", where, true, row.gateMode, error))
        return false;
    } else {
      for (const char *key :
           {"shared_expert_id", "hidden_pad", "intermediate_pad", "gate_mode"})
        if (findField(entry, key)) {
          error = fieldPath(where, key) + ": only an FHMoE row has it";
          return false;
        }
    }
    const bool hasConfig = findField(entry, "config") != nullptr;
    if (hasConfig && !readU32(entry, "config", where, true, row.config, error))
      return false;
    if (!readString(entry, "skipped", where, false, row.skipped, error))
      return false;
    if (hasConfig == !row.skipped.empty()) {
      error = where + ": needs exactly one of config and skipped";
      return false;
    }
    if (hasConfig && row.config >= m.configs.size()) {
      error = fieldPath(where, "config") + ": configuration " +
              std::to_string(row.config) + " but the bundle has " +
              std::to_string(m.configs.size());
      return false;
    }
    if (row.source >= m.sources.size()) {
      error = fieldPath(where, "source") + ": source " +
              std::to_string(row.source) + " but the bundle has " +
              std::to_string(m.sources.size());
      return false;
    }
    if (const Json *notes = findField(entry, "notes")) {
      const std::string notesPath = fieldPath(where, "notes");
      if (!expectArray(*notes, notesPath, error))
        return false;
      for (size_t n = 0; n < notes->size(); ++n) {
        if (!(*notes)[n].is_string()) {
          error = indexPath(notesPath, n) + ": expected a string";
          return false;
        }
        row.notes.push_back((*notes)[n].get<std::string>());
      }
    } else {
      error = fieldPath(where, "notes") + ": missing";
      return false;
    }
    if (const Json *substituted = findField(entry, "substituted_from")) {
      // {"kernelName1": name, "kernelName2": name}, either or both, each the
      // row's own name of that stage; only on a compiled row.
      const std::string path = fieldPath(where, "substituted_from");
      if (!expectObject(*substituted, path, error) ||
          !knownFieldsOnly(*substituted, path, {"kernelName1", "kernelName2"},
                           error) ||
          !readString(*substituted, "kernelName1", path, false,
                      row.substitutedFrom1, error) ||
          !readString(*substituted, "kernelName2", path, false,
                      row.substitutedFrom2, error))
        return false;
      if (row.substitutedFrom1.empty() && row.substitutedFrom2.empty()) {
        error = path + ": names no kernel";
        return false;
      }
      for (auto [name, own, key] :
           {std::tuple<const std::string *, const std::string *, const char *>{
                &row.substitutedFrom1, &row.kernelName1, "kernelName1"},
            {&row.substitutedFrom2, &row.kernelName2, "kernelName2"}})
        if (!name->empty() && *name != *own) {
          error = fieldPath(path, key) + ": '" + *name +
                  "' is not the row's " + key + " '" + *own + "'";
          return false;
        }
      if (!hasConfig) {
        error = path + ": only a compiled row has it";
        return false;
      }
    }
    m.aiterRows.push_back(std::move(row));
  }
  return true;
}

Json serializeAiterRow(const AiterRowInfo &row) {
  Json out = {{"gfx", row.gfx},
              {"cu_num", row.cuNum},
              {"token", row.token},
              {"model_dim", row.modelDim},
              {"inter_dim", row.interDim},
              {"expert", row.expert},
              {"topk", row.topk},
              {"act_type", row.actType},
              {"dtype", row.dtype},
              {"q_dtype_a", row.qDtypeA},
              {"q_dtype_w", row.qDtypeW},
              {"q_type", row.qType},
              {"use_g1u1", row.useG1u1},
              {"doweight_stage1", row.doweightStage1},
              {"fhmoe", row.fhmoe},
              {"kernelName1", row.kernelName1},
              {"kernelName2", row.kernelName2},
              {"block_m", row.blockM},
              {"ksplit", row.ksplit},
              {"source", row.source},
              {"line", row.line},
              {"notes", row.notes}};
  if (row.fhmoe) {
    out["shared_expert_id"] = row.sharedExpertId;
    out["hidden_pad"] = row.hiddenPad;
    out["intermediate_pad"] = row.intermediatePad;
    out["gate_mode"] = row.gateMode;
  }
  if (row.compiled())
    out["config"] = row.config;
  else
    out["skipped"] = row.skipped;
  if (!row.substitutedFrom1.empty() || !row.substitutedFrom2.empty()) {
    Json substituted = Json::object();
    if (!row.substitutedFrom1.empty())
      substituted["kernelName1"] = row.substitutedFrom1;
    if (!row.substitutedFrom2.empty())
      substituted["kernelName2"] = row.substitutedFrom2;
    out["substituted_from"] = substituted;
  }
  return out;
}

} // namespace

std::string serializeManifest(const Manifest &m) {
  Json root = Json::object();
  if (m.bundleFormatVersion != 0)
    root["bundle_format"] = {{"version", m.bundleFormatVersion}};
  root["target"] = {{"arch", m.target.arch},
                    {"features", m.target.features},
                    {"code_object_version", m.target.codeObjectVersion}};
  if (m.target.computeUnits)
    root["target"]["compute_units"] = m.target.computeUnits;
  root["compiler"] = {{"name", m.compiler.name},
                      {"version", m.compiler.version},
                      {"llvm", m.compiler.llvm},
                      {"fingerprint", m.compiler.fingerprint}};
  Json numerics = Json::object();
  for (const auto &[key, value] : m.numerics)
    numerics[key] = value;
  root["numerics"] = numerics;
  Json sources = Json::array();
  for (const SourceFile &source : m.sources)
    sources.push_back({{"path", source.path}, {"hash", source.hash}});
  root["sources"] = sources;
  Json kernels = Json::array();
  for (const KernelInfo &kernel : m.kernels)
    kernels.push_back(serializeKernel(kernel));
  root["kernels"] = kernels;
  Json configs = Json::array();
  for (const ConfigInfo &config : m.configs)
    configs.push_back({{"id", config.id},
                       {"kernels", config.kernels},
                       {"provenance", provenanceName(config.provenance)}});
  root["configs"] = configs;
  Json selection = Json::array();
  for (const SelectionTable &table : m.selection) {
    Json rows = Json::array();
    for (const SelectionRow &row : table.rows) {
      Json entry = {{"m", row.m}, {"config", row.config}};
      const RowProvenance &p = row.provenance;
      if (p.present) {
        entry["provenance"] = provenanceName(p.kind);
        if (!p.model.empty()) {
          entry["model"] = p.model;
          entry["predicted_us"] = p.predictedUs;
        }
        if (p.kind == Provenance::Measured) {
          entry["device"] = p.device;
          entry["method"] = p.method;
          entry["date"] = p.date;
          entry["measured_us"] = p.measuredUs;
        }
      }
      rows.push_back(std::move(entry));
    }
    Json entry = {{"network", table.network},
                  {"family", kernelFamilyName(table.family)},
                  {"ep", table.ep},
                  {"workspace", table.workspace},
                  {"transport", transportName(table.transport)},
                  {"above_max", aboveMaxPolicyName(table.aboveMax)},
                  {"rows", rows}};
    if (table.maxTokens != 0)
      entry["max_tokens"] = table.maxTokens;
    selection.push_back(std::move(entry));
  }
  root["selection"] = selection;
  if (!m.aiterRows.empty()) {
    Json rows = Json::array();
    for (const AiterRowInfo &row : m.aiterRows)
      rows.push_back(serializeAiterRow(row));
    root["aiter_rows"] = rows;
  }
  return root.dump();
}

bool parseManifest(std::string_view jsonText, uint32_t codeObjectCount,
                   Manifest &out, std::string &error) {
  try {
    Json root;
    if (!detail::parseJsonText(jsonText, root, error))
      return false;
    if (!expectObject(root, "", error) ||
        !knownFieldsOnly(root, "",
                         {"bundle_format", "target", "compiler", "numerics",
                          "sources", "kernels", "configs", "selection",
                          "aiter_rows"},
                         error))
      return false;
    Manifest m;
    if (const Json *format = findField(root, "bundle_format")) {
      if (!expectObject(*format, "bundle_format", error) ||
          !knownFieldsOnly(*format, "bundle_format", {"version"}, error) ||
          !readU32(*format, "version", "bundle_format", true,
                   m.bundleFormatVersion, error))
        return false;
    }
    if (!parseTarget(root, m, error) || !parseCompiler(root, m, error) ||
        !parseNumerics(root, m, error) || !parseSources(root, m, error) ||
        !parseKernels(root, codeObjectCount, m, error) ||
        !parseConfigs(root, m, error) || !parseSelection(root, m, error) ||
        !parseAiterRows(root, m, error) ||
        !detail::checkGridRulesAtRows(m, m.selection, error))
      return false;
    out = std::move(m);
    return true;
  } catch (const std::exception &e) {
    error = std::string("manifest: ") + e.what();
    return false;
  } catch (...) {
    error = "manifest: unexpected error";
    return false;
  }
}

bool parseCanonicalManifest(std::string_view jsonText, uint32_t codeObjectCount,
                            Manifest &out, std::string &error) {
  Manifest m;
  if (!parseManifest(jsonText, codeObjectCount, m, error))
    return false;
  std::string canonical;
  try {
    canonical = serializeManifest(m);
  } catch (const std::exception &e) {
    error = std::string("cannot serialise: ") + e.what();
    return false;
  } catch (...) {
    error = "cannot serialise";
    return false;
  }
  if (canonical != jsonText) {
    size_t at = 0;
    while (at < canonical.size() && at < jsonText.size() &&
           canonical[at] == jsonText[at])
      ++at;
    auto excerpt = [](std::string_view text, size_t at) {
      std::string shown;
      for (char c : text.substr(at, 16))
        shown += (static_cast<unsigned char>(c) < 0x20 ||
                  static_cast<unsigned char>(c) >= 0x7f)
                     ? '?'
                     : c;
      return at >= text.size() ? std::string("end of text") : "'" + shown + "'";
    };
    error = "not in canonical form at byte " + std::to_string(at) + " (" +
            excerpt(jsonText, at) + ", the writer stores " +
            excerpt(canonical, at) +
            "; sorted keys, no whitespace, known fields only)";
    return false;
  }
  out = std::move(m);
  return true;
}

} // namespace moec::rt
