// Encodes one embedding row as raw little-endian bytes in a chosen format.
// Pure functions without Triton types, so they are unit-tested directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace embedding_serializer {

enum class Format { kFloat32, kFloat16, kInt8, kUint8, kBinary, kUbinary };

// Each format's request name (the dtype parameter) and width, one entry per
// Format in enum order. model_common/model_common/row_formats.json declares
// the formats for Python and the clients; test/row_formats_test.cc fails
// where this list and EncodeRow disagree with it (docs/adding_a_row_format.md).
struct FormatSpec {
  Format format;
  std::string_view name;
  size_t bytes_per_value;  // 0: bit-packed, 8 values per byte
};
inline constexpr FormatSpec kFormats[] = {
    {Format::kFloat32, "float32", 4}, {Format::kFloat16, "float16", 2},
    {Format::kInt8, "int8", 1},       {Format::kUint8, "uint8", 1},
    {Format::kBinary, "binary", 0},   {Format::kUbinary, "ubinary", 0},
};

// int8 = round(x * 127) clamped to [-127, 127]; uint8 = int8 + 128. The
// scale is fixed so that clients decode without per-row metadata; a unit
// vector's components lie in [-1, 1], larger values (normalize=false) saturate.
inline constexpr float kInt8Scale = 127.0f;

std::optional<Format> ParseFormat(std::string_view name);
std::string_view FormatName(Format format);
bool IsBitPacked(Format format);

// Bytes one row of `dims` values takes; bit-packed formats need dims % 8 == 0.
size_t EncodedRowBytes(Format format, size_t dims);

// IEEE 754 binary16 conversions, round-to-nearest-even like numpy's astype.
uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);

// `bits` as 4 bytes, least significant first, whatever the host's byte order.
void StoreLittleEndian32(uint32_t bits, uint8_t* out);

// Writes EncodedRowBytes(format, dims) bytes to `out`. Multi-byte values are
// written byte by byte from their bit patterns, so the output is little-endian
// whatever the host's byte order. Bit-packed formats put the first dimension
// in the most significant bit of the first byte (numpy.packbits order).
void EncodeRow(Format format, const float* values, size_t dims, uint8_t* out);

}  // namespace embedding_serializer
