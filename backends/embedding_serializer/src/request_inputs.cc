#include "request_inputs.h"

#include <string>
#include <string_view>
#include <utility>

#include "device_copy.h"

namespace embedding_serializer {
namespace {

TRITONSERVER_DataType TritonType(ElementType type) {
  return type == ElementType::kFloat16 ? TRITONSERVER_TYPE_FP16 : TRITONSERVER_TYPE_FP32;
}

const char* ConfigTypeName(ElementType type) {
  return type == ElementType::kFloat16 ? "TYPE_FP16" : "TYPE_FP32";
}

// An input's shape and its bytes in host memory, as one or more chunks.
struct HostInput {
  std::vector<int64_t> shape;
  std::vector<Chunk> chunks;
  // Host copies of GPU-resident buffers; each chunk above points into one,
  // and moving a vector keeps its bytes where they are.
  std::vector<std::vector<uint8_t>> host_copies;
};

// Reads input `name`, which must have `datatype` (`type_name` in the model
// configuration's words), with its buffers copied to host memory if needed.
ErrorPtr ReadHostInput(TRITONBACKEND_Request* request, const char* name,
                       TRITONSERVER_DataType datatype, const char* type_name,
                       HostInput* host_input) {
  TRITONBACKEND_Input* input = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  TRITONSERVER_DataType actual = TRITONSERVER_TYPE_INVALID;
  const int64_t* shape = nullptr;
  uint32_t dims_count = 0;
  uint32_t buffer_count = 0;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_InputProperties(
      input, nullptr, &actual, &shape, &dims_count, nullptr, &buffer_count));
  // Triton holds requests to the configuration; this guards the reading below.
  if (actual != datatype) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     std::string("input '") + name + "' must be " + type_name +
                         ", as the model configuration declares");
  }

  for (uint32_t index = 0; index < buffer_count; ++index) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    // In: the memory we prefer; out: where the buffer actually is.
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(
        input, index, &buffer, &size, &memory_type, &memory_type_id));
    if (memory_type == TRITONSERVER_MEMORY_GPU) {
      std::vector<uint8_t> host;
      const std::string copy_error =
          CopyDeviceToHost(buffer, static_cast<size_t>(size), memory_type_id, &host);
      if (!copy_error.empty()) {
        return MakeError(GpuInputSupported() ? TRITONSERVER_ERROR_INTERNAL
                                             : TRITONSERVER_ERROR_UNSUPPORTED,
                         std::string("input '") + name + "': " + copy_error);
      }
      host_input->host_copies.push_back(std::move(host));
      buffer = host_input->host_copies.back().data();
    }
    host_input->chunks.push_back(Chunk{buffer, static_cast<size_t>(size)});
  }
  host_input->shape.assign(shape, shape + dims_count);
  return nullptr;
}

ErrorPtr GatherError(const char* name, const std::string& gather_error) {
  return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                   std::string("input '") + name + "': " + gather_error);
}

}  // namespace

ErrorPtr ReadFloatInput(TRITONBACKEND_Request* request, const char* name,
                        ElementType declared, FloatTensor* tensor) {
  HostInput input;
  if (ErrorPtr error =
          ReadHostInput(request, name, TritonType(declared), ConfigTypeName(declared), &input)) {
    return error;
  }
  tensor->shape = std::move(input.shape);
  const std::string gather_error = GatherFloats(input.chunks, declared, &tensor->values);
  return gather_error.empty() ? nullptr : GatherError(name, gather_error);
}

ErrorPtr ReadInt64Input(TRITONBACKEND_Request* request, const char* name, Int64Tensor* tensor) {
  HostInput input;
  if (ErrorPtr error =
          ReadHostInput(request, name, TRITONSERVER_TYPE_INT64, "TYPE_INT64", &input)) {
    return error;
  }
  tensor->shape = std::move(input.shape);
  const std::string gather_error = GatherInt64s(input.chunks, &tensor->values);
  return gather_error.empty() ? nullptr : GatherError(name, gather_error);
}

ErrorPtr ReadParameters(TRITONBACKEND_Request* request,
                        std::vector<Parameter>* parameters) {
  uint32_t count = 0;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_RequestParameterCount(request, &count));
  for (uint32_t index = 0; index < count; ++index) {
    const char* key = nullptr;
    TRITONSERVER_ParameterType type = TRITONSERVER_PARAMETER_STRING;
    const void* value = nullptr;
    SERIALIZER_RETURN_IF_ERROR(
        TRITONBACKEND_RequestParameter(request, index, &key, &type, &value));
    switch (type) {
      case TRITONSERVER_PARAMETER_STRING:
        parameters->push_back({key, std::string_view(static_cast<const char*>(value))});
        break;
      case TRITONSERVER_PARAMETER_INT:
        parameters->push_back({key, *static_cast<const int64_t*>(value)});
        break;
      case TRITONSERVER_PARAMETER_BOOL:
        parameters->push_back({key, *static_cast<const bool*>(value)});
        break;
      case TRITONSERVER_PARAMETER_DOUBLE:
        parameters->push_back({key, *static_cast<const double*>(value)});
        break;
      case TRITONSERVER_PARAMETER_BYTES:
        // No option of ours is bytes-typed; an empty string still lets
        // ParseOptions report a wrongly typed known key.
        parameters->push_back({key, std::string_view()});
        break;
    }
  }
  return nullptr;
}

}  // namespace embedding_serializer
