// Joins an input tensor that Triton may deliver in several buffers into one
// float32 (or int64) array. An element may straddle two buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace embedding_serializer {

enum class ElementType { kFloat32, kFloat16 };

struct Chunk {
  const void* data;
  size_t size;
};

size_t ElementBytes(ElementType type);

// Appends the chunks' elements to `out` as float32, reading each element in
// the host's byte order (how Triton holds tensors in memory). Returns an
// error message if the total size is not a whole number of elements.
std::string GatherFloats(const std::vector<Chunk>& chunks, ElementType type,
                         std::vector<float>* out);

// The same for int64 elements (a multi-vector model's VECTOR_MASK).
std::string GatherInt64s(const std::vector<Chunk>& chunks, std::vector<int64_t>* out);

}  // namespace embedding_serializer
