#include "model_config.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "json_reader.h"

namespace embedding_serializer {
namespace {

enum class DimsRule {
  kAny,         // [-1]
  kAnyOrFixed,  // [-1] or one positive size
  kOne,         // [1]
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

const std::string* StringMember(const JsonValue& object, std::string_view key) {
  const JsonValue* member = object.Find(key);
  return member ? member->AsString() : nullptr;
}

const JsonValue* FindTensor(const JsonValue& tensors, std::string_view name) {
  for (const JsonValue& tensor : tensors.items()) {
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

std::string DimsText(const std::vector<JsonValue>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    const std::optional<int64_t> dim = dims[i].AsInt64();
    text += i == 0 ? "" : ", ";
    text += dim ? std::to_string(*dim) : "?";
  }
  return text + "]";
}

bool DimsFollow(const std::vector<JsonValue>& dims, DimsRule rule) {
  const std::optional<int64_t> dim =
      dims.size() == 1 ? dims[0].AsInt64() : std::nullopt;
  switch (rule) {
    case DimsRule::kAny:
      return dim == -1;
    case DimsRule::kAnyOrFixed:
      return dim && (*dim == -1 || *dim > 0);
    case DimsRule::kOne:
      return dim == 1;
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
  }
  return "";
}

std::string CheckTensor(const std::string& label, const JsonValue& tensor,
                        const TensorRule& rule) {
  const std::string* data_type = StringMember(tensor, "data_type");
  if (!Contains(rule.data_types, data_type)) {
    return Problem(label + " data_type is " + (data_type ? *data_type : "missing") +
                   "; expected " + Listed(rule.data_types));
  }
  const JsonValue* dims = tensor.Find("dims");
  if (dims == nullptr || dims->kind() != JsonValue::Kind::kArray) {
    return Problem(label + " dims are missing; expected " + ExpectedDims(rule.dims));
  }
  if (!DimsFollow(dims->items(), rule.dims)) {
    return Problem(label + " dims are " + DimsText(dims->items()) + "; expected " +
                   ExpectedDims(rule.dims));
  }
  // A reshape would make the shape the serializer reads differ from `dims`.
  if (tensor.Find("reshape") != nullptr) {
    return Problem(label + " sets reshape, which the serializer does not support");
  }
  return {};
}

// `section` ("input" or "output") must declare exactly the tensors of
// `rules`, each following its rule. Returns the first problem, or "".
std::string CheckSection(const JsonValue& config, const std::string& section,
                         const std::vector<TensorRule>& rules) {
  const JsonValue* tensors = config.Find(section);
  if (tensors == nullptr || tensors->kind() != JsonValue::Kind::kArray) {
    return Problem("'" + section + "' is missing or not a list");
  }
  std::vector<std::string_view> names;
  for (const TensorRule& rule : rules) {
    names.push_back(rule.name);
  }
  for (const JsonValue& tensor : tensors->items()) {
    const std::string* name = StringMember(tensor, "name");
    if (!Contains(names, name)) {
      return Problem(Label(section, name ? *name : "") +
                     " is not one the serializer knows (expected " + Listed(names) + ")");
    }
  }
  for (const TensorRule& rule : rules) {
    const std::string label = Label(section, rule.name);
    const JsonValue* tensor = FindTensor(*tensors, rule.name);
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

}  // namespace

ConfigCheck CheckModelConfig(std::string_view config_json) {
  ConfigCheck check;
  const JsonParse parsed = ParseJson(config_json);
  if (!parsed.error.empty()) {
    check.error = Problem(parsed.error);
    return check;
  }
  const JsonValue& config = parsed.value;
  if (config.kind() != JsonValue::Kind::kObject) {
    check.error = Problem("not a JSON object");
    return check;
  }

  // Requests arrive batched along the first dimension: [N, D] and [N, 1].
  const JsonValue* max_batch_size = config.Find("max_batch_size");
  const std::optional<int64_t> batch =
      max_batch_size ? max_batch_size->AsInt64() : std::nullopt;
  if (!batch || *batch < 1) {
    check.error = Problem("max_batch_size is " +
                          (batch ? std::to_string(*batch) : std::string("missing")) +
                          "; expected at least 1, as the serializer reads batched rows");
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
    const JsonValue* embedding = FindTensor(*config.Find("input"), kEmbeddingInput);
    if (*StringMember(*embedding, "data_type") == "TYPE_FP16") {
      check.config.embedding_type = ElementType::kFloat16;
    }
  }
  return check;
}

}  // namespace embedding_serializer
