#include "execute.h"

#include <chrono>
#include <utility>
#include <vector>

#include "model_config.h"
#include "request_encoding.h"
#include "triton_error.h"
#include "triton_handles.h"
#include "triton_log.h"

namespace embedding_serializer {
namespace {

uint64_t NowNs() noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One request's response and what became of it.
struct Outcome {
  ResponsePtr response;
  ErrorPtr error;          // sent instead of the output when set
  uint64_t rows = 0;       // rows encoded
  bool succeeded = false;  // answered with its output
};

ErrorPtr ModelConfigOf(TRITONBACKEND_ModelInstance* instance, const ModelConfig** config) {
  TRITONBACKEND_Model* model = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ModelInstanceModel(instance, &model));
  void* state = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  *config = static_cast<const ModelConfig*>(state);
  return nullptr;
}

// Everything that can fail before the backend owns the requests: on error the
// requests stay Triton's, and Triton answers each one with the error.
ErrorPtr Prepare(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
                 uint32_t request_count, const ModelConfig** config,
                 std::vector<Outcome>* outcomes) noexcept {
  try {
    if (ErrorPtr error = ModelConfigOf(instance, config)) {
      return error;
    }
    outcomes->resize(request_count);
    for (uint32_t r = 0; r < request_count; ++r) {
      TRITONBACKEND_Response* response = nullptr;
      // Any responses made so far are deleted with `outcomes` on failure.
      SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ResponseNew(&response, requests[r]));
      (*outcomes)[r].response.reset(response);
    }
    return nullptr;
  } catch (...) {
    return CurrentExceptionAsError();
  }
}

void Encode(const ModelConfig& config, TRITONBACKEND_Request* request,
            Outcome* outcome) noexcept {
  try {
    outcome->error = EncodeRequest(config, request, outcome->response.get(), &outcome->rows);
  } catch (...) {
    outcome->error = CurrentExceptionAsError();
  }
}

// Sending hands the response to Triton whether or not the send succeeds.
bool Send(Outcome* outcome) noexcept {
  TRITONSERVER_Error* failure = TRITONBACKEND_ResponseSend(
      outcome->response.release(), TRITONSERVER_RESPONSE_COMPLETE_FINAL, outcome->error.get());
  const bool sent = failure == nullptr;
  SERIALIZER_LOG_IF_ERROR(failure, "failed to send a response");
  return sent;
}

}  // namespace

TRITONSERVER_Error* ExecuteRequests(TRITONBACKEND_ModelInstance* instance,
                                    TRITONBACKEND_Request** requests,
                                    uint32_t request_count) noexcept {
  const uint64_t exec_start_ns = NowNs();
  const ModelConfig* config = nullptr;
  std::vector<Outcome> outcomes;
  if (ErrorPtr error = Prepare(instance, requests, request_count, &config, &outcomes)) {
    return error.release();
  }

  // From here every request is ours: each gets exactly one response and is
  // released, and this function returns success.
  const uint64_t compute_start_ns = NowNs();
  for (uint32_t r = 0; r < request_count; ++r) {
    Encode(*config, requests[r], &outcomes[r]);
  }
  const uint64_t compute_end_ns = NowNs();

  // Sent before the statistics, which then count a failed send as a failure.
  for (Outcome& outcome : outcomes) {
    outcome.succeeded = Send(&outcome) && outcome.error == nullptr;
  }
  const uint64_t exec_end_ns = NowNs();

  uint64_t batch_rows = 0;
  for (uint32_t r = 0; r < request_count; ++r) {
    // Statistics refer to the request, so they go in before it is released.
    const RequestPtr request(requests[r]);
    SERIALIZER_LOG_IF_ERROR(
        TRITONBACKEND_ModelInstanceReportStatistics(instance, request.get(),
                                                    outcomes[r].succeeded, exec_start_ns,
                                                    compute_start_ns, compute_end_ns,
                                                    exec_end_ns),
        "failed to report request statistics");
    batch_rows += outcomes[r].succeeded ? outcomes[r].rows : 0;
  }
  // The batch is the rows actually served; a batch that served none is no
  // execution worth counting.
  if (batch_rows > 0) {
    SERIALIZER_LOG_IF_ERROR(
        TRITONBACKEND_ModelInstanceReportBatchStatistics(instance, batch_rows, exec_start_ns,
                                                         compute_start_ns, compute_end_ns,
                                                         exec_end_ns),
        "failed to report batch statistics");
  }
  return nullptr;
}

}  // namespace embedding_serializer
