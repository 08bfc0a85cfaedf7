#include "moec/hash.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using moec::rt::xxh64;

// Expected values printed by `xxhsum -H1` (xxHash 0.8.1) on the same bytes.
TEST_CASE("xxh64 matches xxhsum on short inputs", "[hash]") {
  CHECK(xxh64("", 0) == 0xef46db3751d8e999ULL);
  CHECK(xxh64("a", 1) == 0xd24ec4f1a98c6e5bULL);
  CHECK(xxh64("abc", 3) == 0x44bc2cf5ad770999ULL);
}

TEST_CASE("xxh64 matches xxhsum across the stripe and tail paths", "[hash]") {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<uint8_t>(i * 7 + 3);
  CHECK(xxh64(data.data(), 1000) == 0x5f235fa033f1a3fbULL); // 31 stripes + 8-byte tail
  CHECK(xxh64(data.data(), 37) == 0xe32ef63802f5a3fdULL);   // 1 stripe + 4 + 1
}

TEST_CASE("xxh64 sees a single flipped bit anywhere", "[hash]") {
  std::vector<uint8_t> data(300, 0x5a);
  const uint64_t reference = xxh64(data.data(), data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] ^= 0x10;
    CHECK(xxh64(data.data(), data.size()) != reference);
    data[i] ^= 0x10;
  }
  // Unaligned start gives the same value as an aligned copy.
  std::vector<uint8_t> shifted(data.size() + 1);
  std::memcpy(shifted.data() + 1, data.data(), data.size());
  CHECK(xxh64(shifted.data() + 1, data.size()) == reference);
}
