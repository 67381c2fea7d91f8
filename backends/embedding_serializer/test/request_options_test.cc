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

// ApplyOptions on a unit `row` whose norm before normalization was `norm`;
// the output starts at -1 so a value left unwritten shows.
std::vector<float> Applied(const RequestOptions& options, const std::vector<float>& row,
                           float norm) {
  std::vector<float> out(OutputDims(options, row.size()), -1.0f);
  ApplyOptions(options, row.data(), row.size(), norm, out.data());
  return out;
}

TEST(ApplyOptions, FullWidthNormalizedRowPassesThrough) {
  const std::vector<float> row = {0.6f, 0.8f, 0.0f};
  EXPECT_EQ(Applied(RequestOptions{}, row, 5.0f), row);
}

TEST(ApplyOptions, TruncationRenormalizesOrRestoresThePooledScale) {
  const std::vector<float> row = {0.48f, 0.64f, 0.6f};
  RequestOptions options;
  options.dimensions = 2;
  const std::vector<float> unit = Applied(options, row, 10.0f);
  options.normalize = false;
  const std::vector<float> scaled = Applied(options, row, 10.0f);
  const std::vector<float> unit_expected = {0.6f, 0.8f};
  const std::vector<float> scaled_expected = {4.8f, 6.4f};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(unit[i], unit_expected[i], 1e-6);
    EXPECT_NEAR(scaled[i], scaled_expected[i], 1e-5);
  }
}

TEST(ApplyOptions, ZeroPrefixStaysZero) {
  RequestOptions options;
  options.dimensions = 2;
  EXPECT_EQ(Applied(options, {0.0f, 0.0f, 1.0f}, 1.0f), (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace embedding_serializer
