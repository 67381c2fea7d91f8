// A small JSON reader for the model configuration Triton hands the backend
// (TRITONSERVER_MessageSerializeToJson). No JSON library is available on
// every machine that builds the backend, and the configuration needs only a
// plain document tree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace embedding_serializer {

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  static JsonValue Null() { return JsonValue(Kind::kNull); }
  static JsonValue Bool(bool value);
  // `literal` is the number as written, validated by the parser.
  static JsonValue Number(std::string literal);
  static JsonValue String(std::string value);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<std::pair<std::string, JsonValue>> members);

  Kind kind() const { return kind_; }

  // The string's value; nullptr unless this is a string.
  const std::string* AsString() const;
  // An integer written without fraction or exponent that fits int64, or a
  // string holding one (protobuf's JSON writes int64 fields as strings).
  std::optional<int64_t> AsInt64() const;
  // Elements of an array (empty for any other kind).
  const std::vector<JsonValue>& items() const { return items_; }
  // The first member named `key` of an object; nullptr if absent.
  const JsonValue* Find(std::string_view key) const;

 private:
  explicit JsonValue(Kind kind) : kind_(kind) {}

  Kind kind_;
  std::string text_;  // a string's value, or a number's or boolean's literal
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

struct JsonParse {
  JsonValue value = JsonValue::Null();
  std::string error;  // empty on success; otherwise says what and where
};

// Parses one JSON document (RFC 8259); nesting deeper than 64 levels is an
// error rather than a risk to the stack.
JsonParse ParseJson(std::string_view text);

}  // namespace embedding_serializer
