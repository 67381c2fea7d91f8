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

struct ModelConfig {
  // EMBEDDING's declared data_type: the embedder's output type, which Triton
  // holds every request to.
  ElementType embedding_type = ElementType::kFloat32;
};

struct ConfigCheck {
  ModelConfig config;
  std::string error;  // empty when valid; otherwise names the field
};

// Reads the model configuration as Triton serializes it to JSON and checks
// max_batch_size, the inputs EMBEDDING (TYPE_FP32 or TYPE_FP16, dims [-1] or
// one fixed size) and NORM (TYPE_FP32, [1]) and the output EMBEDDING_BYTES
// (TYPE_UINT8, [-1]).
ConfigCheck CheckModelConfig(std::string_view config_json);

}  // namespace embedding_serializer
