// Triton entry points of the embedding serializer: float embeddings [N, D]
// (with each row's pre-normalization norm) in, one row of raw little-endian
// bytes per embedding out, in the format each request asks for.
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_copy.h"
#include "input_gather.h"
#include "request_options.h"
#include "row_encoding.h"
#include "triton_api.h"

namespace embedding_serializer {
namespace {

constexpr uint32_t kApiMajor = 1;
// TRITONBACKEND API of Triton 2.51, the release these declarations follow and
// the backend is tested against; later 1.x minors only add functions.
constexpr uint32_t kMinApiMinor = 19;
constexpr const char* kEmbeddingInput = "EMBEDDING";
constexpr const char* kNormInput = "NORM";
constexpr const char* kBytesOutput = "EMBEDDING_BYTES";

struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* error) const {
    TRITONSERVER_ErrorDelete(error);
  }
};
using ErrorPtr = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

#define RETURN_IF_TRITON_ERROR(call)     \
  do {                                   \
    if (TRITONSERVER_Error* e = (call)) { \
      return ErrorPtr(e);                \
    }                                    \
  } while (false)

ErrorPtr MakeError(TRITONSERVER_Error_Code code, const std::string& message) {
  return ErrorPtr(TRITONSERVER_ErrorNew(code, message.c_str()));
}

void Log(TRITONSERVER_LogLevel level, const std::string& message) {
  ErrorPtr(TRITONSERVER_LogMessage(level, __FILE__, __LINE__, message.c_str()));
}

void LogIfError(TRITONSERVER_Error* raw, const char* context) {
  ErrorPtr error(raw);
  if (error) {
    Log(TRITONSERVER_LOG_ERROR,
        std::string(context) + ": " + TRITONSERVER_ErrorMessage(error.get()));
  }
}

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Releases the request exactly once, however the code that serves it exits.
class OwnedRequest {
 public:
  explicit OwnedRequest(TRITONBACKEND_Request* request) : request_(request) {}
  OwnedRequest(const OwnedRequest&) = delete;
  OwnedRequest& operator=(const OwnedRequest&) = delete;
  ~OwnedRequest() {
    LogIfError(
        TRITONBACKEND_RequestRelease(request_, TRITONSERVER_REQUEST_RELEASE_ALL),
        "failed to release request");
  }
  TRITONBACKEND_Request* get() const { return request_; }

 private:
  TRITONBACKEND_Request* request_;
};

// Deletes a response that was never sent. Sending hands it to Triton whether
// or not the send succeeds, so it is never touched afterwards.
class PendingResponse {
 public:
  explicit PendingResponse(TRITONBACKEND_Response* response) : response_(response) {}
  PendingResponse(const PendingResponse&) = delete;
  PendingResponse& operator=(const PendingResponse&) = delete;
  ~PendingResponse() {
    if (response_ != nullptr) {
      LogIfError(TRITONBACKEND_ResponseDelete(response_), "failed to delete a response");
    }
  }
  TRITONBACKEND_Response* get() const { return response_; }

  // Triton copies the error's code and message; `error` stays the caller's.
  void Send(TRITONSERVER_Error* error) {
    TRITONBACKEND_Response* response = response_;
    response_ = nullptr;
    LogIfError(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error),
               "failed to send a response");
  }

 private:
  TRITONBACKEND_Response* response_;
};

struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

ErrorPtr ReadFloatInput(TRITONBACKEND_Request* request, const char* name,
                        FloatTensor* tensor) {
  TRITONBACKEND_Input* input = nullptr;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestInput(request, name, &input));
  TRITONSERVER_DataType datatype;
  const int64_t* shape = nullptr;
  uint32_t dims_count = 0;
  uint32_t buffer_count = 0;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_InputProperties(
      input, nullptr, &datatype, &shape, &dims_count, nullptr, &buffer_count));
  ElementType element_type;
  if (datatype == TRITONSERVER_TYPE_FP32) {
    element_type = ElementType::kFloat32;
  } else if (datatype == TRITONSERVER_TYPE_FP16) {
    element_type = ElementType::kFloat16;
  } else {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     std::string("input '") + name + "' must be FP32 or FP16");
  }

  std::vector<Chunk> chunks;
  // Host copies of GPU-resident buffers; each chunk below points into one,
  // and moving a vector keeps its bytes where they are.
  std::vector<std::vector<uint8_t>> host_copies;
  for (uint32_t index = 0; index < buffer_count; ++index) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    // In: the memory we prefer; out: where the buffer actually is.
    TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
    int64_t memory_type_id = 0;
    RETURN_IF_TRITON_ERROR(TRITONBACKEND_InputBuffer(
        input, index, &buffer, &size, &memory_type, &memory_type_id));
    if (memory_type == TRITONSERVER_MEMORY_GPU) {
      std::vector<uint8_t> host;
      const std::string copy_error = CopyDeviceToHost(
          buffer, static_cast<size_t>(size), memory_type_id, &host);
      if (!copy_error.empty()) {
        return MakeError(GpuInputSupported() ? TRITONSERVER_ERROR_INTERNAL
                                             : TRITONSERVER_ERROR_UNSUPPORTED,
                         std::string("input '") + name + "': " + copy_error);
      }
      host_copies.push_back(std::move(host));
      buffer = host_copies.back().data();
    }
    chunks.push_back(Chunk{buffer, static_cast<size_t>(size)});
  }

  tensor->shape.assign(shape, shape + dims_count);
  const std::string gather_error =
      GatherFloats(chunks, element_type, &tensor->values);
  if (!gather_error.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     std::string("input '") + name + "': " + gather_error);
  }
  return nullptr;
}

ErrorPtr ReadParameters(TRITONBACKEND_Request* request,
                        std::vector<Parameter>* parameters) {
  uint32_t count = 0;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_RequestParameterCount(request, &count));
  for (uint32_t index = 0; index < count; ++index) {
    const char* key = nullptr;
    TRITONSERVER_ParameterType type;
    const void* value = nullptr;
    RETURN_IF_TRITON_ERROR(
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

// Fills `response` with the encoded rows of `request`; on error the caller
// sends the returned error instead.
ErrorPtr BuildResponse(TRITONBACKEND_Request* request,
                       TRITONBACKEND_Response* response, uint64_t* rows_out) {
  std::vector<Parameter> parameters;
  if (ErrorPtr error = ReadParameters(request, &parameters)) {
    return error;
  }
  const ParsedOptions parsed = ParseOptions(parameters);
  if (!parsed.error.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, parsed.error);
  }

  FloatTensor embedding;
  if (ErrorPtr error = ReadFloatInput(request, kEmbeddingInput, &embedding)) {
    return error;
  }
  FloatTensor norm;
  if (ErrorPtr error = ReadFloatInput(request, kNormInput, &norm)) {
    return error;
  }
  if (embedding.shape.size() != 2 || embedding.shape[0] < 0 ||
      embedding.shape[1] < 1) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "input 'EMBEDDING' must have shape [N, D]");
  }
  const auto rows = static_cast<size_t>(embedding.shape[0]);
  const auto model_dims = static_cast<size_t>(embedding.shape[1]);
  if (embedding.values.size() != rows * model_dims ||
      norm.values.size() != rows) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "inputs 'EMBEDDING' and 'NORM' disagree with their "
                     "shapes or with each other's row count");
  }

  const RequestOptions& options = parsed.options;
  const std::string problem = ValidateOptions(options, model_dims);
  if (!problem.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, problem);
  }
  const size_t kept = OutputDims(options, model_dims);
  const size_t row_bytes = EncodedRowBytes(options.format, kept);

  const int64_t output_shape[2] = {static_cast<int64_t>(rows),
                                   static_cast<int64_t>(row_bytes)};
  TRITONBACKEND_Output* output = nullptr;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_ResponseOutput(
      response, &output, kBytesOutput, TRITONSERVER_TYPE_UINT8, output_shape, 2));
  void* buffer = nullptr;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  RETURN_IF_TRITON_ERROR(TRITONBACKEND_OutputBuffer(
      output, &buffer, rows * row_bytes, &memory_type, &memory_type_id));
  if (memory_type == TRITONSERVER_MEMORY_GPU) {
    return MakeError(TRITONSERVER_ERROR_INTERNAL,
                     "output buffer was allocated in GPU memory");
  }

  auto* out = static_cast<uint8_t*>(buffer);
  std::vector<float> row(kept);
  for (size_t r = 0; r < rows; ++r) {
    ApplyOptions(options, embedding.values.data() + r * model_dims, model_dims,
                 norm.values[r], row.data());
    EncodeRow(options.format, row.data(), kept, out + r * row_bytes);
  }
  *rows_out = rows;
  return nullptr;
}

// Answers and releases one request; returns the rows it encoded (0 on error).
uint64_t ServeRequest(TRITONBACKEND_ModelInstance* instance,
                      TRITONBACKEND_Request* raw_request) {
  const uint64_t start_ns = NowNs();
  OwnedRequest request(raw_request);
  TRITONBACKEND_Response* raw_response = nullptr;
  if (TRITONSERVER_Error* raw = TRITONBACKEND_ResponseNew(&raw_response, request.get())) {
    LogIfError(raw, "failed to create a response");
    LogIfError(TRITONBACKEND_ModelInstanceReportStatistics(
                   instance, request.get(), false, start_ns, start_ns,
                   start_ns, start_ns),
               "failed to report request statistics");
    return 0;
  }
  PendingResponse response(raw_response);

  uint64_t rows = 0;
  ErrorPtr error;
  try {
    error = BuildResponse(request.get(), response.get(), &rows);
  } catch (const std::exception& exception) {
    error = MakeError(TRITONSERVER_ERROR_INTERNAL, exception.what());
  } catch (...) {
    error = MakeError(TRITONSERVER_ERROR_INTERNAL, "unknown failure");
  }
  const uint64_t end_ns = NowNs();
  // Statistics refer to the request, so they go in before it is released.
  LogIfError(TRITONBACKEND_ModelInstanceReportStatistics(
                 instance, request.get(), error == nullptr, start_ns, start_ns,
                 end_ns, end_ns),
             "failed to report request statistics");
  response.Send(error.get());
  return error ? 0 : rows;
}

}  // namespace
}  // namespace embedding_serializer

extern "C" {

TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  using namespace embedding_serializer;
  uint32_t major = 0;
  uint32_t minor = 0;
  if (TRITONSERVER_Error* error = TRITONBACKEND_ApiVersion(&major, &minor)) {
    return error;
  }
  if (major != kApiMajor || minor < kMinApiMinor) {
    const std::string message =
        "embedding_serializer needs TRITONBACKEND API " +
        std::to_string(kApiMajor) + "." + std::to_string(kMinApiMinor) +
        "+, the server offers " + std::to_string(major) + "." +
        std::to_string(minor);
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_UNSUPPORTED, message.c_str());
  }
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count) {
  using namespace embedding_serializer;
  // From here every request is ours: ServeRequest answers and releases each
  // one exactly once, so this function never returns an error.
  const uint64_t start_ns = NowNs();
  uint64_t batch_rows = 0;
  for (uint32_t i = 0; i < request_count; ++i) {
    batch_rows += ServeRequest(instance, requests[i]);
  }
  const uint64_t end_ns = NowNs();
  if (batch_rows > 0) {
    LogIfError(TRITONBACKEND_ModelInstanceReportBatchStatistics(
                   instance, batch_rows, start_ns, start_ns, end_ns, end_ns),
               "failed to report batch statistics");
  }
  return nullptr;
}

}  // extern "C"
