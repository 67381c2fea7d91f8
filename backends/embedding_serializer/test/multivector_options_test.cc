#include "multivector_options.h"

#include <gtest/gtest.h>

#include <vector>

namespace embedding_serializer {
namespace {

TEST(ParseMultiVectorOptions, DefaultsToFloat32) {
  const ParsedMultiVectorOptions parsed = ParseMultiVectorOptions({});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.options.format, Format::kFloat32);
}

TEST(ParseMultiVectorOptions, ReadsEveryDenseDtypeAndLeavesOtherStagesKeys) {
  for (const FormatSpec& spec : kFormats) {
    const ParsedMultiVectorOptions parsed =
        ParseMultiVectorOptions({{"dtype", spec.name},
                                 {"pool_factor", int64_t{2}},
                                 {"prompt_name", std::string_view("query")},
                                 {"input_type", std::string_view("document")},
                                 {"truncate", true},
                                 {"priority", int64_t{1}}});
    ASSERT_EQ(parsed.error, "") << spec.name;
    EXPECT_EQ(parsed.options.format, spec.format);
  }
}

TEST(ParseMultiVectorOptions, NamesTheParameterThatIsWrong) {
  EXPECT_EQ(ParseMultiVectorOptions({{"dtype", std::string_view("float64")}}).error,
            "invalid_parameter 'dtype': unknown dtype 'float64' (expected float32, float16, "
            "int8, uint8, binary or ubinary)");
  EXPECT_EQ(ParseMultiVectorOptions({{"dtype", int64_t{3}}}).error,
            "invalid_parameter 'dtype': must be a string");
}

TEST(ParseMultiVectorOptions, RefusesTheDenseAndSparseOptionsByName) {
  EXPECT_EQ(ParseMultiVectorOptions({{"dimensions", int64_t{64}}}).error,
            "invalid_parameter 'dimensions': multi-vector rows take dtype only");
  EXPECT_EQ(ParseMultiVectorOptions({{"normalize", false}}).error,
            "invalid_parameter 'normalize': multi-vector rows take dtype only");
  EXPECT_EQ(ParseMultiVectorOptions({{"max_active_dims", int64_t{8}}}).error,
            "invalid_parameter 'max_active_dims': multi-vector rows take dtype only");
}

TEST(ValidateMultiVectorOptions, BitPackedDtypesNeedWholeBytesOfTheVectorWidth) {
  MultiVectorOptions options;
  EXPECT_EQ(ValidateMultiVectorOptions(options, 100), "");
  for (const Format format : {Format::kBinary, Format::kUbinary}) {
    options.format = format;
    EXPECT_EQ(ValidateMultiVectorOptions(options, 128), "");
    EXPECT_EQ(ValidateMultiVectorOptions(options, 100),
              "invalid_parameter 'dtype': binary and ubinary pack 8 dimensions per byte, so "
              "the dimensions must be a multiple of 8, got 100");
  }
}

}  // namespace
}  // namespace embedding_serializer
