// Encodes one embedding row as raw little-endian bytes in a chosen format.
// Pure functions without Triton types, so they are unit-tested directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace embedding_serializer {

enum class Format { kFloat32, kFloat16, kInt8, kUint8, kBinary, kUbinary };

// int8 = round(x * 127) clamped to [-127, 127]; uint8 = int8 + 128. The
// scale is fixed so that clients decode without per-row metadata; a unit
// vector's components lie in [-1, 1], larger values (normalize=false) saturate.
inline constexpr float kInt8Scale = 127.0f;

std::optional<Format> ParseFormat(std::string_view name);
bool IsBitPacked(Format format);

// Bytes one row of `dims` values takes; bit-packed formats need dims % 8 == 0.
size_t EncodedRowBytes(Format format, size_t dims);

// IEEE 754 binary16 conversions, round-to-nearest-even like numpy's astype.
uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);

// Writes EncodedRowBytes(format, dims) bytes to `out`. Multi-byte values are
// written byte by byte from their bit patterns, so the output is little-endian
// whatever the host's byte order. Bit-packed formats put the first dimension
// in the most significant bit of the first byte (numpy.packbits order).
void EncodeRow(Format format, const float* values, size_t dims, uint8_t* out);

}  // namespace embedding_serializer
