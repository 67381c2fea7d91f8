// A request parameter as Triton hands it over, without Triton's types, and
// the project's error grammar for a bad one; shared by the dense and the
// sparse options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace embedding_serializer {

struct Parameter {
  std::string_view key;
  std::variant<std::string_view, int64_t, bool, double> value;
};

// `invalid_parameter '<key>': <problem>`, the stable grammar of
// model_common/errors.py: clients branch on the kind and the key.
std::string InvalidParameter(std::string_view key, std::string_view problem);

// Names as "a, b or c" (`last` = "or"), as model_common/options.py lists them.
std::string ListNames(const std::vector<std::string_view>& names, std::string_view last);

// The parameter's value if it has type T; otherwise nullptr, and `error`
// says what the parameter must be (`expected`, e.g. "a string").
template <typename T>
const T* TypedParameter(const Parameter& parameter, std::string_view expected,
                        std::string* error) {
  const T* value = std::get_if<T>(&parameter.value);
  if (value == nullptr) {
    *error = InvalidParameter(parameter.key, "must be " + std::string(expected));
  }
  return value;
}

}  // namespace embedding_serializer
