// Reads a model's configuration from Triton and checks it (model_config.h),
// when the model loads.
#pragma once

#include "model_config.h"
#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

// INVALID_ARG, with the message naming the field, for a configuration the
// serializer cannot serve.
ErrorPtr LoadModelConfig(TRITONBACKEND_Model* model, ModelConfig* config);

}  // namespace embedding_serializer
