#include "multivector_options.h"

#include <algorithm>
#include <iterator>

#include "request_options.h"

namespace embedding_serializer {
namespace {

bool IsRefused(std::string_view key) {
  return std::find(std::begin(kMultiVectorRefusedOptions), std::end(kMultiVectorRefusedOptions),
                   key) != std::end(kMultiVectorRefusedOptions);
}

}  // namespace

ParsedMultiVectorOptions ParseMultiVectorOptions(const std::vector<Parameter>& parameters) {
  ParsedMultiVectorOptions parsed;
  for (const Parameter& parameter : parameters) {
    if (parameter.key == "dtype") {
      if (!ParseDtype(parameter, &parsed.options.format, &parsed.error)) {
        return parsed;
      }
    } else if (IsRefused(parameter.key)) {
      parsed.error = InvalidParameter(
          parameter.key,
          "multi-vector rows take " +
              ListNames({std::begin(kMultiVectorOptionNames), std::end(kMultiVectorOptionNames)},
                        "and") +
              " only");
      return parsed;
    }
  }
  return parsed;
}

std::string ValidateMultiVectorOptions(const MultiVectorOptions& options, size_t vector_dims) {
  if (IsBitPacked(options.format) && vector_dims % 8 != 0) {
    return NotWholeBytes("dtype", vector_dims);
  }
  return {};
}

}  // namespace embedding_serializer
