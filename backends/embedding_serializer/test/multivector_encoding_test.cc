#include "multivector_encoding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace embedding_serializer {
namespace {

using Bytes = std::vector<uint8_t>;
using Mask = std::vector<int64_t>;

Bytes Encode(Format format, const std::vector<float>& vectors, const Mask& mask, size_t dims) {
  Bytes out(MultiVectorRowBytes(format, dims, ServedVectors(mask.data(), mask.size())));
  EncodeMultiVectorRow(format, vectors.data(), mask.data(), mask.size(), dims, out.data());
  return out;
}

TEST(ServedVectors, CountsEveryPositionWhoseMaskIsNotZero) {
  EXPECT_EQ(ServedVectors(Mask{1, 0, 1, 1, 0}.data(), 5), 3u);
  // Any value but 0 serves the position, as the contract counts mask != 0.
  EXPECT_EQ(ServedVectors(Mask{2, -1, 0}.data(), 3), 2u);
  EXPECT_EQ(ServedVectors(Mask{0, 0}.data(), 2), 0u);
  EXPECT_EQ(ServedVectors(nullptr, 0), 0u);
}

TEST(MultiVectorRowBytes, IsTheCountAndOneEncodedRowPerVector) {
  EXPECT_EQ(MultiVectorRowBytes(Format::kFloat32, 128, 0), 4u);
  EXPECT_EQ(MultiVectorRowBytes(Format::kFloat32, 128, 3), 4u + 3 * 512);
  EXPECT_EQ(MultiVectorRowBytes(Format::kFloat16, 128, 3), 4u + 3 * 256);
  EXPECT_EQ(MultiVectorRowBytes(Format::kInt8, 128, 3), 4u + 3 * 128);
  EXPECT_EQ(MultiVectorRowBytes(Format::kUbinary, 128, 3), 4u + 3 * 16);
}

TEST(EncodeMultiVectorRow, WritesTheCountThenTheMaskedVectorsInPositionOrder) {
  // Three positions of two dims; the middle one is padding.
  const std::vector<float> vectors = {1.0f, 0.5f, 9.0f, 9.0f, -1.0f, 0.25f};
  EXPECT_EQ(Encode(Format::kFloat32, vectors, {1, 0, 1}, 2),
            (Bytes{0x02, 0x00, 0x00, 0x00,                            // n = 2
                   0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x3F,    // 1.0, 0.5
                   0x00, 0x00, 0x80, 0xBF, 0x00, 0x00, 0x80, 0x3E}));  // -1.0, 0.25
  EXPECT_EQ(Encode(Format::kFloat16, vectors, {0, 1, 1}, 2),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0x80, 0x48, 0x80, 0x48, 0x00, 0xBC, 0x00, 0x34}));
}

TEST(EncodeMultiVectorRow, EncodesEachVectorAsADenseRowOfItsFormat) {
  // 0.5 * 127 = 63.5 rounds to even, 64; -1 is -127.
  const std::vector<float> vectors = {0.5f, -1.0f, 1.0f, 0.0f};
  EXPECT_EQ(Encode(Format::kInt8, vectors, {1, 1}, 2),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0x40, 0x81, 0x7F, 0x00}));
  EXPECT_EQ(Encode(Format::kUint8, vectors, {1, 1}, 2),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0xC0, 0x01, 0xFF, 0x80}));
  // 8 dims per byte, the first in the most significant bit.
  const std::vector<float> signs = {1, -1, 1, -1, 1, -1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1};
  EXPECT_EQ(Encode(Format::kUbinary, signs, {1, 1}, 8),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0xAA, 0x01}));
  EXPECT_EQ(Encode(Format::kBinary, signs, {1, 1}, 8),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0x2A, 0x81}));
}

TEST(EncodeMultiVectorRow, WritesOnlyTheCountForATextWithoutServedVectors) {
  EXPECT_EQ(Encode(Format::kFloat32, {1.0f, 2.0f}, {0, 0}, 1), (Bytes{0x00, 0x00, 0x00, 0x00}));
}

}  // namespace
}  // namespace embedding_serializer
