#include "multivector_request_encoding.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model_config.h"
#include "multivector_encoding.h"
#include "multivector_options.h"
#include "request_inputs.h"
#include "response_output.h"

namespace embedding_serializer {
namespace {

// a * b, or nullopt where it would overflow: the shape comes from the
// request, so its product is not trusted to fit.
std::optional<size_t> Product(size_t a, size_t b) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a) {
    return std::nullopt;
  }
  return a * b;
}

// The request's vectors and mask, checked against each other.
struct MultiVectorInputs {
  FloatTensor vectors;  // [N, T, D]
  Int64Tensor mask;     // [N, T]
  size_t rows = 0;
  size_t positions = 0;
  size_t dims = 0;
};

ErrorPtr InvalidInput(const std::string& message) {
  return MakeError(TRITONSERVER_ERROR_INVALID_ARG, message);
}

ErrorPtr ReadMultiVectorInputs(TRITONBACKEND_Request* request, MultiVectorInputs* inputs) {
  if (ErrorPtr error = ReadFloatInput(request, kTokenVectorsInput, ElementType::kFloat32,
                                      &inputs->vectors)) {
    return error;
  }
  if (ErrorPtr error = ReadInt64Input(request, kVectorMaskInput, &inputs->mask)) {
    return error;
  }
  const std::vector<int64_t>& shape = inputs->vectors.shape;
  if (shape.size() != 3 || shape[0] < 0 || shape[1] < 0 || shape[2] < 1) {
    return InvalidInput("input 'TOKEN_VECTORS' must have shape [N, T, D]");
  }
  inputs->rows = static_cast<size_t>(shape[0]);
  inputs->positions = static_cast<size_t>(shape[1]);
  inputs->dims = static_cast<size_t>(shape[2]);
  const std::optional<size_t> mask_size = Product(inputs->rows, inputs->positions);
  const std::optional<size_t> vectors_size =
      mask_size ? Product(*mask_size, inputs->dims) : std::nullopt;
  if (!vectors_size || inputs->vectors.values.size() != *vectors_size) {
    return InvalidInput("input 'TOKEN_VECTORS' disagrees with its shape");
  }
  const std::vector<int64_t> mask_shape = {shape[0], shape[1]};
  if (inputs->mask.shape != mask_shape || inputs->mask.values.size() != *mask_size) {
    return InvalidInput(
        "input 'VECTOR_MASK' must have shape [N, T], the first two of 'TOKEN_VECTORS' [N, T, D]");
  }
  // The count is written as uint32, and a row counts at most T vectors.
  if (inputs->positions > std::numeric_limits<uint32_t>::max()) {
    return InvalidInput("input 'TOKEN_VECTORS' has more positions than a uint32 count holds");
  }
  return nullptr;
}

}  // namespace

ErrorPtr EncodeMultiVectorRequest(TRITONBACKEND_Request* request,
                                  TRITONBACKEND_Response* response, uint64_t* rows_out) {
  std::vector<Parameter> parameters;
  if (ErrorPtr error = ReadParameters(request, &parameters)) {
    return error;
  }
  const ParsedMultiVectorOptions parsed = ParseMultiVectorOptions(parameters);
  if (!parsed.error.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, parsed.error);
  }

  MultiVectorInputs inputs;
  if (ErrorPtr error = ReadMultiVectorInputs(request, &inputs)) {
    return error;
  }
  const Format format = parsed.options.format;
  const std::string problem = ValidateMultiVectorOptions(parsed.options, inputs.dims);
  if (!problem.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, problem);
  }

  // The output's shape is [N, B], so every row's count is known before the
  // widest row fixes B.
  const size_t positions = inputs.positions;
  const int64_t* mask = inputs.mask.values.data();
  size_t row_bytes = 0;
  for (size_t r = 0; r < inputs.rows; ++r) {
    const size_t served = ServedVectors(mask + r * positions, positions);
    row_bytes = std::max(row_bytes, MultiVectorRowBytes(format, inputs.dims, served));
  }

  uint8_t* out = nullptr;
  if (ErrorPtr error =
          AddRowsOutput(response, kMultiVectorBytesOutput, inputs.rows, row_bytes, &out)) {
    return error;
  }
  const float* vectors = inputs.vectors.values.data();
  const size_t text_values = positions * inputs.dims;
  for (size_t r = 0; r < inputs.rows; ++r) {
    uint8_t* row = out + r * row_bytes;
    const int64_t* row_mask = mask + r * positions;
    EncodeMultiVectorRow(format, vectors + r * text_values, row_mask, positions, inputs.dims, row);
    const size_t written =
        MultiVectorRowBytes(format, inputs.dims, ServedVectors(row_mask, positions));
    std::fill(row + written, row + row_bytes, 0);
  }
  *rows_out = inputs.rows;
  return nullptr;
}

}  // namespace embedding_serializer
