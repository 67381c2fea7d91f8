#include "request_encoding.h"

#include <string>
#include <vector>

#include "multivector_request_encoding.h"
#include "request_inputs.h"
#include "request_options.h"
#include "response_output.h"
#include "row_encoding.h"
#include "sparse_request_encoding.h"

namespace embedding_serializer {
namespace {

ErrorPtr EncodeDenseRequest(const ModelConfig& config, TRITONBACKEND_Request* request,
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

  uint8_t* out = nullptr;
  if (ErrorPtr error = AddRowsOutput(response, kBytesOutput, rows, row_bytes, &out)) {
    return error;
  }
  std::vector<float> row(kept);
  for (size_t r = 0; r < rows; ++r) {
    ApplyOptions(options, embedding.values.data() + r * model_dims, model_dims,
                 norm.values[r], row.data());
    EncodeRow(options.format, row.data(), kept, out + r * row_bytes);
  }
  *rows_out = rows;
  return nullptr;
}

}  // namespace

ErrorPtr EncodeRequest(const ModelConfig& config, TRITONBACKEND_Request* request,
                       TRITONBACKEND_Response* response, uint64_t* rows) {
  switch (config.rows) {
    case RowKind::kSparse:
      return EncodeSparseRequest(request, response, rows);
    case RowKind::kMultiVector:
      return EncodeMultiVectorRequest(request, response, rows);
    case RowKind::kDense:
      break;
  }
  return EncodeDenseRequest(config, request, response, rows);
}

}  // namespace embedding_serializer
