#include "sparse_encoding.h"

#include <algorithm>

namespace embedding_serializer {

std::vector<uint32_t> ActiveIndices(const float* values, size_t width,
                                    std::optional<size_t> max_active) {
  std::vector<uint32_t> active;
  for (size_t i = 0; i < width; ++i) {
    // NaN compares false, so it is never active.
    if (values[i] > 0.0f) {
      active.push_back(static_cast<uint32_t>(i));
    }
  }
  if (max_active && active.size() > *max_active) {
    // Largest first, ties by the lower index: a strict order, as no NaN is
    // left, so the kept set is the same on every platform.
    const auto larger = [values](uint32_t a, uint32_t b) {
      return values[a] > values[b] || (values[a] == values[b] && a < b);
    };
    const auto kept_end = active.begin() + static_cast<std::ptrdiff_t>(*max_active);
    std::nth_element(active.begin(), kept_end - 1, active.end(), larger);
    active.erase(kept_end, active.end());
    std::sort(active.begin(), active.end());
  }
  return active;
}

size_t SparseRowBytes(Format value_format, size_t active) {
  return kSparseCountBytes + active * kSparseIndexBytes +
         EncodedRowBytes(value_format, active);
}

void EncodeSparseRow(Format value_format, const float* values,
                     const std::vector<uint32_t>& indices, uint8_t* out) {
  StoreLittleEndian32(static_cast<uint32_t>(indices.size()), out);
  uint8_t* index_out = out + kSparseCountBytes;
  std::vector<float> kept;
  kept.reserve(indices.size());
  for (const uint32_t index : indices) {
    StoreLittleEndian32(index, index_out);
    index_out += kSparseIndexBytes;
    kept.push_back(values[index]);
  }
  EncodeRow(value_format, kept.data(), kept.size(), index_out);
}

}  // namespace embedding_serializer
