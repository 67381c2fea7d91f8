// What one request asks of the sparse serializer (value dtype, top-k),
// parsed from its request parameters. The names, defaults and messages are
// declared in row_formats.json's "sparse" section (test/row_formats_test.cc).
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

inline constexpr std::string_view kSparseOptionNames[] = {"dtype", "max_active_dims"};
// The dense options that sparse rows do not take: refused by name rather
// than ignored, so that a client learns its `dimensions` had no effect.
inline constexpr std::string_view kDenseOnlyOptions[] = {"dimensions", "normalize"};

struct SparseOptions {
  Format value_format = Format::kFloat32;  // one of kSparseValueFormats
  std::optional<int64_t> max_active_dims;  // unset: every active entry
};

struct ParsedSparseOptions {
  SparseOptions options;
  // Empty on success; otherwise "invalid_parameter '<key>': <detail>".
  std::string error;
};

// Reads `dtype` and `max_active_dims` and refuses kDenseOnlyOptions; other
// keys are left to other pipeline stages, which see the same parameters.
ParsedSparseOptions ParseSparseOptions(const std::vector<Parameter>& parameters);

// Checks max_active_dims against the row width (the vocabulary size);
// returns an error message as ParsedSparseOptions::error has it, or "".
std::string ValidateSparseOptions(const SparseOptions& options, size_t vocab_size);

}  // namespace embedding_serializer
