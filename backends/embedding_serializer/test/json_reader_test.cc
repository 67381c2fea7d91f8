#include "json_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace embedding_serializer {
namespace {

JsonValue Parsed(const std::string& text) {
  JsonParse parsed = ParseJson(text);
  EXPECT_EQ(parsed.error, "") << text;
  return parsed.value;
}

std::string ErrorOf(const std::string& text) { return ParseJson(text).error; }

TEST(ParseJson, ReadsNestedObjectsAndArrays) {
  const JsonValue value =
      Parsed(R"( {"name": "serializer", "max_batch_size": 64,
                  "input": [{"dims": [-1]}, {"dims": [1]}], "ok": true, "none": null} )");
  ASSERT_EQ(value.kind(), JsonValue::Kind::kObject);
  EXPECT_EQ(*value.Find("name")->AsString(), "serializer");
  EXPECT_EQ(value.Find("max_batch_size")->AsInt64(), 64);
  const JsonValue* input = value.Find("input");
  ASSERT_EQ(input->kind(), JsonValue::Kind::kArray);
  ASSERT_EQ(input->items().size(), 2u);
  EXPECT_EQ(input->items()[0].Find("dims")->items()[0].AsInt64(), -1);
  EXPECT_EQ(value.Find("ok")->kind(), JsonValue::Kind::kBool);
  EXPECT_EQ(value.Find("none")->kind(), JsonValue::Kind::kNull);
  EXPECT_EQ(value.Find("absent"), nullptr);
}

TEST(ParseJson, FindReturnsTheFirstOfRepeatedKeys) {
  EXPECT_EQ(Parsed(R"({"a": 1, "a": 2})").Find("a")->AsInt64(), 1);
}

TEST(ParseJson, DecodesStringEscapesToUtf8) {
  const JsonValue value = Parsed(R"("q\"b\\s\/\b\f\n\r\t \u00e9 \u20ac \ud83d\ude00")");
  EXPECT_EQ(*value.AsString(), "q\"b\\s/\b\f\n\r\t \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
}

TEST(JsonValue, AsInt64TakesWholeNumbersAndIntegerStringsOnly) {
  EXPECT_EQ(Parsed("0").AsInt64(), 0);
  EXPECT_EQ(Parsed("-9223372036854775808").AsInt64(), INT64_MIN);
  EXPECT_EQ(Parsed(R"("384")").AsInt64(), 384);  // protobuf's int64 in JSON
  EXPECT_EQ(Parsed("9223372036854775808").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed("1.5").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed("1e3").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed(R"("3 ")").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed(R"("")").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed("true").AsInt64(), std::nullopt);
  EXPECT_EQ(Parsed("1").AsString(), nullptr);
}

TEST(ParseJson, AcceptsEveryNumberForm) {
  for (const char* number : {"0", "-0", "12", "-12", "0.5", "1.25e10", "1E-3", "2e+8"}) {
    EXPECT_EQ(Parsed(number).kind(), JsonValue::Kind::kNumber) << number;
  }
}

TEST(ParseJson, RejectsMalformedDocumentsSayingWhere) {
  EXPECT_EQ(ErrorOf(""), "JSON error at byte 0: expected a value");
  EXPECT_EQ(ErrorOf("[1,]"), "JSON error at byte 3: expected a value");
  EXPECT_EQ(ErrorOf("{\"a\" 1}"), "JSON error at byte 5: expected ':'");
  EXPECT_EQ(ErrorOf("{1: 2}"), "JSON error at byte 1: expected a member name");
  EXPECT_EQ(ErrorOf("[1 2]"), "JSON error at byte 3: expected ',' or ']'");
  EXPECT_EQ(ErrorOf("{\"a\": 1"), "JSON error at byte 7: expected ',' or '}'");
  EXPECT_EQ(ErrorOf("{} x"), "JSON error at byte 3: unexpected text after the document");
  EXPECT_EQ(ErrorOf("\"open"), "JSON error at byte 5: unterminated string");
  EXPECT_EQ(ErrorOf("\"a\\"), "JSON error at byte 3: unterminated string");
  EXPECT_EQ(ErrorOf("\"\\x\""), "JSON error at byte 2: invalid escape in a string");
  EXPECT_EQ(ErrorOf("\"a\nb\""), "JSON error at byte 2: control character in a string");
  EXPECT_EQ(ErrorOf("\"\\u12g4\""), "JSON error at byte 3: expected 4 hex digits");
  EXPECT_EQ(ErrorOf("\"\\udc00\""), "JSON error at byte 7: unpaired low surrogate");
  EXPECT_NE(ErrorOf("\"\\ud800x\"").find("must be followed by a low one"), std::string::npos);
  EXPECT_EQ(ErrorOf("tru"), "JSON error at byte 0: expected 'true'");
  EXPECT_EQ(ErrorOf("01"), "JSON error at byte 1: unexpected text after the document");
  EXPECT_EQ(ErrorOf("1."), "JSON error at byte 2: expected a digit");
  EXPECT_EQ(ErrorOf("-"), "JSON error at byte 1: expected a digit");
  EXPECT_EQ(ErrorOf("1e"), "JSON error at byte 2: expected a digit");
}

TEST(ParseJson, RefusesNestingDeeperThanItsLimit) {
  EXPECT_EQ(ErrorOf(std::string(64, '[') + std::string(64, ']')), "");
  EXPECT_EQ(ErrorOf(std::string(65, '[') + std::string(65, ']')),
            "JSON error at byte 64: nested deeper than 64 levels");
  EXPECT_NE(ErrorOf(std::string(100000, '[')).find("nested deeper than 64 levels"),
            std::string::npos);
}

}  // namespace
}  // namespace embedding_serializer
