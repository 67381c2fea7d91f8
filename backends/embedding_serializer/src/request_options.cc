#include "request_options.h"

#include <cmath>

namespace embedding_serializer {
namespace {

// The names of kFormats (those bit-packed, with `bit_packed_only`) as
// "a, b or c" (`last` = "or").
std::string FormatNames(bool bit_packed_only, std::string_view last) {
  std::vector<std::string_view> names;
  for (const FormatSpec& spec : kFormats) {
    if (!bit_packed_only || spec.bytes_per_value == 0) {
      names.push_back(spec.name);
    }
  }
  return ListNames(names, last);
}

}  // namespace

bool ParseDtype(const Parameter& parameter, Format* format, std::string* error) {
  const auto* name = TypedParameter<std::string_view>(parameter, "a string", error);
  if (name == nullptr) {
    return false;
  }
  const std::optional<Format> parsed = ParseFormat(*name);
  if (!parsed) {
    *error = InvalidParameter(parameter.key, "unknown dtype '" + std::string(*name) +
                                                 "' (expected " + FormatNames(false, "or") + ")");
    return false;
  }
  *format = *parsed;
  return true;
}

std::string NotWholeBytes(std::string_view key, size_t dims) {
  return InvalidParameter(key, FormatNames(true, "and") +
                                   " pack 8 dimensions per byte, so the dimensions must be a "
                                   "multiple of 8, got " +
                                   std::to_string(dims));
}

ParsedOptions ParseOptions(const std::vector<Parameter>& parameters) {
  ParsedOptions parsed;
  for (const Parameter& parameter : parameters) {
    if (parameter.key == "dtype") {
      if (!ParseDtype(parameter, &parsed.options.format, &parsed.error)) {
        return parsed;
      }
    } else if (parameter.key == "dimensions") {
      const auto* dims = TypedParameter<int64_t>(parameter, "an integer", &parsed.error);
      if (dims == nullptr) {
        return parsed;
      }
      parsed.options.dimensions = *dims;
    } else if (parameter.key == "normalize") {
      const auto* normalize = TypedParameter<bool>(parameter, "a boolean", &parsed.error);
      if (normalize == nullptr) {
        return parsed;
      }
      parsed.options.normalize = *normalize;
    }
  }
  return parsed;
}

std::string ValidateOptions(const RequestOptions& options, size_t model_dims) {
  if (options.dimensions) {
    const int64_t dims = *options.dimensions;
    if (dims < 1 || static_cast<uint64_t>(dims) > model_dims) {
      return InvalidParameter("dimensions", std::to_string(dims) + " is outside 1.." +
                                                std::to_string(model_dims));
    }
  }
  const size_t kept = OutputDims(options, model_dims);
  if (IsBitPacked(options.format) && kept % 8 != 0) {
    return NotWholeBytes("dimensions", kept);
  }
  return {};
}

size_t OutputDims(const RequestOptions& options, size_t model_dims) {
  return options.dimensions ? static_cast<size_t>(*options.dimensions)
                            : model_dims;
}

void ApplyOptions(const RequestOptions& options, const float* unit_row,
                  size_t model_dims, float norm, float* out) {
  const size_t kept = OutputDims(options, model_dims);
  if (!options.normalize) {
    for (size_t i = 0; i < kept; ++i) {
      out[i] = unit_row[i] * norm;
    }
    return;
  }
  if (kept == model_dims) {
    // Already unit length: pass the model's values through untouched.
    for (size_t i = 0; i < kept; ++i) {
      out[i] = unit_row[i];
    }
    return;
  }
  double sum_of_squares = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    sum_of_squares += static_cast<double>(unit_row[i]) * unit_row[i];
  }
  const double length = std::sqrt(sum_of_squares);
  const double scale = length > 0.0 ? 1.0 / length : 0.0;
  for (size_t i = 0; i < kept; ++i) {
    out[i] = static_cast<float>(unit_row[i] * scale);
  }
}

}  // namespace embedding_serializer
