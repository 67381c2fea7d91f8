// Serves one request for sparse rows: reads its options and ACTIVATIONS
// [N, V] and fills its response with SPARSE_BYTES [N, B], one sparse row per
// text, each zero-padded to the width B of the response's widest row.
#pragma once

#include <cstdint>

#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

// Adds SPARSE_BYTES to `response` and sets `rows` to the rows encoded; on
// error the caller sends `response` with that error instead.
ErrorPtr EncodeSparseRequest(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
                             uint64_t* rows);

}  // namespace embedding_serializer
