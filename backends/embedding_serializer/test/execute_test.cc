// The backend's entry points against a fake Triton (fake_triton.h): every
// request answered exactly once, statistics after the send, release last.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_triton.h"
#include "triton_api.h"

namespace {

using fake_triton::MakeActivationsRequest;
using fake_triton::MakeFp16Request;
using fake_triton::MakeMultiVectorRequest;
using fake_triton::MakeRequest;
using Events = std::vector<std::string>;

constexpr const char* kConfig = R"({"max_batch_size": 8,
  "input": [{"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": [-1]},
            {"name": "NORM", "data_type": "TYPE_FP32", "dims": [1]}],
  "output": [{"name": "EMBEDDING_BYTES", "data_type": "TYPE_UINT8", "dims": [-1]}]})";

constexpr const char* kSparseConfig = R"({"max_batch_size": 8,
  "parameters": {"rows": {"string_value": "sparse"}},
  "input": [{"name": "ACTIVATIONS", "data_type": "TYPE_FP32", "dims": [-1]}],
  "output": [{"name": "SPARSE_BYTES", "data_type": "TYPE_UINT8", "dims": [-1]}]})";

constexpr const char* kMultiVectorConfig = R"({"max_batch_size": 8,
  "parameters": {"rows": {"string_value": "multivector"}},
  "input": [{"name": "TOKEN_VECTORS", "data_type": "TYPE_FP32", "dims": [-1, -1]},
            {"name": "VECTOR_MASK", "data_type": "TYPE_INT64", "dims": [-1]}],
  "output": [{"name": "MULTIVECTOR_BYTES", "data_type": "TYPE_UINT8", "dims": [-1]}]})";

std::string Fp16Config() {
  std::string config = kConfig;
  return config.replace(config.find("TYPE_FP32"), 9, "TYPE_FP16");
}

std::vector<float> Floats(const TRITONBACKEND_Output& output) {
  std::vector<float> values(output.bytes.size() / sizeof(float));
  std::memcpy(values.data(), output.bytes.data(), output.bytes.size());
  return values;
}

class Backend : public ::testing::Test {
 protected:
  void SetUp() override { world_ = &fake_triton::Reset(); }

  void TearDown() override {
    if (model_.state != nullptr) {
      EXPECT_EQ(TRITONBACKEND_ModelFinalize(&model_), nullptr);
    }
    EXPECT_EQ(world_->live_errors, 0);
    EXPECT_EQ(world_->live_responses, 0);
  }

  void Load(const std::string& config) {
    model_.config_json = config;
    ASSERT_EQ(TRITONBACKEND_ModelInitialize(&model_), nullptr);
  }

  TRITONSERVER_Error* Execute(std::vector<TRITONBACKEND_Request>& requests) {
    std::vector<TRITONBACKEND_Request*> pointers;
    for (TRITONBACKEND_Request& request : requests) {
      pointers.push_back(&request);
    }
    return TRITONBACKEND_ModelInstanceExecute(&instance_, pointers.data(),
                                              static_cast<uint32_t>(pointers.size()));
  }

  // Takes the error Execute returned; "" for none.
  std::string Message(TRITONSERVER_Error* error) {
    const std::string message = error ? TRITONSERVER_ErrorMessage(error) : "";
    if (error != nullptr) {
      TRITONSERVER_ErrorDelete(error);
    }
    return message;
  }

  fake_triton::World* world_ = nullptr;
  TRITONBACKEND_Model model_;
  TRITONBACKEND_ModelInstance instance_{&model_};
};

TEST_F(Backend, InitializeAcceptsTheServersApiVersion) {
  EXPECT_EQ(TRITONBACKEND_Initialize(nullptr), nullptr);
}

TEST_F(Backend, AnswersEveryRequestThenReportsStatisticsThenReleasesIt) {
  Load(kConfig);
  std::vector<TRITONBACKEND_Request> requests = {
      MakeRequest(0, {0.6f, 0.8f}, 2, {1.0f}),
      MakeRequest(1, {1.0f, 0.0f, 0.0f, 1.0f}, 2, {1.0f, 1.0f})};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->events, (Events{"new 0", "new 1", "send 0", "send 1", "stats 0 success",
                                    "release 0", "stats 1 success", "release 1", "batch 3"}));
  ASSERT_EQ(world_->sent.size(), 2u);
  EXPECT_EQ(world_->sent[0].error, "");
  EXPECT_EQ(world_->sent[0].output.shape, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(Floats(world_->sent[0].output), (std::vector<float>{0.6f, 0.8f}));
  EXPECT_EQ(world_->sent[1].output.shape, (std::vector<int64_t>{2, 8}));
}

TEST_F(Backend, LeavesEveryRequestToTritonWhenAResponseCannotBeMade) {
  Load(kConfig);
  world_->fail_response_new_for = 1;
  std::vector<TRITONBACKEND_Request> requests = {MakeRequest(0, {1.0f}, 1, {1.0f}),
                                                 MakeRequest(1, {1.0f}, 1, {1.0f}),
                                                 MakeRequest(2, {1.0f}, 1, {1.0f})};
  // Triton then answers all three with this error; nothing was sent,
  // counted or released, and the one response made is deleted.
  EXPECT_EQ(Message(Execute(requests)), "no response for request 1");
  EXPECT_EQ(world_->events, (Events{"new 0", "delete 0"}));
}

TEST_F(Backend, AnswersABadRequestWithItsErrorAndServesTheRest) {
  Load(kConfig);
  std::vector<TRITONBACKEND_Request> requests = {MakeRequest(0, {1.0f}, 1, {1.0f}),
                                                 MakeRequest(1, {1.0f}, 1, {1.0f})};
  requests[0].string_parameters = {{"dtype", "float64"}};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->events, (Events{"new 0", "new 1", "send 0", "send 1", "stats 0 failure",
                                    "release 0", "stats 1 success", "release 1", "batch 1"}));
  EXPECT_EQ(world_->sent[0].error,
            "invalid_parameter 'dtype': unknown dtype 'float64' (expected float32, float16, "
            "int8, uint8, binary or ubinary)");
  EXPECT_EQ(world_->sent[1].error, "");
}

TEST_F(Backend, CountsAFailedSendAsAFailure) {
  Load(kConfig);
  world_->fail_send_for = 0;
  std::vector<TRITONBACKEND_Request> requests = {MakeRequest(0, {1.0f}, 1, {1.0f}),
                                                 MakeRequest(1, {1.0f, 0.0f}, 1, {1.0f, 1.0f})};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->events, (Events{"new 0", "new 1", "send 0", "send 1", "stats 0 failure",
                                    "release 0", "stats 1 success", "release 1", "batch 2"}));
}

TEST_F(Backend, ReadsFloat16EmbeddingsWhenTheConfigurationDeclaresThem) {
  Load(Fp16Config());
  // IEEE half 1.0 and -0.5.
  std::vector<TRITONBACKEND_Request> requests = {MakeFp16Request(0, {0x3C00, 0xB800}, 2, {1.0f})};
  EXPECT_EQ(Message(Execute(requests)), "");
  ASSERT_EQ(world_->sent.size(), 1u);
  EXPECT_EQ(world_->sent[0].error, "");
  EXPECT_EQ(Floats(world_->sent[0].output), (std::vector<float>{1.0f, -0.5f}));
}

TEST_F(Backend, RefusesAnInputOfAnotherTypeThanDeclared) {
  Load(Fp16Config());
  std::vector<TRITONBACKEND_Request> requests = {MakeRequest(0, {1.0f}, 1, {1.0f})};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->sent[0].error,
            "input 'EMBEDDING' must be TYPE_FP16, as the model configuration declares");
}

TEST_F(Backend, RefusesToLoadAConfigurationItCannotServe) {
  std::string config = kConfig;
  model_.config_json = config.replace(config.find("[1]"), 3, "[2]");
  TRITONSERVER_Error* error = TRITONBACKEND_ModelInitialize(&model_);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, TRITONSERVER_ERROR_INVALID_ARG);
  EXPECT_EQ(Message(error), "model configuration: input 'NORM' dims are [2]; expected [1]");
  EXPECT_EQ(model_.state, nullptr);
}

TEST_F(Backend, WritesSparseRowsPaddedToTheWidestAndFailsOnlyTheBadRequests) {
  Load(kSparseConfig);
  std::vector<TRITONBACKEND_Request> requests = {
      // Two rows: two active entries, then none.
      MakeActivationsRequest(0, {0.0f, 0.5f, 0.0f, 2.0f, 0.0f, 0.0f, -1.0f, 0.0f}, 4),
      MakeActivationsRequest(1, {1.0f, 0.0f, 0.0f, 0.0f}, 4),
      // The largest, 3 at index 1 (the lower of the tied two), as float16.
      MakeActivationsRequest(2, {1.0f, 3.0f, 3.0f, 0.0f}, 4),
      MakeActivationsRequest(3, {1.0f, 0.0f, 0.0f, 0.0f}, 4)};
  requests[1].int_parameters = {{"max_active_dims", 5}};
  requests[2].string_parameters = {{"dtype", "float16"}};
  requests[2].int_parameters = {{"max_active_dims", 1}};
  requests[3].int_parameters = {{"dimensions", 2}};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->events,
            (Events{"new 0", "new 1", "new 2", "new 3", "send 0", "send 1", "send 2", "send 3",
                    "stats 0 success", "release 0", "stats 1 failure", "release 1",
                    "stats 2 success", "release 2", "stats 3 failure", "release 3",
                    "batch 3"}));
  ASSERT_EQ(world_->sent.size(), 4u);
  EXPECT_EQ(world_->sent[0].error, "");
  EXPECT_EQ(world_->sent[0].output.shape, (std::vector<int64_t>{2, 20}));
  EXPECT_EQ(world_->sent[0].output.bytes,
            (std::vector<uint8_t>{
                2, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0x00, 0x00, 0x00, 0x3F, 0x00, 0x00, 0x00,
                0x40,                                                        // 0.5f, 2.0f
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));  // n = 0, padded
  EXPECT_EQ(world_->sent[1].error, "invalid_parameter 'max_active_dims': 5 is outside 1..4");
  EXPECT_EQ(world_->sent[2].error, "");
  EXPECT_EQ(world_->sent[2].output.shape, (std::vector<int64_t>{1, 10}));
  EXPECT_EQ(world_->sent[2].output.bytes,
            (std::vector<uint8_t>{1, 0, 0, 0, 1, 0, 0, 0, 0x00, 0x42}));  // half 3.0
  EXPECT_EQ(world_->sent[3].error,
            "invalid_parameter 'dimensions': sparse rows take dtype and max_active_dims only");
}

TEST_F(Backend, RefusesActivationsNotShapedAsRows) {
  Load(kSparseConfig);
  std::vector<TRITONBACKEND_Request> requests = {MakeActivationsRequest(0, {1.0f, 2.0f}, 2)};
  requests[0].inputs[0].shape = {2};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->sent[0].error, "input 'ACTIVATIONS' must have shape [N, V]");
}

TEST_F(Backend, WritesMultiVectorRowsPerRequestAndFailsOnlyTheBadRequests) {
  Load(kMultiVectorConfig);
  const std::vector<float> signs = {1, -1, 1, -1, 1, -1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1};
  std::vector<TRITONBACKEND_Request> requests = {
      // Two texts of three positions of two dims: two vectors, then one.
      MakeMultiVectorRequest(0, {1.0f, 0.5f, -1.0f, 0.25f, 9.0f, 9.0f,  //
                                 0.5f, 0.5f, 7.0f, 7.0f, 7.0f, 7.0f},
                             {1, 1, 0, 1, 0, 0}, 3, 2),
      // Its own T and D: two positions of eight dims, as ubinary.
      MakeMultiVectorRequest(1, signs, {1, 1}, 2, 8),
      // Two dims do not pack into whole bytes.
      MakeMultiVectorRequest(2, {1.0f, 0.5f}, {1}, 1, 2),
      MakeMultiVectorRequest(3, {1.0f, 0.5f}, {1}, 1, 2),
      // Another stage's parameters pass.
      MakeMultiVectorRequest(4, {1.0f, -0.5f}, {1}, 1, 2)};
  requests[1].string_parameters = {{"dtype", "ubinary"}};
  requests[2].string_parameters = {{"dtype", "binary"}};
  requests[3].int_parameters = {{"dimensions", 1}};
  requests[4].string_parameters = {{"dtype", "float16"}, {"prompt_name", "query"}};
  requests[4].int_parameters = {{"pool_factor", 2}};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->events,
            (Events{"new 0", "new 1", "new 2", "new 3", "new 4", "send 0", "send 1", "send 2",
                    "send 3", "send 4", "stats 0 success", "release 0", "stats 1 success",
                    "release 1", "stats 2 failure", "release 2", "stats 3 failure", "release 3",
                    "stats 4 success", "release 4", "batch 4"}));
  ASSERT_EQ(world_->sent.size(), 5u);
  EXPECT_EQ(world_->sent[0].error, "");
  EXPECT_EQ(world_->sent[0].output.shape, (std::vector<int64_t>{2, 20}));
  EXPECT_EQ(world_->sent[0].output.bytes,
            (std::vector<uint8_t>{
                2, 0, 0, 0, 0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x3F,  // 1.0, 0.5
                0x00, 0x00, 0x80, 0xBF, 0x00, 0x00, 0x80, 0x3E,              // -1.0, 0.25
                1, 0, 0, 0, 0x00, 0x00, 0x00, 0x3F, 0x00, 0x00, 0x00, 0x3F,  // 0.5, 0.5
                0, 0, 0, 0, 0, 0, 0, 0}));                                   // padding
  EXPECT_EQ(world_->sent[1].error, "");
  EXPECT_EQ(world_->sent[1].output.shape, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(world_->sent[1].output.bytes, (std::vector<uint8_t>{2, 0, 0, 0, 0xAA, 0x01}));
  EXPECT_EQ(world_->sent[2].error,
            "invalid_parameter 'dtype': binary and ubinary pack 8 dimensions per byte, so the "
            "dimensions must be a multiple of 8, got 2");
  EXPECT_EQ(world_->sent[3].error,
            "invalid_parameter 'dimensions': multi-vector rows take dtype only");
  EXPECT_EQ(world_->sent[4].error, "");
  EXPECT_EQ(world_->sent[4].output.bytes,
            (std::vector<uint8_t>{1, 0, 0, 0, 0x00, 0x3C, 0x00, 0xB8}));  // half 1.0, -0.5
}

TEST_F(Backend, WritesOnlyCountsForTextsWithoutPositions) {
  Load(kMultiVectorConfig);
  std::vector<TRITONBACKEND_Request> requests = {MakeMultiVectorRequest(0, {}, {}, 1, 4)};
  requests[0].inputs[0].shape = {2, 0, 4};
  requests[0].inputs[1].shape = {2, 0};
  EXPECT_EQ(Message(Execute(requests)), "");
  EXPECT_EQ(world_->sent[0].error, "");
  EXPECT_EQ(world_->sent[0].output.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(world_->sent[0].output.bytes, (std::vector<uint8_t>(8, 0)));
}

TEST_F(Backend, RefusesMultiVectorInputsThatDisagree) {
  Load(kMultiVectorConfig);
  std::vector<TRITONBACKEND_Request> requests;
  for (int id = 0; id < 4; ++id) {
    requests.push_back(MakeMultiVectorRequest(id, {1.0f, 0.5f, 0.0f, 0.0f}, {1, 0}, 2, 2));
  }
  requests[0].inputs[0].shape = {4};
  requests[1].inputs[1].shape = {1, 1};
  requests[2].inputs[1].datatype = TRITONSERVER_TYPE_FP32;
  requests[3].inputs[0].shape = {1, 2, 4};
  EXPECT_EQ(Message(Execute(requests)), "");
  ASSERT_EQ(world_->sent.size(), 4u);
  EXPECT_EQ(world_->sent[0].error, "input 'TOKEN_VECTORS' must have shape [N, T, D]");
  EXPECT_EQ(world_->sent[1].error,
            "input 'VECTOR_MASK' must have shape [N, T], the first two of 'TOKEN_VECTORS' "
            "[N, T, D]");
  EXPECT_EQ(world_->sent[2].error,
            "input 'VECTOR_MASK' must be TYPE_INT64, as the model configuration declares");
  EXPECT_EQ(world_->sent[3].error, "input 'TOKEN_VECTORS' disagrees with its shape");
}

}  // namespace
