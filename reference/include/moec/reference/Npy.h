//===- Npy.h - NumPy .npy reader and writer ---------------------*- C++ -*-===//
//
// The subset of the NumPy .npy format the oracle exchanges with users:
// little-endian, C order, dtypes |u1 <u2 <i4 <f4 <f8 (BF16 travels as <u2
// holding its bits). Files are written as format version 1.0; versions 1.0,
// 2.0 and 3.0 are read. Every error is one line naming the file.
//
//===----------------------------------------------------------------------===//
#ifndef MOEC_REFERENCE_NPY_H
#define MOEC_REFERENCE_NPY_H

#include "moec/reference/Status.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace moec::ref {

/// The largest array readNpy reads (16 GiB): the checkpoint-layout weights
/// of a real layer fit (Flash W13 is 4.5 GB), a hostile header cannot make
/// it allocate without bound.
inline constexpr int64_t kMaxNpyBytes = int64_t(16) << 30;

/// Element types of .npy files the oracle reads and writes.
enum class NpyDtype {
  UInt8,   ///< '|u1': FP8 codes, packed E2M1 pairs, E8M0 scales
  UInt16,  ///< '<u2': BF16 bit patterns
  Int32,   ///< '<i4': expert ids, route ids
  Float32, ///< '<f4': routing weights, FP32 outputs
  Float64, ///< '<f8'
};

/// Bytes per element of `dtype`.
int64_t npyItemSize(NpyDtype dtype);
/// The descr string NumPy writes for `dtype` ('|u1', '<f4', ...).
const char *npyDescr(NpyDtype dtype);

/// An n-dimensional array in C order with its raw little-endian bytes.
struct NpyArray {
  NpyDtype dtype = NpyDtype::UInt8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// Number of elements (1 for a 0-d array).
  int64_t elementCount() const;
  /// "(3, 4)" as NumPy prints a shape.
  std::string shapeString() const;

  /// Builds an array from typed elements; the element type must match dtype.
  template <typename T>
  static NpyArray fromVector(NpyDtype dtype, std::vector<int64_t> shape,
                             const std::vector<T> &values) {
    NpyArray array;
    array.dtype = dtype;
    array.shape = std::move(shape);
    array.bytes.resize(values.size() * sizeof(T));
    if (!values.empty())
      std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
    return array;
  }
  /// Copies the elements out as T (sizeof(T) must equal the item size).
  template <typename T> std::vector<T> toVector() const {
    std::vector<T> values(bytes.size() / sizeof(T));
    if (!values.empty())
      std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
    return values;
  }
};

/// Reads a .npy file. Errors (missing file, bad magic, unsupported version,
/// dtype or Fortran order, malformed header, truncated data) are one line
/// starting with the path.
Status readNpy(const std::string &path, NpyArray &array);

/// Writes a .npy file (format 1.0) atomically: the data goes to a temporary
/// file in the same directory, which is then renamed over `path`, so an
/// interrupted write never leaves a partial file under the final name.
Status writeNpy(const std::string &path, const NpyArray &array);

/// Checks that `array` has `dtype` and `shape` (a -1 entry matches any
/// extent); the message names the file and the field.
Status expectNpy(const std::string &path, const NpyArray &array,
                 NpyDtype dtype, const std::vector<int64_t> &shape);

} // namespace moec::ref

#endif // MOEC_REFERENCE_NPY_H
