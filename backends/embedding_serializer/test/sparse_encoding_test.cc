#include "sparse_encoding.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace embedding_serializer {
namespace {

using Bytes = std::vector<uint8_t>;
using Indices = std::vector<uint32_t>;

std::vector<uint32_t> Active(const std::vector<float>& values,
                             std::optional<size_t> max_active = std::nullopt) {
  return ActiveIndices(values.data(), values.size(), max_active);
}

Bytes Encode(Format value_format, const std::vector<float>& values, const Indices& indices) {
  Bytes out(SparseRowBytes(value_format, indices.size()));
  EncodeSparseRow(value_format, values.data(), indices, out.data());
  return out;
}

TEST(ActiveIndices, KeepsTheEntriesAboveZeroInIndexOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Active({0.0f, 0.5f, -1.0f, 2.0f, -0.0f, nan, 1e-30f}), (Indices{1, 3, 6}));
  EXPECT_EQ(Active({0.0f, -1.0f, 0.0f}), Indices{});
}

TEST(ActiveIndices, KeepsTheLargestThenWritesThemInIndexOrder) {
  const std::vector<float> values = {0.1f, 0.9f, 0.0f, 0.5f, 0.7f, 0.3f};
  EXPECT_EQ(Active(values, 1), (Indices{1}));
  EXPECT_EQ(Active(values, 3), (Indices{1, 3, 4}));
  // At or past the number of active entries, every one is kept.
  EXPECT_EQ(Active(values, 5), (Indices{0, 1, 3, 4, 5}));
  EXPECT_EQ(Active(values, 6), (Indices{0, 1, 3, 4, 5}));
}

TEST(ActiveIndices, BreaksTiesByTheLowerIndex) {
  const std::vector<float> values = {2.0f, 3.0f, 2.0f, 3.0f, 2.0f, 0.0f, 1.0f};
  EXPECT_EQ(Active(values, 1), (Indices{1}));
  EXPECT_EQ(Active(values, 2), (Indices{1, 3}));
  EXPECT_EQ(Active(values, 3), (Indices{0, 1, 3}));
  EXPECT_EQ(Active(values, 4), (Indices{0, 1, 2, 3}));
}

TEST(SparseRowBytes, IsTheCountAndIndexAndValuePerEntry) {
  EXPECT_EQ(SparseRowBytes(Format::kFloat32, 0), 4u);
  EXPECT_EQ(SparseRowBytes(Format::kFloat32, 3), 4u + 3 * 8);
  EXPECT_EQ(SparseRowBytes(Format::kFloat16, 3), 4u + 3 * 6);
}

TEST(EncodeSparseRow, WritesCountIndicesThenFloat32ValuesLittleEndian) {
  const std::vector<float> values = {0.0f, 1.0f, 0.0f, 0.0f, 0.5f};
  // 1.0f = 0x3F800000, 0.5f = 0x3F000000.
  EXPECT_EQ(Encode(Format::kFloat32, values, {1, 4}),
            (Bytes{0x02, 0x00, 0x00, 0x00,                            // n = 2
                   0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,    // indices
                   0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x3F}));  // values
}

TEST(EncodeSparseRow, WritesFloat16ValuesAsIeeeHalf) {
  std::vector<float> values(300, 0.0f);
  values[258] = 2.0f;  // 0x4000
  values[7] = 0.1f;    // 0x2E66, rounded to nearest even
  EXPECT_EQ(Encode(Format::kFloat16, values, {7, 258}),
            (Bytes{0x02, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x02, 0x01, 0x00, 0x00,
                   0x66, 0x2E, 0x00, 0x40}));
}

TEST(EncodeSparseRow, WritesOnlyTheCountForARowWithoutActiveEntries) {
  EXPECT_EQ(Encode(Format::kFloat16, {0.0f, -1.0f}, {}), (Bytes{0x00, 0x00, 0x00, 0x00}));
}

}  // namespace
}  // namespace embedding_serializer
