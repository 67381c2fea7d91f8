#include "request_parameter.h"

namespace embedding_serializer {

std::string InvalidParameter(std::string_view key, std::string_view problem) {
  std::string message = "invalid_parameter '";
  message.append(key).append("': ").append(problem);
  return message;
}

std::string ListNames(const std::vector<std::string_view>& names, std::string_view last) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) {
      text.append(i + 1 == names.size() ? " " + std::string(last) + " " : ", ");
    }
    text.append(names[i]);
  }
  return text;
}

}  // namespace embedding_serializer
