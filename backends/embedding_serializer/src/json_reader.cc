#include "json_reader.h"

#include <charconv>
#include <system_error>

namespace embedding_serializer {
namespace {

constexpr int kMaxDepth = 64;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

// Recursive descent over `text`; each Parse* returns false after recording
// the first error.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  JsonParse ParseDocument() {
    JsonParse result;
    SkipWhitespace();
    if (ParseValue(0, &result.value)) {
      SkipWhitespace();
      if (pos_ != text_.size()) {
        Fail("unexpected text after the document");
      }
    }
    result.error = error_;
    return result;
  }

 private:
  bool Fail(const std::string& what) {
    if (error_.empty()) {
      error_ = "JSON error at byte " + std::to_string(pos_) + ": " + what;
    }
    return false;
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }

  bool Consume(char c) {
    if (Peek() != c) {
      return false;
    }
    ++pos_;
    return true;
  }

  void SkipWhitespace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                        text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool ParseValue(int depth, JsonValue* out) {
    if (depth >= kMaxDepth) {
      return Fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    switch (Peek()) {
      case '{':
        return ParseObject(depth, out);
      case '[':
        return ParseArray(depth, out);
      case '"': {
        std::string value;
        if (!ParseString(&value)) {
          return false;
        }
        *out = JsonValue::String(std::move(value));
        return true;
      }
      case 't':
        return ParseWord("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseWord("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseWord("null", JsonValue::Null(), out);
      default:
        return ParseNumber(out);
    }
  }

  bool ParseWord(std::string_view word, JsonValue value, JsonValue* out) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail("expected '" + std::string(word) + "'");
    }
    pos_ += word.size();
    *out = std::move(value);
    return true;
  }

  bool ConsumeDigits() {
    if (!IsDigit(Peek())) {
      return Fail("expected a digit");
    }
    while (IsDigit(Peek())) {
      ++pos_;
    }
    return true;
  }

  bool ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    if (Peek() != '-' && !IsDigit(Peek())) {
      return Fail("expected a value");
    }
    Consume('-');
    if (!Consume('0') && !ConsumeDigits()) {
      return false;
    }
    if (Consume('.') && !ConsumeDigits()) {
      return false;
    }
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) {
        Consume('-');
      }
      if (!ConsumeDigits()) {
        return false;
      }
    }
    *out = JsonValue::Number(std::string(text_.substr(start, pos_ - start)));
    return true;
  }

  bool ParseHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) {
      return Fail("expected 4 hex digits");
    }
    const char* first = text_.data() + pos_;
    const auto [end, status] = std::from_chars(first, first + 4, *out, 16);
    if (status != std::errc() || end != first + 4) {
      return Fail("expected 4 hex digits");
    }
    pos_ += 4;
    return true;
  }

  // After "\u": one code point, from a surrogate pair where there is one.
  bool ParseUnicodeEscape(std::string* out) {
    uint32_t unit = 0;
    if (!ParseHex4(&unit)) {
      return false;
    }
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      return Fail("unpaired low surrogate");
    }
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      uint32_t low = 0;
      if (!Consume('\\') || !Consume('u') || !ParseHex4(&low) || low < 0xDC00 ||
          low > 0xDFFF) {
        return Fail("a high surrogate must be followed by a low one");
      }
      unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(unit, out);
    return true;
  }

  bool ParseString(std::string* out) {
    Consume('"');
    while (true) {
      if (AtEnd()) {
        return Fail("unterminated string");
      }
      const char c = text_[pos_++];
      if (c == '"') {
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        return Fail("control character in a string");
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (AtEnd()) {
        return Fail("unterminated string");
      }
      const char escape = text_[pos_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out->push_back(escape);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u':
          if (!ParseUnicodeEscape(out)) {
            return false;
          }
          break;
        default:
          --pos_;
          return Fail("invalid escape in a string");
      }
    }
  }

  bool ParseArray(int depth, JsonValue* out) {
    Consume('[');
    std::vector<JsonValue> items;
    SkipWhitespace();
    if (!Consume(']')) {
      do {
        SkipWhitespace();
        JsonValue item = JsonValue::Null();
        if (!ParseValue(depth + 1, &item)) {
          return false;
        }
        items.push_back(std::move(item));
        SkipWhitespace();
      } while (Consume(','));
      if (!Consume(']')) {
        return Fail("expected ',' or ']'");
      }
    }
    *out = JsonValue::Array(std::move(items));
    return true;
  }

  bool ParseObject(int depth, JsonValue* out) {
    Consume('{');
    std::vector<std::pair<std::string, JsonValue>> members;
    SkipWhitespace();
    if (!Consume('}')) {
      do {
        SkipWhitespace();
        if (Peek() != '"') {
          return Fail("expected a member name");
        }
        std::string key;
        if (!ParseString(&key)) {
          return false;
        }
        SkipWhitespace();
        if (!Consume(':')) {
          return Fail("expected ':'");
        }
        SkipWhitespace();
        JsonValue value = JsonValue::Null();
        if (!ParseValue(depth + 1, &value)) {
          return false;
        }
        members.emplace_back(std::move(key), std::move(value));
        SkipWhitespace();
      } while (Consume(','));
      if (!Consume('}')) {
        return Fail("expected ',' or '}'");
      }
    }
    *out = JsonValue::Object(std::move(members));
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

JsonValue JsonValue::Bool(bool value) {
  JsonValue result(Kind::kBool);
  result.text_ = value ? "true" : "false";
  return result;
}

JsonValue JsonValue::Number(std::string literal) {
  JsonValue result(Kind::kNumber);
  result.text_ = std::move(literal);
  return result;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue result(Kind::kString);
  result.text_ = std::move(value);
  return result;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue result(Kind::kArray);
  result.items_ = std::move(items);
  return result;
}

JsonValue JsonValue::Object(std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue result(Kind::kObject);
  result.members_ = std::move(members);
  return result;
}

const std::string* JsonValue::AsString() const {
  return kind_ == Kind::kString ? &text_ : nullptr;
}

std::optional<int64_t> JsonValue::AsInt64() const {
  if ((kind_ != Kind::kNumber && kind_ != Kind::kString) || text_.empty()) {
    return std::nullopt;
  }
  int64_t value = 0;
  const char* last = text_.data() + text_.size();
  const auto [end, status] = std::from_chars(text_.data(), last, value);
  if (status != std::errc() || end != last) {
    return std::nullopt;
  }
  return value;
}

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [name, value] : members_) {
    if (name == key) {
      return &value;
    }
  }
  return nullptr;
}

JsonParse ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

}  // namespace embedding_serializer
