#include "sparse_options.h"

#include <gtest/gtest.h>

#include <vector>

namespace embedding_serializer {
namespace {

TEST(ParseSparseOptions, DefaultsToFloat32WithEveryActiveEntry) {
  const ParsedSparseOptions parsed = ParseSparseOptions({});
  EXPECT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.options.value_format, Format::kFloat32);
  EXPECT_FALSE(parsed.options.max_active_dims.has_value());
}

TEST(ParseSparseOptions, ReadsBothOptionsAndLeavesOtherStagesKeys) {
  const ParsedSparseOptions parsed =
      ParseSparseOptions({{"dtype", std::string_view("float16")},
                          {"max_active_dims", int64_t{64}},
                          {"priority", int64_t{1}},
                          {"prompt_name", std::string_view("query")}});
  ASSERT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.options.value_format, Format::kFloat16);
  EXPECT_EQ(parsed.options.max_active_dims, 64);
}

TEST(ParseSparseOptions, NamesTheParameterThatIsWrong) {
  EXPECT_EQ(ParseSparseOptions({{"dtype", std::string_view("int8")}}).error,
            "invalid_parameter 'dtype': unknown dtype 'int8' (expected float32 or float16)");
  EXPECT_EQ(ParseSparseOptions({{"dtype", int64_t{3}}}).error,
            "invalid_parameter 'dtype': must be a string");
  EXPECT_EQ(ParseSparseOptions({{"max_active_dims", std::string_view("8")}}).error,
            "invalid_parameter 'max_active_dims': must be an integer");
  EXPECT_EQ(ParseSparseOptions({{"max_active_dims", 8.0}}).error,
            "invalid_parameter 'max_active_dims': must be an integer");
}

TEST(ParseSparseOptions, RefusesTheDenseOptionsByName) {
  EXPECT_EQ(ParseSparseOptions({{"dimensions", int64_t{64}}}).error,
            "invalid_parameter 'dimensions': sparse rows take dtype and max_active_dims only");
  EXPECT_EQ(ParseSparseOptions({{"normalize", false}}).error,
            "invalid_parameter 'normalize': sparse rows take dtype and max_active_dims only");
}

TEST(ValidateSparseOptions, KeepsMaxActiveDimsWithinTheVocabulary) {
  SparseOptions options;
  EXPECT_EQ(ValidateSparseOptions(options, 8), "");
  for (const int64_t k : {1, 8}) {
    options.max_active_dims = k;
    EXPECT_EQ(ValidateSparseOptions(options, 8), "") << k;
  }
  options.max_active_dims = 9;
  EXPECT_EQ(ValidateSparseOptions(options, 8),
            "invalid_parameter 'max_active_dims': 9 is outside 1..8");
  options.max_active_dims = 0;
  EXPECT_EQ(ValidateSparseOptions(options, 8),
            "invalid_parameter 'max_active_dims': 0 is outside 1..8");
  options.max_active_dims = -1;
  EXPECT_EQ(ValidateSparseOptions(options, 8),
            "invalid_parameter 'max_active_dims': -1 is outside 1..8");
}

}  // namespace
}  // namespace embedding_serializer
