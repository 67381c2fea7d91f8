// Adds a response's one output, uint8 rows [rows, row_bytes], in host memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

// Adds output `name` to `response` and points `bytes` at its buffer of
// rows * row_bytes bytes, which Triton owns.
ErrorPtr AddRowsOutput(TRITONBACKEND_Response* response, const char* name, size_t rows,
                       size_t row_bytes, uint8_t** bytes);

}  // namespace embedding_serializer
