#include "sparse_request_encoding.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model_config.h"
#include "request_inputs.h"
#include "response_output.h"
#include "sparse_encoding.h"
#include "sparse_options.h"

namespace embedding_serializer {

ErrorPtr EncodeSparseRequest(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
                             uint64_t* rows_out) {
  std::vector<Parameter> parameters;
  if (ErrorPtr error = ReadParameters(request, &parameters)) {
    return error;
  }
  const ParsedSparseOptions parsed = ParseSparseOptions(parameters);
  if (!parsed.error.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, parsed.error);
  }

  FloatTensor activations;
  if (ErrorPtr error = ReadFloatInput(request, kActivationsInput, ElementType::kFloat32,
                                      &activations)) {
    return error;
  }
  if (activations.shape.size() != 2 || activations.shape[0] < 0 || activations.shape[1] < 1) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "input 'ACTIVATIONS' must have shape [N, V]");
  }
  const auto rows = static_cast<size_t>(activations.shape[0]);
  const auto vocab_size = static_cast<size_t>(activations.shape[1]);
  if (activations.values.size() != rows * vocab_size) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "input 'ACTIVATIONS' disagrees with its shape");
  }
  // Indices are written as uint32.
  if (vocab_size - 1 > std::numeric_limits<uint32_t>::max()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG,
                     "input 'ACTIVATIONS' is wider than uint32 indices can address");
  }

  const SparseOptions& options = parsed.options;
  const std::string problem = ValidateSparseOptions(options, vocab_size);
  if (!problem.empty()) {
    return MakeError(TRITONSERVER_ERROR_INVALID_ARG, problem);
  }
  const std::optional<size_t> max_active =
      options.max_active_dims ? std::optional<size_t>(*options.max_active_dims) : std::nullopt;

  // The output's shape is [N, B], so every row's entries are chosen before
  // the widest row fixes B.
  std::vector<std::vector<uint32_t>> active(rows);
  size_t row_bytes = 0;
  for (size_t r = 0; r < rows; ++r) {
    active[r] = ActiveIndices(activations.values.data() + r * vocab_size, vocab_size, max_active);
    row_bytes = std::max(row_bytes, SparseRowBytes(options.value_format, active[r].size()));
  }

  uint8_t* out = nullptr;
  if (ErrorPtr error = AddRowsOutput(response, kSparseBytesOutput, rows, row_bytes, &out)) {
    return error;
  }
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* row = out + r * row_bytes;
    EncodeSparseRow(options.value_format, activations.values.data() + r * vocab_size, active[r],
                    row);
    std::fill(row + SparseRowBytes(options.value_format, active[r].size()), row + row_bytes, 0);
  }
  *rows_out = rows;
  return nullptr;
}

}  // namespace embedding_serializer
