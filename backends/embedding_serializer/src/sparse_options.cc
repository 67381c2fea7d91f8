#include "sparse_options.h"

#include <algorithm>
#include <iterator>

#include "sparse_encoding.h"

namespace embedding_serializer {
namespace {

std::optional<Format> ParseValueFormat(std::string_view name) {
  for (const Format format : kSparseValueFormats) {
    if (FormatName(format) == name) {
      return format;
    }
  }
  return std::nullopt;
}

std::string ValueFormatNames() {
  std::vector<std::string_view> names;
  for (const Format format : kSparseValueFormats) {
    names.push_back(FormatName(format));
  }
  return ListNames(names, "or");
}

bool IsDenseOnly(std::string_view key) {
  return std::find(std::begin(kDenseOnlyOptions), std::end(kDenseOnlyOptions), key) !=
         std::end(kDenseOnlyOptions);
}

}  // namespace

ParsedSparseOptions ParseSparseOptions(const std::vector<Parameter>& parameters) {
  ParsedSparseOptions parsed;
  for (const Parameter& parameter : parameters) {
    if (parameter.key == "dtype") {
      const auto* name = TypedParameter<std::string_view>(parameter, "a string", &parsed.error);
      if (name == nullptr) {
        return parsed;
      }
      const std::optional<Format> format = ParseValueFormat(*name);
      if (!format) {
        parsed.error = InvalidParameter(parameter.key, "unknown dtype '" + std::string(*name) +
                                                           "' (expected " + ValueFormatNames() +
                                                           ")");
        return parsed;
      }
      parsed.options.value_format = *format;
    } else if (parameter.key == "max_active_dims") {
      const auto* k = TypedParameter<int64_t>(parameter, "an integer", &parsed.error);
      if (k == nullptr) {
        return parsed;
      }
      parsed.options.max_active_dims = *k;
    } else if (IsDenseOnly(parameter.key)) {
      parsed.error = InvalidParameter(
          parameter.key,
          "sparse rows take " +
              ListNames({std::begin(kSparseOptionNames), std::end(kSparseOptionNames)}, "and") +
              " only");
      return parsed;
    }
  }
  return parsed;
}

std::string ValidateSparseOptions(const SparseOptions& options, size_t vocab_size) {
  if (options.max_active_dims) {
    const int64_t k = *options.max_active_dims;
    if (k < 1 || static_cast<uint64_t>(k) > vocab_size) {
      return InvalidParameter("max_active_dims", std::to_string(k) + " is outside 1.." +
                                                     std::to_string(vocab_size));
    }
  }
  return {};
}

}  // namespace embedding_serializer
