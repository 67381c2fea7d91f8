#include "row_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

namespace embedding_serializer {
namespace {

constexpr bool FormatsInEnumOrder() {
  for (size_t i = 0; i < std::size(kFormats); ++i) {
    if (kFormats[i].format != static_cast<Format>(i)) {
      return false;
    }
  }
  return true;
}
static_assert(FormatsInEnumOrder(), "kFormats lists each Format once, in enum order");

const FormatSpec& Spec(Format format) { return kFormats[static_cast<size_t>(format)]; }

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

void StoreLittleEndian16(uint16_t bits, uint8_t* out) {
  out[0] = static_cast<uint8_t>(bits & 0xFFu);
  out[1] = static_cast<uint8_t>(bits >> 8);
}

int QuantizeInt8(float value) {
  // nearbyint uses the default round-to-nearest-even mode, like numpy.rint.
  const float scaled = std::nearbyint(value * kInt8Scale);
  if (std::isnan(scaled)) {
    return 0;
  }
  return static_cast<int>(std::clamp(scaled, -kInt8Scale, kInt8Scale));
}

uint8_t SignBits(const float* values) {
  uint8_t byte = 0;
  for (int bit = 0; bit < 8; ++bit) {
    if (values[bit] > 0.0f) {
      byte |= static_cast<uint8_t>(0x80u >> bit);
    }
  }
  return byte;
}

}  // namespace

void StoreLittleEndian32(uint32_t bits, uint8_t* out) {
  out[0] = static_cast<uint8_t>(bits & 0xFFu);
  out[1] = static_cast<uint8_t>((bits >> 8) & 0xFFu);
  out[2] = static_cast<uint8_t>((bits >> 16) & 0xFFu);
  out[3] = static_cast<uint8_t>(bits >> 24);
}

std::optional<Format> ParseFormat(std::string_view name) {
  for (const FormatSpec& spec : kFormats) {
    if (spec.name == name) {
      return spec.format;
    }
  }
  return std::nullopt;
}

std::string_view FormatName(Format format) { return Spec(format).name; }

bool IsBitPacked(Format format) { return Spec(format).bytes_per_value == 0; }

size_t EncodedRowBytes(Format format, size_t dims) {
  const size_t bytes_per_value = Spec(format).bytes_per_value;
  return bytes_per_value == 0 ? dims / 8 : dims * bytes_per_value;
}

uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;

  if (abs_bits >= 0x7F800000u) {
    // Inf stays Inf; NaN stays a quiet NaN.
    return static_cast<uint16_t>(sign | (abs_bits > 0x7F800000u ? 0x7E00u : 0x7C00u));
  }
  if (abs_bits >= 0x477FF000u) {
    // At or above 65520 rounds past the largest half (65504) to Inf.
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero. Adding
    // 0.5 makes the float hardware round the mantissa to a multiple of 2^-24
    // (the subnormal step) with round-to-nearest-even.
    const float shifted = BitsToFloat(abs_bits) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3F000000u));
  }
  // Normal range: rebias the exponent (127 -> 15) and round 23 mantissa bits
  // to 10, ties to even; a mantissa carry correctly bumps the exponent.
  const uint32_t odd = (abs_bits >> 13) & 1u;
  const uint32_t rounded = abs_bits + 0xC8000FFFu + odd;
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1Fu) {
    return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  }
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

void EncodeRow(Format format, const float* values, size_t dims, uint8_t* out) {
  switch (format) {
    case Format::kFloat32:
      for (size_t i = 0; i < dims; ++i) {
        StoreLittleEndian32(FloatBits(values[i]), out + 4 * i);
      }
      return;
    case Format::kFloat16:
      for (size_t i = 0; i < dims; ++i) {
        StoreLittleEndian16(FloatToHalfBits(values[i]), out + 2 * i);
      }
      return;
    case Format::kInt8:
      for (size_t i = 0; i < dims; ++i) {
        out[i] = static_cast<uint8_t>(static_cast<int8_t>(QuantizeInt8(values[i])));
      }
      return;
    case Format::kUint8:
      for (size_t i = 0; i < dims; ++i) {
        out[i] = static_cast<uint8_t>(QuantizeInt8(values[i]) + 128);
      }
      return;
    case Format::kUbinary:
      for (size_t i = 0; i < dims / 8; ++i) {
        out[i] = SignBits(values + 8 * i);
      }
      return;
    case Format::kBinary:
      // Signed binary is the packed byte minus 128 as int8, which flips the
      // top bit of the unsigned byte.
      for (size_t i = 0; i < dims / 8; ++i) {
        out[i] = static_cast<uint8_t>(SignBits(values + 8 * i) ^ 0x80u);
      }
      return;
  }
}

}  // namespace embedding_serializer
