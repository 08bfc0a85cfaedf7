//===- Npy.cpp - NumPy .npy reader and writer -----------------------------===//

#include "moec/reference/Npy.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <new>
#include <sys/stat.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace moec::ref {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLength = 6;

bool parseDescr(const std::string &descr, NpyDtype &dtype) {
  // A byte-sized type may be spelled with any byte-order character.
  if (descr == "|u1" || descr == "<u1" || descr == "=u1") {
    dtype = NpyDtype::UInt8;
    return true;
  }
  static const struct {
    const char *descr;
    NpyDtype dtype;
  } kTypes[] = {{"<u2", NpyDtype::UInt16},
                {"<i4", NpyDtype::Int32},
                {"<f4", NpyDtype::Float32},
                {"<f8", NpyDtype::Float64}};
  for (const auto &type : kTypes)
    if (descr == type.descr) {
      dtype = type.dtype;
      return true;
    }
  return false;
}

/// Value text following `'key':` in the header dict, up to the next
/// top-level comma or closing brace (parentheses are kept together).
bool findHeaderValue(const std::string &header, const std::string &key,
                     std::string &value) {
  std::string quoted[] = {"'" + key + "'", "\"" + key + "\""};
  size_t position = std::string::npos;
  for (const std::string &candidate : quoted) {
    position = header.find(candidate);
    if (position != std::string::npos) {
      position += candidate.size();
      break;
    }
  }
  if (position == std::string::npos)
    return false;
  position = header.find(':', position);
  if (position == std::string::npos)
    return false;
  ++position;
  int depth = 0;
  size_t end = position;
  for (; end < header.size(); ++end) {
    char c = header[end];
    if (c == '(')
      ++depth;
    else if (c == ')')
      --depth;
    else if ((c == ',' || c == '}') && depth == 0)
      break;
  }
  value = header.substr(position, end - position);
  size_t first = value.find_first_not_of(" \t");
  size_t last = value.find_last_not_of(" \t");
  value = first == std::string::npos ? "" : value.substr(first, last - first + 1);
  return true;
}

bool parseShape(const std::string &text, std::vector<int64_t> &shape) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    return false;
  shape.clear();
  std::string inner = text.substr(1, text.size() - 2);
  std::stringstream stream(inner);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t first = item.find_first_not_of(" \t");
    if (first == std::string::npos)
      continue; // trailing comma of a 1-tuple
    size_t last = item.find_last_not_of(" \tL");
    item = item.substr(first, last - first + 1);
    if (item.empty())
      return false;
    int64_t extent = 0;
    for (char c : item) {
      if (!std::isdigit(static_cast<unsigned char>(c)))
        return false;
      extent = extent * 10 + (c - '0');
      if (extent > (int64_t(1) << 48))
        return false;
    }
    shape.push_back(extent);
  }
  return true;
}

} // namespace

int64_t npyItemSize(NpyDtype dtype) {
  switch (dtype) {
  case NpyDtype::UInt8:
    return 1;
  case NpyDtype::UInt16:
    return 2;
  case NpyDtype::Int32:
  case NpyDtype::Float32:
    return 4;
  case NpyDtype::Float64:
    return 8;
  }
  return 1;
}

const char *npyDescr(NpyDtype dtype) {
  switch (dtype) {
  case NpyDtype::UInt8:
    return "|u1";
  case NpyDtype::UInt16:
    return "<u2";
  case NpyDtype::Int32:
    return "<i4";
  case NpyDtype::Float32:
    return "<f4";
  case NpyDtype::Float64:
    return "<f8";
  }
  return "?";
}

int64_t NpyArray::elementCount() const {
  int64_t count = 1;
  for (int64_t extent : shape)
    count *= extent;
  return count;
}

std::string NpyArray::shapeString() const {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1)
    text += ",";
  return text + ")";
}

Status readNpy(const std::string &path, NpyArray &array) {
  // Only a regular file: a FIFO or a device would block or never end.
  struct stat info;
  if (::stat(path.c_str(), &info) != 0)
    return Status::error(path + ": cannot open file");
  if (!S_ISREG(info.st_mode))
    return Status::error(path + ": not a regular file");
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error(path + ": cannot open file");
  char prefix[kMagicLength + 2];
  if (!file.read(prefix, sizeof(prefix)))
    return Status::error(path + ": not a .npy file (shorter than its magic)");
  if (std::memcmp(prefix, kMagic, kMagicLength) != 0)
    return Status::error(path + ": not a .npy file (bad magic)");
  int major = static_cast<unsigned char>(prefix[6]);
  int minor = static_cast<unsigned char>(prefix[7]);
  uint64_t headerLength = 0;
  if (major == 1 && minor == 0) {
    unsigned char length[2];
    if (!file.read(reinterpret_cast<char *>(length), 2))
      return Status::error(path + ": truncated .npy header length");
    headerLength = length[0] | (length[1] << 8);
  } else if ((major == 2 || major == 3) && minor == 0) {
    unsigned char length[4];
    if (!file.read(reinterpret_cast<char *>(length), 4))
      return Status::error(path + ": truncated .npy header length");
    headerLength = length[0] | (length[1] << 8) | (length[2] << 16) |
                   (uint64_t(length[3]) << 24);
  } else {
    return Status::error(path + ": unsupported .npy format version " +
                         std::to_string(major) + "." + std::to_string(minor));
  }
  if (headerLength > (1u << 20))
    return Status::error(path + ": .npy header length " +
                         std::to_string(headerLength) + " is implausible");
  std::string header(headerLength, '\0');
  if (!file.read(header.data(), static_cast<std::streamsize>(headerLength)))
    return Status::error(path + ": truncated .npy header");
  // The header is a dict padded with spaces and ended by a newline; a
  // length that stops short of that newline would shift the data.
  if (header.empty() || header.back() != '\n' ||
      header.find_last_not_of(" \n") == std::string::npos ||
      header[header.find_last_not_of(" \n")] != '}')
    return Status::error(path + ": .npy header length " +
                         std::to_string(headerLength) +
                         " does not end at the header's closing newline");

  std::string descr, fortran, shapeText;
  if (!findHeaderValue(header, "descr", descr) ||
      !findHeaderValue(header, "fortran_order", fortran) ||
      !findHeaderValue(header, "shape", shapeText))
    return Status::error(path +
                         ": malformed .npy header (needs descr, fortran_order, shape)");
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"'))
    descr = descr.substr(1, descr.size() - 2);
  NpyArray result;
  if (!parseDescr(descr, result.dtype))
    return Status::error(path + ": unsupported dtype '" + descr +
                         "' (supported: |u1 <u2 <i4 <f4 <f8)");
  if (fortran != "False")
    return Status::error(path + ": Fortran-order arrays are not supported");
  if (!parseShape(shapeText, result.shape))
    return Status::error(path + ": malformed shape " + shapeText);
  // Check the size against the file before allocating, so a corrupt shape
  // gives a message instead of an allocation failure.
  int64_t count = 1;
  for (int64_t extent : result.shape) {
    if (extent != 0 && count > (int64_t(1) << 56) / extent)
      return Status::error(path + ": shape " + result.shapeString() +
                           " is too large");
    count *= extent;
  }
  int64_t expectedBytes = count * npyItemSize(result.dtype);
  std::streampos dataStart = file.tellg();
  file.seekg(0, std::ios::end);
  int64_t available = static_cast<int64_t>(file.tellg() - dataStart);
  file.seekg(dataStart);
  if (available != expectedBytes)
    return Status::error(path + ": " +
                         (available < expectedBytes ? "truncated data" :
                                                      "trailing data") +
                         ": shape " + result.shapeString() + " needs " +
                         std::to_string(expectedBytes) + " bytes, file holds " +
                         std::to_string(available));
  if (expectedBytes > kMaxNpyBytes)
    return Status::error(path + ": " + std::to_string(expectedBytes) +
                         " bytes of data exceed the limit of " +
                         std::to_string(kMaxNpyBytes) + " bytes per array");
  try {
    result.bytes.resize(static_cast<size_t>(expectedBytes));
  } catch (const std::bad_alloc &) {
    return Status::error(path + ": out of memory for " +
                         std::to_string(expectedBytes) + " bytes of data");
  }
  if (expectedBytes > 0 &&
      !file.read(reinterpret_cast<char *>(result.bytes.data()), expectedBytes))
    return Status::error(path + ": truncated data: shape " +
                         result.shapeString() + " needs " +
                         std::to_string(expectedBytes) + " bytes, file holds " +
                         std::to_string(file.gcount()));
  array = std::move(result);
  return Status();
}

Status writeNpy(const std::string &path, const NpyArray &array) {
  if (static_cast<int64_t>(array.bytes.size()) !=
      array.elementCount() * npyItemSize(array.dtype))
    return Status::error(path + ": array bytes do not match shape " +
                         array.shapeString());
  std::string header = std::string("{'descr': '") + npyDescr(array.dtype) +
                       "', 'fortran_order': False, 'shape': " +
                       array.shapeString() + ", }";
  // Pad with spaces so magic + 4 + header + '\n' is a multiple of 64.
  size_t unpadded = kMagicLength + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xFFFF)
    return Status::error(path + ": shape too long for .npy format 1.0");

  std::string temporary =
      path + ".tmp." + std::to_string(static_cast<long>(::getpid()));
  std::FILE *file = std::fopen(temporary.c_str(), "wb");
  if (!file)
    return Status::error(path + ": cannot create temporary file " + temporary);
  unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              static_cast<unsigned char>(header.size() & 0xFF),
                              static_cast<unsigned char>(header.size() >> 8)};
  bool written = std::fwrite(prefix, 1, sizeof(prefix), file) == sizeof(prefix) &&
                 std::fwrite(header.data(), 1, header.size(), file) == header.size() &&
                 (array.bytes.empty() ||
                  std::fwrite(array.bytes.data(), 1, array.bytes.size(), file) ==
                      array.bytes.size());
  written = (std::fflush(file) == 0) && written;
  written = (::fsync(::fileno(file)) == 0) && written;
  written = (std::fclose(file) == 0) && written;
  if (!written) {
    std::remove(temporary.c_str());
    return Status::error(path + ": write failed (disk full or I/O error)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return Status::error(path + ": cannot rename temporary file into place");
  }
  return Status();
}

Status expectNpy(const std::string &path, const NpyArray &array,
                 NpyDtype dtype, const std::vector<int64_t> &shape) {
  if (array.dtype != dtype)
    return Status::error(path + ": dtype is '" + npyDescr(array.dtype) +
                         "', expected '" + npyDescr(dtype) + "'");
  bool matches = array.shape.size() == shape.size();
  for (size_t i = 0; matches && i < shape.size(); ++i)
    matches = shape[i] < 0 || shape[i] == array.shape[i];
  if (!matches) {
    std::string expected = "(";
    for (size_t i = 0; i < shape.size(); ++i)
      expected += (i ? ", " : "") +
                  (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
    expected += shape.size() == 1 ? ",)" : ")";
    return Status::error(path + ": shape is " + array.shapeString() +
                         ", expected " + expected);
  }
  return Status();
}

} // namespace moec::ref
