#include "request_encoding.h"

#include <string>
#include <vector>

#include "request_inputs.h"
#include "request_options.h"
#include "row_encoding.h"

namespace embedding_serializer {

ErrorPtr EncodeRequest(const ModelConfig& config, TRITONBACKEND_Request* request,
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
  if (ErrorPtr error =
          ReadFloatInput(request, kEmbeddingInput, config.embedding_type, &embedding)) {
    return error;
  }
  FloatTensor norm;
  if (ErrorPtr error = ReadFloatInput(request, kNormInput, ElementType::kFloat32, &norm)) {
    return error;
  }
  if (embedding.shape.size() != 2 || embedding.shape[0] < 0 || embedding.shape[1] < 1) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "input 'EMBEDDING' must have shape [N, D]");
  }
  const auto rows = static_cast<size_t>(embedding.shape[0]);
  const auto model_dims = static_cast<size_t>(embedding.shape[1]);
  if (embedding.values.size() != rows * model_dims || norm.values.size() != rows) {
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
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(
      response, &output, kBytesOutput, TRITONSERVER_TYPE_UINT8, output_shape, 2));
  void* buffer = nullptr;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(
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

}  // namespace embedding_serializer
