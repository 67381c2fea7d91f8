// The server's side of the Triton C API, faked so that the backend's entry
// points run in unit tests: it records what the backend does with requests,
// responses and statistics, and fails the calls a test chooses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "triton_api.h"

struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};

struct TRITONSERVER_Message {
  std::string json;
};

struct TRITONBACKEND_Model {
  std::string config_json;
  void* state = nullptr;
};

struct TRITONBACKEND_ModelInstance {
  TRITONBACKEND_Model* model;
};

struct TRITONBACKEND_Input {
  std::string name;
  TRITONSERVER_DataType datatype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct TRITONBACKEND_Request {
  int id;
  std::vector<TRITONBACKEND_Input> inputs;
  std::vector<std::pair<std::string, std::string>> string_parameters;
  // Handed over after the string parameters.
  std::vector<std::pair<std::string, int64_t>> int_parameters;
};

struct TRITONBACKEND_Output {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

struct TRITONBACKEND_Response {
  int request_id;
  TRITONBACKEND_Output output;
};

namespace fake_triton {

struct Sent {
  int request_id;
  std::string error;  // empty for a success
  TRITONBACKEND_Output output;
};

struct World {
  // Calls in order: "new 0", "send 0", "stats 0 success", "release 0",
  // "batch 3", "delete 0"; "stats 1 failure" for a failed request.
  std::vector<std::string> events;
  std::vector<Sent> sent;
  int live_errors = 0;     // made by TRITONSERVER_ErrorNew and not deleted
  int live_responses = 0;  // made by ResponseNew, neither sent nor deleted
  int fail_response_new_for = -1;  // request id whose ResponseNew fails
  int fail_send_for = -1;          // request id whose ResponseSend fails
};

// Starts a fresh world for each test.
World& Reset();
World& world();

// A request with EMBEDDING [rows, dims] (FP32, or FP16 bit patterns) and NORM.
TRITONBACKEND_Request MakeRequest(int id, const std::vector<float>& embedding, int64_t dims,
                                  const std::vector<float>& norm);
TRITONBACKEND_Request MakeFp16Request(int id, const std::vector<uint16_t>& embedding,
                                      int64_t dims, const std::vector<float>& norm);
// A request with ACTIVATIONS [rows, vocab_size] (FP32), for sparse rows.
TRITONBACKEND_Request MakeActivationsRequest(int id, const std::vector<float>& activations,
                                             int64_t vocab_size);
// A request with TOKEN_VECTORS [rows, positions, dims] (FP32) and VECTOR_MASK
// [rows, positions] (INT64), for multi-vector rows; rows = mask.size() / positions.
TRITONBACKEND_Request MakeMultiVectorRequest(int id, const std::vector<float>& vectors,
                                             const std::vector<int64_t>& mask,
                                             int64_t positions, int64_t dims);

}  // namespace fake_triton
