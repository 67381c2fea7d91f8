// What one request asks of the serializer (format, Matryoshka dimensions,
// normalization), parsed from its request parameters and applied to a row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "request_parameter.h"
#include "row_encoding.h"

namespace embedding_serializer {

struct RequestOptions {
  Format format = Format::kFloat32;
  std::optional<int64_t> dimensions;  // unset: all of the model's dimensions
  bool normalize = true;
};

struct ParsedOptions {
  RequestOptions options;
  // Empty on success; otherwise "invalid_parameter '<key>': <detail>".
  std::string error;
};

// Reads `dtype`, `dimensions` and `normalize`; other keys are left to other
// pipeline stages, which see the same parameters in an ensemble.
ParsedOptions ParseOptions(const std::vector<Parameter>& parameters);

// Reads a `dtype` parameter as one of kFormats; on failure returns false and
// sets `error` as ParsedOptions::error has it. Multi-vector rows take the
// dense dtypes, with the same messages.
bool ParseDtype(const Parameter& parameter, Format* format, std::string* error);

// The refusal, under parameter `key`, of a bit-packed format for rows of
// `dims` values, which are not whole bytes unless dims % 8 == 0.
std::string NotWholeBytes(std::string_view key, size_t dims);

// Checks options against the model's embedding width; returns an error
// message as ParsedOptions::error has it, or an empty string.
std::string ValidateOptions(const RequestOptions& options, size_t model_dims);

// Number of dimensions a row keeps under validated `options`.
size_t OutputDims(const RequestOptions& options, size_t model_dims);

// Turns one model output row (unit length, with its pre-normalization L2
// norm) into the row the client asked for: the first OutputDims() values,
// re-normalized when truncated, or scaled back by `norm` when
// normalize=false. `out` holds OutputDims() floats.
void ApplyOptions(const RequestOptions& options, const float* unit_row,
                  size_t model_dims, float norm, float* out);

}  // namespace embedding_serializer
