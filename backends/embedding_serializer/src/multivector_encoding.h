// Encodes one text of a late-interaction (ColBERT-style) model as a
// multi-vector row: uint32 count n | the n vectors its mask serves, in
// position order, each as EncodeRow writes it (docs/contract.md,
// "Multi-vector rows"). Pure functions without Triton types, so they are
// unit-tested directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "row_encoding.h"

namespace embedding_serializer {

inline constexpr size_t kMultiVectorCountBytes = 4;

// The number of positions of mask[0, positions) that are served vectors
// (mask != 0).
size_t ServedVectors(const int64_t* mask, size_t positions);

// Bytes of a row of `count` vectors of `dims` values in `format`, before any
// padding; a bit-packed format needs dims % 8 == 0.
size_t MultiVectorRowBytes(Format format, size_t dims, size_t count);

// Writes MultiVectorRowBytes(format, dims, ServedVectors(mask, positions))
// bytes to `out`: the count, then vectors[p * dims, (p + 1) * dims) in
// `format` for each position p where mask[p] != 0, in order. The count must
// fit uint32.
void EncodeMultiVectorRow(Format format, const float* vectors, const int64_t* mask,
                          size_t positions, size_t dims, uint8_t* out);

}  // namespace embedding_serializer
