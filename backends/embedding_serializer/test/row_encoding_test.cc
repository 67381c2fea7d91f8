#include "row_encoding.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace embedding_serializer {
namespace {

std::vector<uint8_t> Encode(Format format, const std::vector<float>& values) {
  std::vector<uint8_t> out(EncodedRowBytes(format, values.size()));
  EncodeRow(format, values.data(), values.size(), out.data());
  return out;
}

TEST(ParseFormat, KnowsEveryFormatByName) {
  EXPECT_EQ(ParseFormat("float32"), Format::kFloat32);
  EXPECT_EQ(ParseFormat("float16"), Format::kFloat16);
  EXPECT_EQ(ParseFormat("int8"), Format::kInt8);
  EXPECT_EQ(ParseFormat("uint8"), Format::kUint8);
  EXPECT_EQ(ParseFormat("binary"), Format::kBinary);
  EXPECT_EQ(ParseFormat("ubinary"), Format::kUbinary);
  EXPECT_FALSE(ParseFormat("fp32").has_value());
  EXPECT_FALSE(ParseFormat("").has_value());
}

TEST(EncodedRowBytes, MatchesEachFormatsWidth) {
  EXPECT_EQ(EncodedRowBytes(Format::kFloat32, 384), 1536u);
  EXPECT_EQ(EncodedRowBytes(Format::kFloat16, 384), 768u);
  EXPECT_EQ(EncodedRowBytes(Format::kInt8, 384), 384u);
  EXPECT_EQ(EncodedRowBytes(Format::kUint8, 384), 384u);
  EXPECT_EQ(EncodedRowBytes(Format::kBinary, 384), 48u);
  EXPECT_EQ(EncodedRowBytes(Format::kUbinary, 384), 48u);
}

TEST(EncodeRow, Float32IsLittleEndianIeee) {
  // 1.0f = 0x3F800000, -2.5f = 0xC0200000: least significant byte first.
  EXPECT_EQ(Encode(Format::kFloat32, {1.0f, -2.5f}),
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0}));
}

TEST(EncodeRow, Float16IsLittleEndianIeee) {
  // 1.0 = 0x3C00, -2.0 = 0xC000 in binary16.
  EXPECT_EQ(Encode(Format::kFloat16, {1.0f, -2.0f}),
            (std::vector<uint8_t>{0x00, 0x3C, 0x00, 0xC0}));
}

TEST(FloatToHalfBits, ConvertsSpecialAndBoundaryValues) {
  EXPECT_EQ(FloatToHalfBits(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalfBits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalfBits(0.1f), 0x2E66);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);  // largest half
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7BFF);  // below the halfway point
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7C00);  // halfway rounds to even: Inf
  EXPECT_EQ(FloatToHalfBits(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalfBits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalfBits(std::numeric_limits<float>::quiet_NaN()) & 0x7E00, 0x7E00);
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // tie to even: 2
  EXPECT_EQ(FloatToHalfBits(1e-8f), 0x0000);
}

TEST(FloatToHalfBits, RoundsNormalsToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
}

TEST(FloatToHalfBits, RoundTripsEveryHalfValue) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto half = static_cast<uint16_t>(bits);
    const bool is_nan = (half & 0x7C00) == 0x7C00 && (half & 0x03FF) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(half)));
      continue;
    }
    ASSERT_EQ(FloatToHalfBits(HalfBitsToFloat(half)), half) << "bits " << bits;
  }
}

TEST(EncodeRow, Int8ScalesBy127RoundsAndSaturates) {
  const std::vector<uint8_t> out =
      Encode(Format::kInt8, {1.0f, -1.0f, 0.5f, 0.0f, 2.0f, -3.0f, 0.1f,
                             std::numeric_limits<float>::quiet_NaN()});
  const std::vector<int8_t> as_int8(out.begin(), out.end());
  // 0.5 * 127 = 63.5 rounds to even (64); 0.1 * 127 = 12.7 rounds to 13.
  EXPECT_EQ(as_int8, (std::vector<int8_t>{127, -127, 64, 0, 127, -127, 13, 0}));
}

TEST(EncodeRow, Uint8IsInt8Plus128) {
  EXPECT_EQ(Encode(Format::kUint8, {0.0f, 1.0f, -1.0f, 0.5f}),
            (std::vector<uint8_t>{128, 255, 1, 192}));
}

TEST(EncodeRow, UbinaryPacksSignBitsMostSignificantFirst) {
  // Only strictly positive values set a bit.
  EXPECT_EQ(Encode(Format::kUbinary, {1, -1, 1, -1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}),
            (std::vector<uint8_t>{0xA1, 0xFF}));
}

TEST(EncodeRow, BinaryIsUbinaryMinus128AsInt8) {
  const std::vector<uint8_t> out =
      Encode(Format::kBinary, {1, -1, 1, -1, 0, 0, 0, 1, -1, -1, -1, -1, -1, -1, -1, -1});
  const std::vector<int8_t> as_int8(out.begin(), out.end());
  EXPECT_EQ(as_int8, (std::vector<int8_t>{0xA1 - 128, 0x00 - 128}));
}

}  // namespace
}  // namespace embedding_serializer
