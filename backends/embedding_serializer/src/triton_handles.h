// Owning wrappers for the Triton handles the backend holds besides errors:
// each is given back to Triton exactly once, however the holder exits.
#pragma once

#include <memory>

#include "triton_api.h"
#include "triton_log.h"

namespace embedding_serializer {

struct MessageDeleter {
  void operator()(TRITONSERVER_Message* message) const noexcept {
    SERIALIZER_LOG_IF_ERROR(TRITONSERVER_MessageDelete(message), "failed to delete a message");
  }
};
using MessagePtr = std::unique_ptr<TRITONSERVER_Message, MessageDeleter>;

// A response not yet sent. Sending hands it to Triton (see SendResponse), so
// only a response that is never sent is deleted here.
struct ResponseDeleter {
  void operator()(TRITONBACKEND_Response* response) const noexcept {
    SERIALIZER_LOG_IF_ERROR(TRITONBACKEND_ResponseDelete(response),
                            "failed to delete a response");
  }
};
using ResponsePtr = std::unique_ptr<TRITONBACKEND_Response, ResponseDeleter>;

// A request the backend owns: from the moment ModelInstanceExecute commits
// to answering it until it is released.
struct RequestReleaser {
  void operator()(TRITONBACKEND_Request* request) const noexcept {
    SERIALIZER_LOG_IF_ERROR(
        TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL),
        "failed to release a request");
  }
};
using RequestPtr = std::unique_ptr<TRITONBACKEND_Request, RequestReleaser>;

}  // namespace embedding_serializer
