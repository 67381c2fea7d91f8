// Triton entry points of the embedding serializer: float embeddings [N, D]
// (with each row's pre-normalization norm) in, one row of raw little-endian
// bytes per embedding out, in the format each request asks for; or, for a
// model configured for sparse rows, a learned-sparse encoder's activations
// [N, V] in, one sparse row per text out; or, for multi-vector rows, a
// late-interaction model's token vectors [N, T, D] and their mask [N, T] in,
// one row of the served vectors per text out. Modelled on Triton's
// recommended example backend; no exception crosses the C API.
#include <cstdint>
#include <memory>
#include <string>

#include "execute.h"
#include "model_config.h"
#include "triton_api.h"
#include "triton_error.h"
#include "triton_log.h"
#include "triton_model_config.h"

namespace embedding_serializer {
namespace {

ErrorPtr CheckApiVersion() {
  uint32_t major = 0;
  uint32_t minor = 0;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ApiVersion(&major, &minor));
  // Later 1.x minors only add functions.
  if (major != EMBEDDING_SERIALIZER_TRITONBACKEND_API_MAJOR ||
      minor < EMBEDDING_SERIALIZER_TRITONBACKEND_API_MINOR) {
    return MakeError(TRITONSERVER_ERROR_UNSUPPORTED,
                     "embedding_serializer needs TRITONBACKEND API " +
                         std::to_string(EMBEDDING_SERIALIZER_TRITONBACKEND_API_MAJOR) + "." +
                         std::to_string(EMBEDDING_SERIALIZER_TRITONBACKEND_API_MINOR) +
                         "+, the server offers " + std::to_string(major) + "." +
                         std::to_string(minor));
  }
  return nullptr;
}

// The model's state is its checked configuration, which Triton holds from
// ModelInitialize to ModelFinalize.
ErrorPtr InitializeModel(TRITONBACKEND_Model* model) {
  auto config = std::make_unique<ModelConfig>();
  if (ErrorPtr error = LoadModelConfig(model, config.get())) {
    return error;
  }
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ModelSetState(model, config.get()));
  const ModelConfig* held = config.release();  // freed by FinalizeModel
  SERIALIZER_LOG(TRITONSERVER_LOG_INFO,
                 held->rows == RowKind::kSparse
                     ? "embedding_serializer writes sparse rows from ACTIVATIONS"
                 : held->rows == RowKind::kMultiVector
                     ? "embedding_serializer writes multi-vector rows from TOKEN_VECTORS"
                 : held->embedding_type == ElementType::kFloat16
                     ? "embedding_serializer reads EMBEDDING as TYPE_FP16"
                     : "embedding_serializer reads EMBEDDING as TYPE_FP32");
  return nullptr;
}

ErrorPtr FinalizeModel(TRITONBACKEND_Model* model) {
  void* state = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ModelState(model, &state));
  // Deletes the configuration InitializeModel handed to Triton.
  const std::unique_ptr<ModelConfig> config(static_cast<ModelConfig*>(state));
  return nullptr;
}

template <typename Body>
TRITONSERVER_Error* Guarded(Body body) noexcept {
  try {
    return body().release();
  } catch (...) {
    return CurrentExceptionAsError().release();
  }
}

}  // namespace
}  // namespace embedding_serializer

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  return embedding_serializer::Guarded(embedding_serializer::CheckApiVersion);
}

TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return embedding_serializer::Guarded(
      [model] { return embedding_serializer::InitializeModel(model); });
}

TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return embedding_serializer::Guarded(
      [model] { return embedding_serializer::FinalizeModel(model); });
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count) {
  return embedding_serializer::ExecuteRequests(instance, requests, request_count);
}

}  // extern "C"
