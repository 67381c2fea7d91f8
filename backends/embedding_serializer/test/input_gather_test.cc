#include "input_gather.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "row_encoding.h"

namespace embedding_serializer {
namespace {

std::vector<uint8_t> HostBytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(GatherFloats, ReadsOneFloat32Buffer) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f};
  const std::vector<uint8_t> bytes = HostBytes(values);
  std::vector<float> out;
  EXPECT_EQ(GatherFloats({{bytes.data(), bytes.size()}}, ElementType::kFloat32, &out), "");
  EXPECT_EQ(out, values);
}

TEST(GatherFloats, JoinsBuffersSplitInsideAnElement) {
  const std::vector<float> values = {1.5f, -2.0f, 0.25f, 8.0f};
  const std::vector<uint8_t> bytes = HostBytes(values);
  // Splits at byte 3 and byte 9 cut the first and the third element.
  const std::vector<Chunk> chunks = {{bytes.data(), 3},
                                     {bytes.data() + 3, 6},
                                     {bytes.data() + 9, 0},
                                     {bytes.data() + 9, bytes.size() - 9}};
  std::vector<float> out;
  EXPECT_EQ(GatherFloats(chunks, ElementType::kFloat32, &out), "");
  EXPECT_EQ(out, values);
}

TEST(GatherFloats, WidensFloat16) {
  const std::vector<uint16_t> halves = {0x3C00, 0xC000, 0x3800};  // 1, -2, 0.5
  std::vector<uint8_t> bytes(halves.size() * 2);
  std::memcpy(bytes.data(), halves.data(), bytes.size());
  const std::vector<Chunk> chunks = {{bytes.data(), 1}, {bytes.data() + 1, 5}};
  std::vector<float> out;
  EXPECT_EQ(GatherFloats(chunks, ElementType::kFloat16, &out), "");
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 0.5f}));
}

TEST(GatherFloats, RejectsAPartialElement) {
  const std::vector<uint8_t> bytes(6);
  std::vector<float> out;
  EXPECT_NE(GatherFloats({{bytes.data(), bytes.size()}}, ElementType::kFloat32, &out)
                .find("not a whole number"),
            std::string::npos);
}

TEST(GatherInt64s, JoinsBuffersSplitAnywhereInsideAnElement) {
  const std::vector<int64_t> values = {1, 0, -5, int64_t{1} << 40};
  std::vector<uint8_t> bytes(values.size() * sizeof(int64_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  // An element over three chunks (bytes 5..12 over 5, 1 and 6 bytes).
  const std::vector<Chunk> chunks = {
      {bytes.data(), 5}, {bytes.data() + 5, 1}, {bytes.data() + 6, bytes.size() - 6}};
  std::vector<int64_t> out;
  EXPECT_EQ(GatherInt64s(chunks, &out), "");
  EXPECT_EQ(out, values);
}

TEST(GatherInt64s, RejectsAPartialElement) {
  const std::vector<uint8_t> bytes(12);
  std::vector<int64_t> out;
  EXPECT_EQ(GatherInt64s({{bytes.data(), bytes.size()}}, &out),
            "input holds 12 bytes, not a whole number of 8-byte elements");
}

}  // namespace
}  // namespace embedding_serializer
