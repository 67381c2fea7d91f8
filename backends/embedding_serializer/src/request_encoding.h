// Serves one request: reads its options and inputs and fills its response
// with one row of encoded bytes per embedding, dense, sparse or multi-vector
// as the model configuration declares.
#pragma once

#include <cstdint>

#include "model_config.h"
#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

// Adds EMBEDDING_BYTES (SPARSE_BYTES for sparse rows, MULTIVECTOR_BYTES for
// multi-vector rows) to `response` and sets `rows` to the rows encoded. On
// error the caller sends `response` with that error, which Triton then
// reports instead of any output.
ErrorPtr EncodeRequest(const ModelConfig& config, TRITONBACKEND_Request* request,
                       TRITONBACKEND_Response* response, uint64_t* rows);

}  // namespace embedding_serializer
