// The encoder and the option messages against the one declaration of the
// row formats, model_common/model_common/row_formats.json (its path comes
// from CMake as ROW_FORMATS_JSON), which Python and the clients load: a
// format or a message that differs between the two fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "multivector_encoding.h"
#include "multivector_options.h"
#include "request_options.h"
#include "row_encoding.h"
#include "sparse_encoding.h"
#include "sparse_options.h"

namespace embedding_serializer {
namespace {

using Json = nlohmann::json;

// A multiple of 8, so that every format encodes a row of it.
constexpr size_t kDims = 384;

Json ReadDeclaration() {
  std::ifstream file(ROW_FORMATS_JSON);
  std::stringstream text;
  text << file.rdbuf();
  return Json::parse(text.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
}

// The template with each "{key}" replaced, as Python's str.format does.
std::string Render(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    const std::string placeholder = "{" + key + "}";
    for (size_t at = text.find(placeholder); at != std::string::npos;
         at = text.find(placeholder, at + value.size())) {
      text.replace(at, placeholder.size(), value);
    }
  }
  EXPECT_EQ(text.find('{'), std::string::npos) << "a placeholder is left in: " << text;
  return text;
}

// "a, b or c" with `last` = "or", as model_common/options.py lists names.
std::string Listed(const std::vector<std::string>& names, const std::string& last) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += i == 0 ? "" : i + 1 == names.size() ? " " + last + " " : ", ";
    text += names[i];
  }
  return text;
}

class RowFormats : public testing::Test {
 protected:
  void SetUp() override {
    declaration_ = ReadDeclaration();
    ASSERT_TRUE(declaration_.is_object()) << "cannot read " << ROW_FORMATS_JSON;
    for (const Json& dtype : declaration_.at("dtypes")) {
      names_.push_back(dtype.at("name").get<std::string>());
      if (dtype.value("bit_packed", false)) {
        bit_packed_.push_back(names_.back());
      }
    }
  }

  std::string Message(const std::string& parameter, const std::string& name,
                      const std::map<std::string, std::string>& values) const {
    return "invalid_parameter '" + parameter +
           "': " + Render(declaration_.at("messages").at(name).get<std::string>(), values);
  }

  Json declaration_;
  std::vector<std::string> names_;
  std::vector<std::string> bit_packed_;
};

TEST_F(RowFormats, EncoderKnowsExactlyTheDeclaredDtypesInOrder) {
  std::vector<std::string> encoded;
  for (const FormatSpec& spec : kFormats) {
    encoded.emplace_back(spec.name);
  }
  // In order too: the unknown-dtype message lists them in this order.
  EXPECT_EQ(encoded, names_);
}

TEST_F(RowFormats, EachDeclaredDtypeEncodesItsDeclaredBytesPerRow) {
  const std::vector<float> values(kDims, 0.5f);
  for (const Json& dtype : declaration_.at("dtypes")) {
    const std::string name = dtype.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const std::optional<Format> format = ParseFormat(name);
    ASSERT_TRUE(format.has_value());
    EXPECT_EQ(FormatName(*format), name);
    const bool bit_packed = dtype.value("bit_packed", false);
    EXPECT_EQ(IsBitPacked(*format), bit_packed);
    const size_t row_bytes =
        bit_packed ? kDims / 8 : kDims * dtype.at("bytes_per_value").get<size_t>();
    ASSERT_EQ(EncodedRowBytes(*format, kDims), row_bytes);
    // EncodeRow writes exactly those bytes: what it writes is the same over
    // two different fills, and the fill after the row is untouched.
    std::vector<uint8_t> zeros(row_bytes + 8, 0x00);
    std::vector<uint8_t> ones(row_bytes + 8, 0xFF);
    EncodeRow(*format, values.data(), kDims, zeros.data());
    EncodeRow(*format, values.data(), kDims, ones.data());
    EXPECT_TRUE(std::equal(zeros.begin(), zeros.begin() + row_bytes, ones.begin()));
    EXPECT_EQ(std::vector<uint8_t>(zeros.begin() + row_bytes, zeros.end()),
              std::vector<uint8_t>(8, 0x00));
    EXPECT_EQ(std::vector<uint8_t>(ones.begin() + row_bytes, ones.end()),
              std::vector<uint8_t>(8, 0xFF));
  }
}

TEST_F(RowFormats, RefusesANameNotDeclared) {
  std::vector<std::string> undeclared = {"", "float64", "FLOAT32", "bfloat16", "bit"};
  for (const std::string& name : names_) {
    undeclared.push_back(name + "x");
    undeclared.push_back(name.substr(0, name.size() - 1));
  }
  for (const std::string& name : undeclared) {
    if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
      continue;  // a prefix that is itself declared
    }
    EXPECT_FALSE(ParseFormat(name).has_value()) << name;
    EXPECT_EQ(
        ParseOptions({{"dtype", std::string_view(name)}}).error,
        Message("dtype", "unknown_dtype", {{"dtype", name}, {"dtypes", Listed(names_, "or")}}));
  }
}

TEST_F(RowFormats, OptionsReadTheDeclaredNamesWithTheDeclaredDefaults) {
  const RequestOptions defaults = ParseOptions({}).options;
  for (const Json& option : declaration_.at("options")) {
    const std::string name = option.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const Json& value = option.at("default");
    if (name == "dtype") {
      EXPECT_EQ(FormatName(defaults.format), value.get<std::string>());
    } else if (name == "dimensions") {
      EXPECT_TRUE(value.is_null());  // all of the model's dimensions
      EXPECT_FALSE(defaults.dimensions.has_value());
    } else if (name == "normalize") {
      EXPECT_EQ(defaults.normalize, value.get<bool>());
    } else {
      ADD_FAILURE() << "an option the serializer does not read";
    }
    // No option takes a float, so each names its own type.
    EXPECT_EQ(ParseOptions({{name, 0.5}}).error,
              Message(name, "wrong_type", {{"type", option.at("type").get<std::string>()}}));
  }
}

TEST_F(RowFormats, DimensionMessagesHaveTheDeclaredWording) {
  RequestOptions options;
  options.dimensions = 0;
  EXPECT_EQ(ValidateOptions(options, kDims),
            Message("dimensions", "dimensions_outside",
                    {{"dimensions", "0"}, {"model_dims", std::to_string(kDims)}}));
  ASSERT_FALSE(bit_packed_.empty());
  for (const std::string& name : bit_packed_) {
    options.format = *ParseFormat(name);
    options.dimensions = 100;
    EXPECT_EQ(ValidateOptions(options, kDims),
              Message("dimensions", "not_whole_bytes",
                      {{"bit_packed", Listed(bit_packed_, "and")}, {"dimensions", "100"}}));
  }
}

// The "sparse" section: the layout of a sparse row, its options and messages.
class SparseRows : public RowFormats {
 protected:
  void SetUp() override {
    RowFormats::SetUp();
    sparse_ = declaration_.at("sparse");
    for (const Json& option : sparse_.at("options")) {
      options_.push_back(option.at("name").get<std::string>());
    }
  }

  std::string SparseMessage(const std::string& parameter, const std::string& name,
                            const std::map<std::string, std::string>& values) const {
    return "invalid_parameter '" + parameter +
           "': " + Render(sparse_.at("messages").at(name).get<std::string>(), values);
  }

  Json sparse_;
  std::vector<std::string> options_;
};

TEST_F(SparseRows, ValuesTakeExactlyTheDeclaredDtypesInOrderAndWidths) {
  std::vector<std::string> encoded;
  for (const Format format : kSparseValueFormats) {
    encoded.emplace_back(FormatName(format));
  }
  std::vector<std::string> declared;
  for (const Json& dtype : sparse_.at("value_dtypes")) {
    declared.push_back(dtype.at("name").get<std::string>());
    const size_t bytes_per_value = dtype.at("bytes_per_value").get<size_t>();
    const std::optional<Format> format = ParseFormat(declared.back());
    ASSERT_TRUE(format.has_value()) << declared.back();
    EXPECT_EQ(EncodedRowBytes(*format, 1), bytes_per_value) << declared.back();
    // count | n indices | n values.
    EXPECT_EQ(SparseRowBytes(*format, 3),
              sparse_.at("count").at("bytes").get<size_t>() +
                  3 * (sparse_.at("index").at("bytes").get<size_t>() + bytes_per_value));
  }
  // In order too: the unknown-dtype message lists them in this order.
  EXPECT_EQ(encoded, declared);
  EXPECT_EQ(sparse_.at("count").at("bytes").get<size_t>(), kSparseCountBytes);
  EXPECT_EQ(sparse_.at("index").at("bytes").get<size_t>(), kSparseIndexBytes);
}

TEST_F(SparseRows, OptionsReadTheDeclaredNamesWithTheDeclaredDefaults) {
  EXPECT_EQ(options_, std::vector<std::string>(std::begin(kSparseOptionNames),
                                               std::end(kSparseOptionNames)));
  const SparseOptions defaults = ParseSparseOptions({}).options;
  for (const Json& option : sparse_.at("options")) {
    const std::string name = option.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const Json& value = option.at("default");
    if (name == "dtype") {
      EXPECT_EQ(FormatName(defaults.value_format), value.get<std::string>());
    } else {
      EXPECT_TRUE(value.is_null());  // every active entry
      EXPECT_FALSE(defaults.max_active_dims.has_value());
    }
    EXPECT_EQ(ParseSparseOptions({{name, 0.5}}).error,
              Message(name, "wrong_type", {{"type", option.at("type").get<std::string>()}}));
  }
}

TEST_F(SparseRows, MessagesHaveTheDeclaredWording) {
  std::vector<std::string> value_dtypes;
  for (const Json& dtype : sparse_.at("value_dtypes")) {
    value_dtypes.push_back(dtype.at("name").get<std::string>());
  }
  for (const std::string& name : {std::string("int8"), std::string("float64")}) {
    EXPECT_EQ(ParseSparseOptions({{"dtype", std::string_view(name)}}).error,
              SparseMessage("dtype", "unknown_value_dtype",
                            {{"dtype", name}, {"value_dtypes", Listed(value_dtypes, "or")}}));
  }
  SparseOptions options;
  options.max_active_dims = kDims + 1;
  EXPECT_EQ(ValidateSparseOptions(options, kDims),
            SparseMessage("max_active_dims", "max_active_dims_outside",
                          {{"max_active_dims", std::to_string(kDims + 1)},
                           {"vocab_size", std::to_string(kDims)}}));
}

TEST_F(SparseRows, RefusesEveryDenseOptionThatIsNotASparseOne) {
  std::vector<std::string> dense_only;
  for (const Json& option : declaration_.at("options")) {
    const std::string name = option.at("name").get<std::string>();
    if (std::find(options_.begin(), options_.end(), name) == options_.end()) {
      dense_only.push_back(name);
    }
  }
  EXPECT_EQ(dense_only, std::vector<std::string>(std::begin(kDenseOnlyOptions),
                                                 std::end(kDenseOnlyOptions)));
  for (const std::string& name : dense_only) {
    EXPECT_EQ(ParseSparseOptions({{name, int64_t{1}}}).error,
              SparseMessage(name, "dense_option", {{"options", Listed(options_, "and")}}));
  }
}

// The "multivector" section: the layout of a multi-vector row, its options
// and messages; its dtypes are the dense ones, with the dense messages.
class MultiVectorRows : public RowFormats {
 protected:
  void SetUp() override {
    RowFormats::SetUp();
    multivector_ = declaration_.at("multivector");
    for (const Json& option : multivector_.at("options")) {
      options_.push_back(option.at("name").get<std::string>());
    }
  }

  std::string MultiVectorMessage(const std::string& parameter, const std::string& name,
                                 const std::map<std::string, std::string>& values) const {
    return "invalid_parameter '" + parameter +
           "': " + Render(multivector_.at("messages").at(name).get<std::string>(), values);
  }

  Json multivector_;
  std::vector<std::string> options_;
};

TEST_F(MultiVectorRows, RowsAreTheCountThenEachVectorAsADenseRow) {
  const size_t count_bytes = multivector_.at("count").at("bytes").get<size_t>();
  EXPECT_EQ(count_bytes, kMultiVectorCountBytes);
  EXPECT_EQ(multivector_.at("count").at("numpy").get<std::string>(), "<u4");
  for (const std::string& name : names_) {
    SCOPED_TRACE(name);
    const Format format = *ParseFormat(name);
    EXPECT_EQ(MultiVectorRowBytes(format, kDims, 3),
              count_bytes + 3 * EncodedRowBytes(format, kDims));
  }
}

TEST_F(MultiVectorRows, OptionsReadTheDeclaredNamesWithTheDeclaredDefaults) {
  EXPECT_EQ(options_, std::vector<std::string>(std::begin(kMultiVectorOptionNames),
                                               std::end(kMultiVectorOptionNames)));
  const MultiVectorOptions defaults = ParseMultiVectorOptions({}).options;
  for (const Json& option : multivector_.at("options")) {
    const std::string name = option.at("name").get<std::string>();
    SCOPED_TRACE(name);
    ASSERT_EQ(name, "dtype");
    EXPECT_EQ(FormatName(defaults.format), option.at("default").get<std::string>());
    EXPECT_EQ(ParseMultiVectorOptions({{name, 0.5}}).error,
              Message(name, "wrong_type", {{"type", option.at("type").get<std::string>()}}));
  }
}

TEST_F(MultiVectorRows, DtypesAreTheDenseOnesWithTheDenseMessages) {
  for (const std::string& name : names_) {
    const ParsedMultiVectorOptions parsed =
        ParseMultiVectorOptions({{"dtype", std::string_view(name)}});
    EXPECT_EQ(parsed.error, "") << name;
    EXPECT_EQ(FormatName(parsed.options.format), name);
  }
  EXPECT_EQ(ParseMultiVectorOptions({{"dtype", std::string_view("float64")}}).error,
            Message("dtype", "unknown_dtype",
                    {{"dtype", "float64"}, {"dtypes", Listed(names_, "or")}}));
  ASSERT_FALSE(bit_packed_.empty());
  for (const std::string& name : bit_packed_) {
    MultiVectorOptions options;
    options.format = *ParseFormat(name);
    EXPECT_EQ(ValidateMultiVectorOptions(options, kDims), "") << name;
    // Named after dtype, the option at fault, with the vectors' width.
    EXPECT_EQ(ValidateMultiVectorOptions(options, 100),
              Message("dtype", "not_whole_bytes",
                      {{"bit_packed", Listed(bit_packed_, "and")}, {"dimensions", "100"}}));
  }
}

TEST_F(MultiVectorRows, RefusesEveryDenseAndSparseOptionThatIsNotAMultiVectorOne) {
  std::vector<std::string> refused;
  for (const Json* section : {&declaration_, &declaration_.at("sparse")}) {
    for (const Json& option : section->at("options")) {
      const std::string name = option.at("name").get<std::string>();
      const bool known = std::find(options_.begin(), options_.end(), name) != options_.end() ||
                         std::find(refused.begin(), refused.end(), name) != refused.end();
      if (!known) {
        refused.push_back(name);
      }
    }
  }
  EXPECT_EQ(refused, std::vector<std::string>(std::begin(kMultiVectorRefusedOptions),
                                              std::end(kMultiVectorRefusedOptions)));
  for (const std::string& name : refused) {
    EXPECT_EQ(ParseMultiVectorOptions({{name, int64_t{1}}}).error,
              MultiVectorMessage(name, "refused_option", {{"options", Listed(options_, "and")}}));
  }
}

}  // namespace
}  // namespace embedding_serializer
