// Serves one request for multi-vector rows: reads its options,
// TOKEN_VECTORS [N, T, D] and VECTOR_MASK [N, T] and fills its response with
// MULTIVECTOR_BYTES [N, B], one multi-vector row per text, each zero-padded
// to the width B of the response's widest row. T and D are the request's
// own: nothing is assumed to be shared with other requests of the batch.
#pragma once

#include <cstdint>

#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

// Adds MULTIVECTOR_BYTES to `response` and sets `rows` to the rows encoded;
// on error the caller sends `response` with that error instead.
ErrorPtr EncodeMultiVectorRequest(TRITONBACKEND_Request* request,
                                  TRITONBACKEND_Response* response, uint64_t* rows);

}  // namespace embedding_serializer
