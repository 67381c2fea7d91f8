#include "input_gather.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "row_encoding.h"

namespace embedding_serializer {
namespace {

float DecodeElement(const uint8_t* bytes, ElementType type) {
  if (type == ElementType::kFloat16) {
    uint16_t bits;
    std::memcpy(&bits, bytes, sizeof(bits));
    return HalfBitsToFloat(bits);
  }
  float value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

// The widest element any gather reads (int64).
constexpr size_t kMaxElementBytes = 8;

// Appends decode(bytes) of each `element_bytes`-byte element of the chunks
// to `out`; the float and int64 gathers differ only in `decode`.
template <typename T, typename Decode>
std::string Gather(const std::vector<Chunk>& chunks, size_t element_bytes, Decode decode,
                   std::vector<T>* out) {
  size_t total = 0;
  for (const Chunk& chunk : chunks) {
    total += chunk.size;
  }
  if (total % element_bytes != 0) {
    return "input holds " + std::to_string(total) +
           " bytes, not a whole number of " + std::to_string(element_bytes) +
           "-byte elements";
  }
  out->reserve(out->size() + total / element_bytes);

  // Bytes of an element that began in an earlier chunk.
  std::array<uint8_t, kMaxElementBytes> pending{};
  size_t pending_size = 0;
  for (const Chunk& chunk : chunks) {
    const auto* bytes = static_cast<const uint8_t*>(chunk.data);
    size_t offset = 0;
    if (pending_size > 0) {
      offset = std::min(element_bytes - pending_size, chunk.size);
      std::memcpy(pending.data() + pending_size, bytes, offset);
      pending_size += offset;
      if (pending_size == element_bytes) {
        out->push_back(decode(pending.data()));
        pending_size = 0;
      }
    }
    const size_t whole = (chunk.size - offset) / element_bytes;
    for (size_t i = 0; i < whole; ++i) {
      out->push_back(decode(bytes + offset));
      offset += element_bytes;
    }
    // Fewer than element_bytes remain; pending is empty unless this chunk
    // was used up above, in which case nothing remains.
    const size_t rest = chunk.size - offset;
    if (rest > 0) {
      std::memcpy(pending.data(), bytes + offset, rest);
      pending_size = rest;
    }
  }
  return {};
}

}  // namespace

size_t ElementBytes(ElementType type) {
  return type == ElementType::kFloat16 ? 2 : 4;
}

std::string GatherFloats(const std::vector<Chunk>& chunks, ElementType type,
                         std::vector<float>* out) {
  const auto decode = [type](const uint8_t* bytes) { return DecodeElement(bytes, type); };
  return Gather(chunks, ElementBytes(type), decode, out);
}

std::string GatherInt64s(const std::vector<Chunk>& chunks, std::vector<int64_t>* out) {
  const auto decode = [](const uint8_t* bytes) {
    int64_t value;
    std::memcpy(&value, bytes, sizeof(value));
    return value;
  };
  return Gather(chunks, sizeof(int64_t), decode, out);
}

}  // namespace embedding_serializer
