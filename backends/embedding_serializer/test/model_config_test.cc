#include "model_config.h"

#include <gtest/gtest.h>

#include <string>

namespace embedding_serializer {
namespace {

// As Triton serializes the shipped config.pbtxt, trimmed to what matters.
constexpr const char* kShipped = R"({
  "name": "serializer", "backend": "embedding_serializer", "max_batch_size": 64,
  "input": [
    {"name": "EMBEDDING", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [-1],
     "is_shape_tensor": false, "optional": false},
    {"name": "NORM", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [1],
     "is_shape_tensor": false, "optional": false}
  ],
  "output": [
    {"name": "EMBEDDING_BYTES", "data_type": "TYPE_UINT8", "dims": [-1],
     "label_filename": "", "is_shape_tensor": false}
  ],
  "batch_input": [], "parameters": {}
})";

// kShipped with the first occurrence of `from` replaced by `to`.
std::string Shipped(const std::string& from, const std::string& to) {
  std::string config = kShipped;
  const size_t at = config.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? config : config.replace(at, from.size(), to);
}

std::string ErrorOf(const std::string& config) { return CheckModelConfig(config).error; }

// As Triton serializes model_repository/sparse/serializer/config.pbtxt, trimmed.
constexpr const char* kSparseShipped = R"({
  "name": "serializer", "backend": "embedding_serializer", "max_batch_size": 64,
  "input": [
    {"name": "ACTIVATIONS", "data_type": "TYPE_FP32", "format": "FORMAT_NONE", "dims": [-1],
     "is_shape_tensor": false, "optional": false}
  ],
  "output": [
    {"name": "SPARSE_BYTES", "data_type": "TYPE_UINT8", "dims": [-1],
     "label_filename": "", "is_shape_tensor": false}
  ],
  "batch_input": [], "parameters": {"rows": {"string_value": "sparse"}}
})";

std::string Sparse(const std::string& from, const std::string& to) {
  std::string config = kSparseShipped;
  const size_t at = config.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? config : config.replace(at, from.size(), to);
}

// As Triton serializes model_repository/multivector/serializer/config.pbtxt,
// trimmed.
constexpr const char* kMultiVectorShipped = R"({
  "name": "serializer", "backend": "embedding_serializer", "max_batch_size": 64,
  "input": [
    {"name": "TOKEN_VECTORS", "data_type": "TYPE_FP32", "format": "FORMAT_NONE",
     "dims": ["-1", "-1"], "is_shape_tensor": false, "optional": false},
    {"name": "VECTOR_MASK", "data_type": "TYPE_INT64", "format": "FORMAT_NONE",
     "dims": ["-1"], "is_shape_tensor": false, "optional": false}
  ],
  "output": [
    {"name": "MULTIVECTOR_BYTES", "data_type": "TYPE_UINT8", "dims": ["-1"],
     "label_filename": "", "is_shape_tensor": false}
  ],
  "batch_input": [], "parameters": {"rows": {"string_value": "multivector"}}
})";

std::string MultiVector(const std::string& from, const std::string& to) {
  std::string config = kMultiVectorShipped;
  const size_t at = config.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? config : config.replace(at, from.size(), to);
}

TEST(CheckModelConfig, AcceptsTheShippedConfigurationAsFloat32) {
  const ConfigCheck check = CheckModelConfig(kShipped);
  EXPECT_EQ(check.error, "");
  EXPECT_EQ(check.config.embedding_type, ElementType::kFloat32);
}

TEST(CheckModelConfig, ReadsFloat16EmbeddingsWhenDeclared) {
  const ConfigCheck check = CheckModelConfig(Shipped(
      R"("EMBEDDING", "data_type": "TYPE_FP32")", R"("EMBEDDING", "data_type": "TYPE_FP16")"));
  EXPECT_EQ(check.error, "");
  EXPECT_EQ(check.config.embedding_type, ElementType::kFloat16);
}

TEST(CheckModelConfig, AcceptsAFixedEmbeddingWidthAndIntegersAsStrings) {
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [-1])", R"("dims": [384])")), "");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": ["1"])")), "");
  EXPECT_EQ(ErrorOf(Shipped(R"("max_batch_size": 64)", R"("max_batch_size": "8")")), "");
}

TEST(CheckModelConfig, NamesAWrongDataType) {
  EXPECT_EQ(ErrorOf(Shipped(R"("EMBEDDING", "data_type": "TYPE_FP32")",
                            R"("EMBEDDING", "data_type": "TYPE_INT32")")),
            "model configuration: input 'EMBEDDING' data_type is TYPE_INT32; expected "
            "TYPE_FP32 or TYPE_FP16");
  EXPECT_EQ(ErrorOf(Shipped(R"("NORM", "data_type": "TYPE_FP32")",
                            R"("NORM", "data_type": "TYPE_FP16")")),
            "model configuration: input 'NORM' data_type is TYPE_FP16; expected TYPE_FP32");
  EXPECT_EQ(ErrorOf(Shipped(R"("data_type": "TYPE_UINT8")", R"("data_type": "TYPE_INT8")")),
            "model configuration: output 'EMBEDDING_BYTES' data_type is TYPE_INT8; expected "
            "TYPE_UINT8");
  EXPECT_EQ(ErrorOf(Shipped(R"("NORM", "data_type": "TYPE_FP32",)", R"("NORM",)")),
            "model configuration: input 'NORM' data_type is missing; expected TYPE_FP32");
}

TEST(CheckModelConfig, NamesWrongDims) {
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [-1])", R"("dims": [0])")),
            "model configuration: input 'EMBEDDING' dims are [0]; expected [-1] or one "
            "fixed size such as [384]");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [-1])", R"("dims": [-1, 384])")),
            "model configuration: input 'EMBEDDING' dims are [-1, 384]; expected [-1] or "
            "one fixed size such as [384]");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": [2])")),
            "model configuration: input 'NORM' dims are [2]; expected [1]");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": [1.5])")),
            "model configuration: input 'NORM' dims are [?]; expected [1]");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": 1)")),
            "model configuration: input 'NORM' dims are missing; expected [1]");
  const std::string output_fixed =
      Shipped(R"("TYPE_UINT8", "dims": [-1])", R"("TYPE_UINT8", "dims": [1536])");
  EXPECT_EQ(ErrorOf(output_fixed),
            "model configuration: output 'EMBEDDING_BYTES' dims are [1536]; expected [-1]");
}

TEST(CheckModelConfig, NamesMissingUnknownAndRenamedTensors) {
  EXPECT_EQ(ErrorOf(Shipped(R"("name": "NORM")", R"("name": "NORMS")")),
            "model configuration: input 'NORMS' is not one the serializer knows (expected "
            "EMBEDDING or NORM)");
  EXPECT_EQ(ErrorOf(Shipped(R"("name": "EMBEDDING_BYTES")", R"("name": "BYTES")")),
            "model configuration: output 'BYTES' is not one the serializer knows (expected "
            "EMBEDDING_BYTES)");
  EXPECT_EQ(ErrorOf(Shipped(R"("output": [)", R"("output": [], "unused": [)")),
            "model configuration: output 'EMBEDDING_BYTES' is missing");
  EXPECT_EQ(ErrorOf(Shipped(R"("input": [)", R"("inputs": [)")),
            "model configuration: 'input' is missing or not a list");
}

TEST(CheckModelConfig, NeedsBatching) {
  EXPECT_EQ(ErrorOf(Shipped(R"("max_batch_size": 64)", R"("max_batch_size": 0)")),
            "model configuration: max_batch_size is 0; expected at least 1, as the "
            "serializer reads batched rows");
  EXPECT_EQ(ErrorOf(Shipped(R"("max_batch_size": 64,)", "")),
            "model configuration: max_batch_size is missing; expected at least 1, as the "
            "serializer reads batched rows");
}

TEST(CheckModelConfig, RefusesReshape) {
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1],)", R"("dims": [1], "reshape": {"shape": []},)")),
            "model configuration: input 'NORM' sets reshape, which the serializer does not "
            "support");
}

TEST(CheckModelConfig, ReadsIntegersAsNumbersOrProtobufsStrings) {
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [-1])", R"("dims": ["-1"])")), "");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": ["9223372036854775807"])")),
            "model configuration: input 'NORM' dims are [9223372036854775807]; expected [1]");
  EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", R"("dims": [-9223372036854775808])")),
            "model configuration: input 'NORM' dims are [-9223372036854775808]; expected [1]");
  // Past int64, a fraction or exponent, padding, empty, or not a number at all.
  for (const char* dim : {"9223372036854775808", "1e0", R"("1 ")", R"("")", "true", "null"}) {
    EXPECT_EQ(ErrorOf(Shipped(R"("dims": [1])", std::string(R"("dims": [)") + dim + "]")),
              "model configuration: input 'NORM' dims are [?]; expected [1]")
        << dim;
  }
  EXPECT_EQ(ErrorOf(Shipped(R"("max_batch_size": 64)", R"("max_batch_size": "8x")")),
            "model configuration: max_batch_size is missing; expected at least 1, as the "
            "serializer reads batched rows");
}

TEST(CheckModelConfig, ReportsUnreadableJson) {
  for (const char* text : {"", "{", "{} x", R"({"a": 01})", "{\"a\": \"\xff\"}"}) {
    EXPECT_EQ(ErrorOf(text), "model configuration: not valid JSON") << text;
  }
  EXPECT_EQ(ErrorOf("[]"), "model configuration: not a JSON object");
  // Deep nesting is parsed and freed without recursion, so it cannot
  // exhaust the stack.
  EXPECT_EQ(ErrorOf(std::string(100000, '[')), "model configuration: not valid JSON");
  EXPECT_EQ(ErrorOf(std::string(100000, '[') + std::string(100000, ']')),
            "model configuration: not a JSON object");
}

TEST(CheckModelConfig, AcceptsTheShippedSparseConfigurationAsSparseRows) {
  const ConfigCheck check = CheckModelConfig(kSparseShipped);
  EXPECT_EQ(check.error, "");
  EXPECT_EQ(check.config.rows, RowKind::kSparse);
  EXPECT_EQ(CheckModelConfig(kShipped).config.rows, RowKind::kDense);
  const ConfigCheck dense = CheckModelConfig(
      Shipped(R"("parameters": {})", R"("parameters": {"rows": {"string_value": "dense"}})"));
  EXPECT_EQ(dense.error, "");
  EXPECT_EQ(dense.config.rows, RowKind::kDense);
}

TEST(CheckModelConfig, NamesABadRowsParameter) {
  EXPECT_EQ(ErrorOf(Sparse(R"("string_value": "sparse")", R"("string_value": "ragged")")),
            "model configuration: parameters 'rows' is 'ragged'; expected dense, sparse or "
            "multivector");
  EXPECT_EQ(ErrorOf(Sparse(R"({"string_value": "sparse"})", "{}")),
            "model configuration: parameters 'rows' is missing its string_value; expected "
            "dense, sparse or multivector");
  EXPECT_EQ(ErrorOf(Sparse(R"({"rows")", R"({"row")")),
            "model configuration: parameters 'row' is not one the serializer knows (expected "
            "rows)");
  EXPECT_EQ(ErrorOf(Sparse(R"("parameters": {"rows": {"string_value": "sparse"}})",
                           R"("parameters": [])")),
            "model configuration: 'parameters' is not a map");
}

TEST(CheckModelConfig, HoldsSparseRowsToActivationsAndSparseBytes) {
  EXPECT_EQ(ErrorOf(Sparse(R"("name": "ACTIVATIONS")", R"("name": "EMBEDDING")")),
            "model configuration: input 'EMBEDDING' is not one the serializer knows (expected "
            "ACTIVATIONS)");
  EXPECT_EQ(ErrorOf(Sparse(R"("TYPE_FP32")", R"("TYPE_FP16")")),
            "model configuration: input 'ACTIVATIONS' data_type is TYPE_FP16; expected "
            "TYPE_FP32");
  EXPECT_EQ(ErrorOf(Sparse(R"("dims": [-1])", R"("dims": [30522])")),
            "model configuration: input 'ACTIVATIONS' dims are [30522]; expected [-1]");
  EXPECT_EQ(ErrorOf(Sparse(R"("name": "SPARSE_BYTES")", R"("name": "EMBEDDING_BYTES")")),
            "model configuration: output 'EMBEDDING_BYTES' is not one the serializer knows "
            "(expected SPARSE_BYTES)");
  EXPECT_EQ(ErrorOf(Sparse(R"("TYPE_UINT8")", R"("TYPE_INT8")")),
            "model configuration: output 'SPARSE_BYTES' data_type is TYPE_INT8; expected "
            "TYPE_UINT8");
  EXPECT_EQ(ErrorOf(Sparse(R"("max_batch_size": 64)", R"("max_batch_size": 0)")),
            "model configuration: max_batch_size is 0; expected at least 1, as the "
            "serializer reads batched rows");
}

TEST(CheckModelConfig, AcceptsTheShippedMultiVectorConfigurationAsMultiVectorRows) {
  const ConfigCheck check = CheckModelConfig(kMultiVectorShipped);
  EXPECT_EQ(check.error, "");
  EXPECT_EQ(check.config.rows, RowKind::kMultiVector);
  EXPECT_EQ(ErrorOf(MultiVector(R"(["-1", "-1"])", "[-1, -1]")), "");
}

TEST(CheckModelConfig, HoldsMultiVectorRowsToTokenVectorsMaskAndBytes) {
  EXPECT_EQ(ErrorOf(MultiVector(R"("name": "VECTOR_MASK")", R"("name": "MASK")")),
            "model configuration: input 'MASK' is not one the serializer knows (expected "
            "TOKEN_VECTORS or VECTOR_MASK)");
  EXPECT_EQ(ErrorOf(MultiVector(R"("name": "TOKEN_VECTORS")", R"("name": "ACTIVATIONS")")),
            "model configuration: input 'ACTIVATIONS' is not one the serializer knows "
            "(expected TOKEN_VECTORS or VECTOR_MASK)");
  EXPECT_EQ(ErrorOf(MultiVector(R"("TYPE_FP32")", R"("TYPE_FP16")")),
            "model configuration: input 'TOKEN_VECTORS' data_type is TYPE_FP16; expected "
            "TYPE_FP32");
  EXPECT_EQ(ErrorOf(MultiVector(R"("TYPE_INT64")", R"("TYPE_INT32")")),
            "model configuration: input 'VECTOR_MASK' data_type is TYPE_INT32; expected "
            "TYPE_INT64");
  EXPECT_EQ(ErrorOf(MultiVector(R"("MULTIVECTOR_BYTES", "data_type": "TYPE_UINT8")",
                                R"("MULTIVECTOR_BYTES", "data_type": "TYPE_INT8")")),
            "model configuration: output 'MULTIVECTOR_BYTES' data_type is TYPE_INT8; expected "
            "TYPE_UINT8");
  EXPECT_EQ(ErrorOf(MultiVector(R"("name": "MULTIVECTOR_BYTES")", R"("name": "SPARSE_BYTES")")),
            "model configuration: output 'SPARSE_BYTES' is not one the serializer knows "
            "(expected MULTIVECTOR_BYTES)");
}

TEST(CheckModelConfig, NamesWrongMultiVectorDims) {
  for (const char* dims : {"[-1]", "[-1, 128]", "[-1, -1, -1]"}) {
    EXPECT_EQ(ErrorOf(MultiVector(R"(["-1", "-1"])", dims)),
              std::string("model configuration: input 'TOKEN_VECTORS' dims are ") + dims +
                  "; expected [-1, -1]");
  }
  EXPECT_EQ(ErrorOf(MultiVector(R"("dims": ["-1"], "is_shape_tensor": false, "optional")",
                                R"("dims": ["-1", "-1"], "is_shape_tensor": false, "optional")")),
            "model configuration: input 'VECTOR_MASK' dims are [-1, -1]; expected [-1]");
}

}  // namespace
}  // namespace embedding_serializer
