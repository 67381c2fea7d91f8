#include "request_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace embedding_serializer {
namespace {

TEST(ParseOptions, DefaultsToNormalizedFloat32AtFullWidth) {
  const ParsedOptions parsed = ParseOptions({});
  EXPECT_TRUE(parsed.error.empty());
  EXPECT_EQ(parsed.options.format, Format::kFloat32);
  EXPECT_FALSE(parsed.options.dimensions.has_value());
  EXPECT_TRUE(parsed.options.normalize);
}

TEST(ParseOptions, ReadsAllThreeOptionsAndIgnoresOtherKeys) {
  const ParsedOptions parsed = ParseOptions({{"dtype", std::string_view("ubinary")},
                                             {"dimensions", int64_t{64}},
                                             {"normalize", false},
                                             {"priority", int64_t{1}}});
  ASSERT_TRUE(parsed.error.empty()) << parsed.error;
  EXPECT_EQ(parsed.options.format, Format::kUbinary);
  EXPECT_EQ(parsed.options.dimensions, 64);
  EXPECT_FALSE(parsed.options.normalize);
}

TEST(ParseOptions, NamesTheParameterThatIsWrongInTheErrorKindGrammar) {
  EXPECT_EQ(ParseOptions({{"dtype", std::string_view("float64")}}).error,
            "invalid_parameter 'dtype': unknown dtype 'float64' (expected float32, "
            "float16, int8, uint8, binary or ubinary)");
  EXPECT_EQ(ParseOptions({{"dtype", int64_t{3}}}).error,
            "invalid_parameter 'dtype': must be a string");
  EXPECT_EQ(ParseOptions({{"dimensions", std::string_view("64")}}).error,
            "invalid_parameter 'dimensions': must be an integer");
  EXPECT_EQ(ParseOptions({{"normalize", int64_t{1}}}).error,
            "invalid_parameter 'normalize': must be a boolean");
}

TEST(ValidateOptions, RejectsDimensionsOutsideTheModelWidth) {
  RequestOptions options;
  options.dimensions = 0;
  EXPECT_EQ(ValidateOptions(options, 384),
            "invalid_parameter 'dimensions': 0 is outside 1..384");
  options.dimensions = 999;
  EXPECT_EQ(ValidateOptions(options, 384),
            "invalid_parameter 'dimensions': 999 is outside 1..384");
  options.dimensions = 384;
  EXPECT_EQ(ValidateOptions(options, 384), "");
  options.dimensions = 1;
  EXPECT_EQ(ValidateOptions(options, 384), "");
}

TEST(ValidateOptions, BitPackedFormatsNeedWholeBytes) {
  RequestOptions options;
  options.format = Format::kBinary;
  EXPECT_EQ(ValidateOptions(options, 384), "");
  options.dimensions = 100;
  EXPECT_EQ(ValidateOptions(options, 384),
            "invalid_parameter 'dimensions': binary and ubinary pack 8 dimensions per "
            "byte, so the dimensions must be a multiple of 8, got 100");
  options.format = Format::kUbinary;
  options.dimensions.reset();
  EXPECT_NE(ValidateOptions(options, 100).find("multiple of 8"), std::string::npos);
  options.format = Format::kInt8;
  EXPECT_EQ(ValidateOptions(options, 100), "");
}

TEST(ApplyOptions, FullWidthNormalizedRowPassesThrough) {
  const std::vector<float> row = {0.6f, 0.8f, 0.0f};
  std::vector<float> out(3);
  ApplyOptions(RequestOptions{}, row.data(), 3, 5.0f, out.data());
  EXPECT_EQ(out, row);
}

TEST(ApplyOptions, TruncationRenormalizesToUnitLength) {
  const std::vector<float> row = {0.48f, 0.64f, 0.6f};
  RequestOptions options;
  options.dimensions = 2;
  std::vector<float> out(2);
  ApplyOptions(options, row.data(), 3, 1.0f, out.data());
  EXPECT_NEAR(out[0], 0.6f, 1e-6);
  EXPECT_NEAR(out[1], 0.8f, 1e-6);
}

TEST(ApplyOptions, WithoutNormalizeRestoresThePooledScale) {
  const std::vector<float> row = {0.48f, 0.64f, 0.6f};
  RequestOptions options;
  options.normalize = false;
  options.dimensions = 2;
  std::vector<float> out(2);
  ApplyOptions(options, row.data(), 3, 10.0f, out.data());
  EXPECT_NEAR(out[0], 4.8f, 1e-5);
  EXPECT_NEAR(out[1], 6.4f, 1e-5);
}

TEST(ApplyOptions, ZeroPrefixStaysZero) {
  const std::vector<float> row = {0.0f, 0.0f, 1.0f};
  RequestOptions options;
  options.dimensions = 2;
  std::vector<float> out(2, -1.0f);
  ApplyOptions(options, row.data(), 3, 1.0f, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace embedding_serializer
