#include "model_config.h"

#include <charconv>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <vector>

namespace embedding_serializer {
namespace {

// Only nlohmann's non-throwing calls are used here (parse with exceptions
// off, is_*, find, get_ptr), so no JSON error can become an exception.
using Json = nlohmann::json;

enum class DimsRule {
  kAny,         // [-1]
  kAnyOrFixed,  // [-1] or one positive size
  kOne,         // [1]
  kAnyAny,      // [-1, -1]
};

struct TensorRule {
  const char* name;
  std::vector<std::string_view> data_types;
  DimsRule dims;
};

std::string Problem(const std::string& detail) { return "model configuration: " + detail; }

std::string Label(std::string_view section, std::string_view name) {
  return std::string(section) + " '" + std::string(name) + "'";
}

// The member named `key` of an object; nullptr if absent or not an object.
const Json* Member(const Json& object, std::string_view key) {
  if (!object.is_object()) {
    return nullptr;
  }
  // A std::string key: Ubuntu 22.04's nlohmann (3.10) has no string_view find.
  const auto member = object.find(std::string(key));
  return member == object.end() ? nullptr : &*member;
}

const std::string* StringMember(const Json& object, std::string_view key) {
  const Json* member = Member(object, key);
  return member ? member->get_ptr<const std::string*>() : nullptr;
}

// A whole number that fits int64, or a string holding one: protobuf's JSON
// writes int64 fields (dims, max_batch_size) as strings.
std::optional<int64_t> AsInt64(const Json& value) {
  // nlohmann reads non-negative integers as unsigned. Checked first: the
  // signed pointer is handed out for unsigned values too, as the same bits.
  if (const auto* number = value.get_ptr<const Json::number_unsigned_t*>()) {
    if (*number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(*number);
  }
  if (const auto* number = value.get_ptr<const Json::number_integer_t*>()) {
    return *number;
  }
  const std::string* text = value.get_ptr<const std::string*>();
  if (text == nullptr || text->empty()) {
    return std::nullopt;
  }
  int64_t parsed = 0;
  const char* last = text->data() + text->size();
  const auto [end, status] = std::from_chars(text->data(), last, parsed);
  if (status != std::errc() || end != last) {
    return std::nullopt;
  }
  return parsed;
}

// `tensors` is an array (range-for over any other kind visits the value itself).
const Json* FindTensor(const Json& tensors, std::string_view name) {
  for (const Json& tensor : tensors) {
    const std::string* tensor_name = StringMember(tensor, "name");
    if (tensor_name && *tensor_name == name) {
      return &tensor;
    }
  }
  return nullptr;
}

bool Contains(const std::vector<std::string_view>& names, const std::string* name) {
  for (std::string_view candidate : names) {
    if (name && *name == candidate) {
      return true;
    }
  }
  return false;
}

// "A, B or C".
std::string Listed(const std::vector<std::string_view>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    text += names[i];
  }
  return text;
}

// `dims` is an array, here and in DimsFollow.
std::string DimsText(const Json& dims) {
  std::string text = "[";
  for (const Json& value : dims) {
    const std::optional<int64_t> dim = AsInt64(value);
    text += text.size() == 1 ? "" : ", ";
    text += dim ? std::to_string(*dim) : "?";
  }
  return text + "]";
}

bool DimsFollow(const Json& dims, DimsRule rule) {
  const std::optional<int64_t> dim = dims.size() == 1 ? AsInt64(dims.front()) : std::nullopt;
  switch (rule) {
    case DimsRule::kAny:
      return dim == -1;
    case DimsRule::kAnyOrFixed:
      return dim && (*dim == -1 || *dim > 0);
    case DimsRule::kOne:
      return dim == 1;
    case DimsRule::kAnyAny:
      return dims.size() == 2 && AsInt64(dims.front()) == -1 && AsInt64(dims.back()) == -1;
  }
  return false;
}

const char* ExpectedDims(DimsRule rule) {
  switch (rule) {
    case DimsRule::kAny:
      return "[-1]";
    case DimsRule::kAnyOrFixed:
      return "[-1] or one fixed size such as [384]";
    case DimsRule::kOne:
      return "[1]";
    case DimsRule::kAnyAny:
      return "[-1, -1]";
  }
  return "";
}

std::string CheckTensor(const std::string& label, const Json& tensor,
                        const TensorRule& rule) {
  const std::string* data_type = StringMember(tensor, "data_type");
  if (!Contains(rule.data_types, data_type)) {
    return Problem(label + " data_type is " + (data_type ? *data_type : "missing") +
                   "; expected " + Listed(rule.data_types));
  }
  const Json* dims = Member(tensor, "dims");
  if (dims == nullptr || !dims->is_array()) {
    return Problem(label + " dims are missing; expected " + ExpectedDims(rule.dims));
  }
  if (!DimsFollow(*dims, rule.dims)) {
    return Problem(label + " dims are " + DimsText(*dims) + "; expected " +
                   ExpectedDims(rule.dims));
  }
  // A reshape would make the shape the serializer reads differ from `dims`.
  if (Member(tensor, "reshape") != nullptr) {
    return Problem(label + " sets reshape, which the serializer does not support");
  }
  return {};
}

// `section` ("input" or "output") must declare exactly the tensors of
// `rules`, each following its rule. Returns the first problem, or "".
std::string CheckSection(const Json& config, const std::string& section,
                         const std::vector<TensorRule>& rules) {
  const Json* tensors = Member(config, section);
  if (tensors == nullptr || !tensors->is_array()) {
    return Problem("'" + section + "' is missing or not a list");
  }
  std::vector<std::string_view> names;
  for (const TensorRule& rule : rules) {
    names.push_back(rule.name);
  }
  for (const Json& tensor : *tensors) {
    const std::string* name = StringMember(tensor, "name");
    if (!Contains(names, name)) {
      return Problem(Label(section, name ? *name : "") +
                     " is not one the serializer knows (expected " + Listed(names) + ")");
    }
  }
  for (const TensorRule& rule : rules) {
    const std::string label = Label(section, rule.name);
    const Json* tensor = FindTensor(*tensors, rule.name);
    if (tensor == nullptr) {
      return Problem(label + " is missing");
    }
    std::string problem = CheckTensor(label, *tensor, rule);
    if (!problem.empty()) {
      return problem;
    }
  }
  return {};
}

// The kind of rows `parameters` chooses; "" or a problem naming the field.
std::string CheckRowsParameter(const Json& config, RowKind* rows) {
  const Json* parameters = Member(config, "parameters");
  if (parameters == nullptr) {
    return {};
  }
  if (!parameters->is_object()) {
    return Problem("'parameters' is not a map");
  }
  // Unknown keys are refused: a misspelt `rows` would otherwise serve dense
  // rows and fail on the inputs instead of naming the parameter.
  for (const auto& parameter : parameters->items()) {
    if (parameter.key() != kRowsParameter) {
      return Problem("parameters '" + parameter.key() +
                     "' is not one the serializer knows (expected " + kRowsParameter + ")");
    }
  }
  const Json* rows_parameter = Member(*parameters, kRowsParameter);
  if (rows_parameter == nullptr) {
    return {};
  }
  const std::string* value = StringMember(*rows_parameter, "string_value");
  if (value && *value == kSparseRows) {
    *rows = RowKind::kSparse;
    return {};
  }
  if (value && *value == kMultiVectorRows) {
    *rows = RowKind::kMultiVector;
    return {};
  }
  if (value && *value == kDenseRows) {
    return {};
  }
  return Problem(std::string("parameters '") + kRowsParameter + "' is " +
                 (value ? "'" + *value + "'" : std::string("missing its string_value")) +
                 "; expected " + Listed({kDenseRows, kSparseRows, kMultiVectorRows}));
}

}  // namespace

ConfigCheck CheckModelConfig(std::string_view config_json) {
  ConfigCheck check;
  const Json config = Json::parse(config_json.data(), config_json.data() + config_json.size(),
                                  /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    check.error = Problem("not valid JSON");
    return check;
  }
  if (!config.is_object()) {
    check.error = Problem("not a JSON object");
    return check;
  }

  // Requests arrive batched along the first dimension: [N, D], [N, 1], [N, V],
  // [N, T, D], [N, T].
  const Json* max_batch_size = Member(config, "max_batch_size");
  const std::optional<int64_t> batch = max_batch_size ? AsInt64(*max_batch_size) : std::nullopt;
  if (!batch || *batch < 1) {
    check.error = Problem("max_batch_size is " +
                          (batch ? std::to_string(*batch) : std::string("missing")) +
                          "; expected at least 1, as the serializer reads batched rows");
    return check;
  }

  check.error = CheckRowsParameter(config, &check.config.rows);
  if (!check.error.empty()) {
    return check;
  }
  if (check.config.rows == RowKind::kSparse) {
    check.error =
        CheckSection(config, "input", {{kActivationsInput, {"TYPE_FP32"}, DimsRule::kAny}});
    if (check.error.empty()) {
      check.error =
          CheckSection(config, "output", {{kSparseBytesOutput, {"TYPE_UINT8"}, DimsRule::kAny}});
    }
    return check;
  }
  if (check.config.rows == RowKind::kMultiVector) {
    check.error = CheckSection(config, "input",
                               {{kTokenVectorsInput, {"TYPE_FP32"}, DimsRule::kAnyAny},
                                {kVectorMaskInput, {"TYPE_INT64"}, DimsRule::kAny}});
    if (check.error.empty()) {
      check.error = CheckSection(config, "output",
                                 {{kMultiVectorBytesOutput, {"TYPE_UINT8"}, DimsRule::kAny}});
    }
    return check;
  }

  check.error = CheckSection(
      config, "input",
      {{kEmbeddingInput, {"TYPE_FP32", "TYPE_FP16"}, DimsRule::kAnyOrFixed},
       {kNormInput, {"TYPE_FP32"}, DimsRule::kOne}});
  if (check.error.empty()) {
    check.error =
        CheckSection(config, "output", {{kBytesOutput, {"TYPE_UINT8"}, DimsRule::kAny}});
  }
  if (check.error.empty()) {
    const Json* embedding = FindTensor(*Member(config, "input"), kEmbeddingInput);
    if (*StringMember(*embedding, "data_type") == "TYPE_FP16") {
      check.config.embedding_type = ElementType::kFloat16;
    }
  }
  return check;
}

}  // namespace embedding_serializer
