// What the serializer's config.pbtxt must declare. It is checked when the
// model loads, so a wrong configuration fails to load with a message naming
// the field instead of failing every request.
#pragma once

#include <string>
#include <string_view>

#include "input_gather.h"

namespace embedding_serializer {

inline constexpr const char* kEmbeddingInput = "EMBEDDING";
inline constexpr const char* kNormInput = "NORM";
inline constexpr const char* kBytesOutput = "EMBEDDING_BYTES";
inline constexpr const char* kActivationsInput = "ACTIVATIONS";
inline constexpr const char* kSparseBytesOutput = "SPARSE_BYTES";
inline constexpr const char* kTokenVectorsInput = "TOKEN_VECTORS";
inline constexpr const char* kVectorMaskInput = "VECTOR_MASK";
inline constexpr const char* kMultiVectorBytesOutput = "MULTIVECTOR_BYTES";
// The config parameter that chooses the kind of rows, and its values.
inline constexpr const char* kRowsParameter = "rows";
inline constexpr const char* kDenseRows = "dense";
inline constexpr const char* kSparseRows = "sparse";
inline constexpr const char* kMultiVectorRows = "multivector";

// Dense: EMBEDDING + NORM in, EMBEDDING_BYTES out. Sparse: a learned-sparse
// encoder's ACTIVATIONS in, SPARSE_BYTES out. Multi-vector: a late-interaction
// model's TOKEN_VECTORS + VECTOR_MASK in, MULTIVECTOR_BYTES out.
enum class RowKind { kDense, kSparse, kMultiVector };

struct ModelConfig {
  RowKind rows = RowKind::kDense;
  // EMBEDDING's declared data_type: the embedder's output type, which Triton
  // holds every request to.
  ElementType embedding_type = ElementType::kFloat32;
};

struct ConfigCheck {
  ModelConfig config;
  std::string error;  // empty when valid; otherwise names the field
};

// Reads the model configuration as Triton serializes it to JSON and checks
// max_batch_size and the parameter `rows` ("dense", the default, "sparse"
// or "multivector"; no other parameter). Dense rows need the inputs
// EMBEDDING (TYPE_FP32 or TYPE_FP16, dims [-1] or one fixed size) and NORM
// (TYPE_FP32, [1]) and the output EMBEDDING_BYTES (TYPE_UINT8, [-1]); sparse
// rows the input ACTIVATIONS (TYPE_FP32, [-1]) and the output SPARSE_BYTES
// (TYPE_UINT8, [-1]); multi-vector rows the inputs TOKEN_VECTORS (TYPE_FP32,
// [-1, -1]) and VECTOR_MASK (TYPE_INT64, [-1]) and the output
// MULTIVECTOR_BYTES (TYPE_UINT8, [-1]).
ConfigCheck CheckModelConfig(std::string_view config_json);

}  // namespace embedding_serializer
