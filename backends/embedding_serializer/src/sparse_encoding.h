// Encodes one row of a learned-sparse (SPLADE) encoder's activations as a
// sparse row: uint32 count n | n uint32 indices, ascending | n values, all
// little-endian (docs/contract.md, "Sparse rows"). Pure functions without
// Triton types, so they are unit-tested directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "row_encoding.h"

namespace embedding_serializer {

inline constexpr size_t kSparseCountBytes = 4;
inline constexpr size_t kSparseIndexBytes = 4;

// The formats a sparse row's values take, in the order row_formats.json's
// sparse.value_dtypes declares them (test/row_formats_test.cc checks it):
// a subset of the dense formats, so the values are written by EncodeRow.
inline constexpr Format kSparseValueFormats[] = {Format::kFloat32, Format::kFloat16};

// The indices of the entries of values[0, width) above 0, ascending. With
// `max_active`, only the max_active largest of them (ties: the lower index
// first), as sentence-transformers' SparseEncoder.encode(max_active_dims=k)
// keeps them. `width` must fit uint32 indices.
std::vector<uint32_t> ActiveIndices(const float* values, size_t width,
                                    std::optional<size_t> max_active);

// Bytes of a row of `active` entries, before any padding.
size_t SparseRowBytes(Format value_format, size_t active);

// Writes SparseRowBytes(value_format, indices.size()) bytes to `out`: the
// count, `indices` and values[index] of each index in `value_format`.
void EncodeSparseRow(Format value_format, const float* values,
                     const std::vector<uint32_t>& indices, uint8_t* out);

}  // namespace embedding_serializer
