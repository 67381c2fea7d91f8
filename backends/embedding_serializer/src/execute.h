// TRITONBACKEND_ModelInstanceExecute's work: a batch of requests in, one
// response per request out, statistics reported, requests released.
#pragma once

#include <cstdint>

#include "triton_api.h"

namespace embedding_serializer {

TRITONSERVER_Error* ExecuteRequests(TRITONBACKEND_ModelInstance* instance,
                                    TRITONBACKEND_Request** requests,
                                    uint32_t request_count) noexcept;

}  // namespace embedding_serializer
