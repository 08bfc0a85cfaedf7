// .npy reader/writer: round trips, the byte layout NumPy expects, and one-line
// errors naming the file.

#include "moec/reference/Npy.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace moec::ref;

namespace {

std::string scratchDir() {
  static std::string dir = [] {
    char pattern[] = "/tmp/moec-npy-test-XXXXXX";
    return std::string(mkdtemp(pattern));
  }();
  return dir;
}

void writeRaw(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// A version 1.0 file with the given header text (padded as NumPy does).
std::string npyBytes(const std::string &dict, const std::string &data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xFF);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

} // namespace

TEST_CASE("npy: typed round trips in every supported dtype", "[npy]") {
  std::string dir = scratchDir();
  std::vector<int32_t> ints = {1, -2, 3, 2147483647, -7, 0};
  NpyArray array = NpyArray::fromVector(NpyDtype::Int32, {2, 3}, ints);
  REQUIRE(writeNpy(dir + "/ints.npy", array).ok());
  NpyArray back;
  REQUIRE(readNpy(dir + "/ints.npy", back).ok());
  CHECK(back.dtype == NpyDtype::Int32);
  CHECK(back.shape == std::vector<int64_t>{2, 3});
  CHECK(back.toVector<int32_t>() == ints);

  std::vector<float> floats = {1.5f, -0.0f, 3e38f};
  REQUIRE(writeNpy(dir + "/f.npy", NpyArray::fromVector(NpyDtype::Float32, {3}, floats)).ok());
  REQUIRE(readNpy(dir + "/f.npy", back).ok());
  CHECK(back.shapeString() == "(3,)");
  CHECK(back.toVector<float>() == floats);

  std::vector<double> doubles = {1.0 / 3.0};
  REQUIRE(writeNpy(dir + "/d.npy", NpyArray::fromVector(NpyDtype::Float64, {}, doubles)).ok());
  REQUIRE(readNpy(dir + "/d.npy", back).ok());
  CHECK(back.shape.empty());
  CHECK(back.toVector<double>() == doubles);

  std::vector<uint16_t> halves = {0x3F80, 0xFFC0};
  REQUIRE(writeNpy(dir + "/u2.npy", NpyArray::fromVector(NpyDtype::UInt16, {1, 2}, halves)).ok());
  REQUIRE(readNpy(dir + "/u2.npy", back).ok());
  CHECK(back.toVector<uint16_t>() == halves);

  std::vector<uint8_t> bytes;
  REQUIRE(writeNpy(dir + "/empty.npy", NpyArray::fromVector(NpyDtype::UInt8, {0, 4}, bytes)).ok());
  REQUIRE(readNpy(dir + "/empty.npy", back).ok());
  CHECK(back.shape == std::vector<int64_t>{0, 4});
  CHECK(back.bytes.empty());
}

TEST_CASE("npy: written bytes follow format 1.0", "[npy]") {
  std::string path = scratchDir() + "/layout.npy";
  std::vector<uint8_t> values = {7, 8, 9};
  REQUIRE(writeNpy(path, NpyArray::fromVector(NpyDtype::UInt8, {3}, values)).ok());
  std::ifstream file(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  size_t headerLength = static_cast<unsigned char>(bytes[8]) |
                        (static_cast<unsigned char>(bytes[9]) << 8);
  CHECK((10 + headerLength) % 64 == 0);
  std::string header = bytes.substr(10, headerLength);
  std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }";
  REQUIRE(header.size() > dict.size());
  CHECK(header.substr(0, dict.size()) == dict);
  CHECK(header.substr(dict.size()) ==
        std::string(header.size() - dict.size() - 1, ' ') + "\n");
  CHECK(bytes.substr(10 + headerLength) == std::string("\x07\x08\x09", 3));
  // No temporary file is left behind by the atomic write.
  DIR *dir = opendir(scratchDir().c_str());
  REQUIRE(dir);
  bool leftover = false;
  while (dirent *entry = readdir(dir))
    leftover |= std::string(entry->d_name).find(".tmp.") != std::string::npos;
  closedir(dir);
  CHECK_FALSE(leftover);
}

TEST_CASE("npy: reads headers as NumPy writes them", "[npy]") {
  std::string path = scratchDir() + "/numpy.npy";
  std::string data(2 * 2 * 4, '\0');
  data[0] = 1;
  writeRaw(path, npyBytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", data));
  NpyArray array;
  REQUIRE(readNpy(path, array).ok());
  CHECK(array.shape == std::vector<int64_t>{2, 2});
  CHECK(array.toVector<int32_t>()[0] == 1);
}

TEST_CASE("npy: bad files give one-line errors naming the file", "[npy]") {
  std::string dir = scratchDir();
  NpyArray array;
  auto expectError = [&](const std::string &path, const std::string &fragment) {
    Status status = readNpy(path, array);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message().rfind(path, 0) == 0);
    CHECK(status.message().find(fragment) != std::string::npos);
    CHECK(status.message().find('\n') == std::string::npos);
  };
  expectError(dir + "/missing.npy", "cannot open");
  writeRaw(dir + "/magic.npy", "PK\x03\x04 not numpy at all");
  expectError(dir + "/magic.npy", "bad magic");
  // Files with a NumPy-padded header: name, header dict, data, message.
  const struct {
    const char *file, *dict, *data, *fragment;
  } headerCases[] = {
      {"trunc.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", "abc",
       "truncated data"},
      {"huge.npy",
       "{'descr': '<f8', 'fortran_order': False, 'shape': (281474976710656, 281474976710656), }",
       "x", "too large"},
      {"bigshape.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000), }",
       "x", "truncated data"},
      {"fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "abcd",
       "Fortran"},
      {"big.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd",
       "unsupported dtype '>f4'"},
      {"half.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", "ab",
       "unsupported dtype"},
  };
  for (const auto &c : headerCases) {
    writeRaw(dir + "/" + c.file, npyBytes(c.dict, c.data));
    expectError(dir + "/" + c.file, c.fragment);
  }
  writeRaw(dir + "/noshape.npy", npyBytes("{'descr': '<f4', 'fortran_order': False}", ""));
  expectError(dir + "/noshape.npy", "malformed");
  writeRaw(dir + "/version.npy", std::string("\x93NUMPY\x09\x00\x10\x00", 10));
  expectError(dir + "/version.npy", "version 9.0");

  // The header length, dtype, shape and file size must agree exactly: a
  // header length 16 bytes short would read the data shifted, trailing
  // bytes are not silently ignored.
  {
    std::string good = npyBytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
        std::string(16, 'd'));
    writeRaw(dir + "/good.npy", good);
    REQUIRE(readNpy(dir + "/good.npy", array).ok());
    std::string shortHeader = good;
    const uint16_t length = uint8_t(good[8]) | (uint8_t(good[9]) << 8);
    shortHeader[8] = static_cast<char>((length - 16) & 0xFF);
    shortHeader[9] = static_cast<char>((length - 16) >> 8);
    writeRaw(dir + "/shortheader.npy", shortHeader);
    expectError(dir + "/shortheader.npy", "does not end at the header's closing newline");
    writeRaw(dir + "/trailing.npy", good + "xyz");
    expectError(dir + "/trailing.npy", "trailing data");
  }
  // A FIFO is refused at once instead of blocking the reader.
  const std::string fifo = dir + "/fifo.npy";
  ::unlink(fifo.c_str());
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expectError(fifo, "not a regular file");
  ::unlink(fifo.c_str());

  NpyArray ints = NpyArray::fromVector(NpyDtype::Int32, {2, 3}, std::vector<int32_t>(6));
  Status status = expectNpy("ids.npy", ints, NpyDtype::Int32, {2, 4});
  REQUIRE_FALSE(status.ok());
  CHECK(status.message() == "ids.npy: shape is (2, 3), expected (2, 4)");
  status = expectNpy("ids.npy", ints, NpyDtype::Float32, {2, 3});
  CHECK(status.message() == "ids.npy: dtype is '<i4', expected '<f4'");
  CHECK(expectNpy("ids.npy", ints, NpyDtype::Int32, {-1, 3}).ok());
  CHECK_FALSE(writeNpy("/nonexistent-dir/x.npy", ints).ok());
}
