#include "triton_model_config.h"

#include <string_view>

#include "triton_handles.h"

namespace embedding_serializer {
namespace {

// The only configuration format Triton offers backends.
constexpr uint32_t kConfigVersion = 1;

}  // namespace

ErrorPtr LoadModelConfig(TRITONBACKEND_Model* model, ModelConfig* config) {
  TRITONSERVER_Message* raw = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ModelConfig(model, kConfigVersion, &raw));
  const MessagePtr message(raw);
  const char* json = nullptr;
  size_t size = 0;
  SERIALIZER_RETURN_IF_ERROR(
      TRITONSERVER_MessageSerializeToJson(message.get(), &json, &size));
  const ConfigCheck check = CheckModelConfig(std::string_view(json, size));
  if (!check.error.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, check.error);
  }
  *config = check.config;
  return nullptr;
}

}  // namespace embedding_serializer
