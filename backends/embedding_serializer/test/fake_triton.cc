#include "fake_triton.h"

#include <cstring>

namespace {

fake_triton::World* current = nullptr;

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  // memcpy from an empty vector's data() (maybe null) is undefined.
  if (!bytes.empty()) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  }
  return bytes;
}

TRITONBACKEND_Input Norm(const std::vector<float>& norm) {
  return {"NORM", TRITONSERVER_TYPE_FP32, {static_cast<int64_t>(norm.size()), 1}, Bytes(norm)};
}

void Record(const std::string& event) { current->events.push_back(event); }

TRITONSERVER_Error* Fail(const std::string& message) {
  return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, message.c_str());
}

}  // namespace

namespace fake_triton {

World& Reset() {
  static World instance;
  instance = World();
  current = &instance;
  return instance;
}

World& world() { return *current; }

TRITONBACKEND_Request MakeRequest(int id, const std::vector<float>& embedding, int64_t dims,
                                  const std::vector<float>& norm) {
  const int64_t rows = static_cast<int64_t>(embedding.size()) / dims;
  return {id,
          {{"EMBEDDING", TRITONSERVER_TYPE_FP32, {rows, dims}, Bytes(embedding)}, Norm(norm)},
          {},
          {}};
}

TRITONBACKEND_Request MakeFp16Request(int id, const std::vector<uint16_t>& embedding,
                                      int64_t dims, const std::vector<float>& norm) {
  const int64_t rows = static_cast<int64_t>(embedding.size()) / dims;
  return {id,
          {{"EMBEDDING", TRITONSERVER_TYPE_FP16, {rows, dims}, Bytes(embedding)}, Norm(norm)},
          {},
          {}};
}

TRITONBACKEND_Request MakeActivationsRequest(int id, const std::vector<float>& activations,
                                             int64_t vocab_size) {
  const int64_t rows = static_cast<int64_t>(activations.size()) / vocab_size;
  return {id,
          {{"ACTIVATIONS", TRITONSERVER_TYPE_FP32, {rows, vocab_size}, Bytes(activations)}},
          {},
          {}};
}

TRITONBACKEND_Request MakeMultiVectorRequest(int id, const std::vector<float>& vectors,
                                             const std::vector<int64_t>& mask,
                                             int64_t positions, int64_t dims) {
  const int64_t rows = static_cast<int64_t>(mask.size()) / positions;
  return {id,
          {{"TOKEN_VECTORS", TRITONSERVER_TYPE_FP32, {rows, positions, dims}, Bytes(vectors)},
           {"VECTOR_MASK", TRITONSERVER_TYPE_INT64, {rows, positions}, Bytes(mask)}},
          {},
          {}};
}

}  // namespace fake_triton

using fake_triton::world;

extern "C" {

TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  ++world().live_errors;
  return new TRITONSERVER_Error{code, msg};
}

void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* error) {
  --world().live_errors;
  delete error;
}

const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* error) {
  return error->message.c_str();
}

TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel, const char*, const int,
                                            const char*) {
  return nullptr;
}

TRITONSERVER_Error* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message) {
  delete message;
  return nullptr;
}

TRITONSERVER_Error* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* message,
                                                        const char** base, size_t* byte_size) {
  *base = message->json.data();
  *byte_size = message->json.size();
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor) {
  *major = 1;
  *minor = 19;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model, const uint32_t,
                                              TRITONSERVER_Message** model_config) {
  *model_config = new TRITONSERVER_Message{model->config_json};
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state) {
  *state = model->state;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state) {
  model->state = state;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance,
                                                     TRITONBACKEND_Model** model) {
  *model = instance->model;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name,
                                               TRITONBACKEND_Input** input) {
  for (TRITONBACKEND_Input& candidate : request->inputs) {
    if (candidate.name == name) {
      *input = &candidate;
      return nullptr;
    }
  }
  return Fail(std::string("no input ") + name);
}

TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name,
                                                  TRITONSERVER_DataType* datatype,
                                                  const int64_t** shape, uint32_t* dims_count,
                                                  uint64_t* byte_size, uint32_t* buffer_count) {
  if (name) *name = input->name.c_str();
  if (datatype) *datatype = input->datatype;
  if (shape) *shape = input->shape.data();
  if (dims_count) *dims_count = static_cast<uint32_t>(input->shape.size());
  if (byte_size) *byte_size = input->bytes.size();
  if (buffer_count) *buffer_count = 1;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t,
                                              const void** buffer, uint64_t* buffer_byte_size,
                                              TRITONSERVER_MemoryType* memory_type,
                                              int64_t* memory_type_id) {
  *buffer = input->bytes.data();
  *buffer_byte_size = input->bytes.size();
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_RequestParameterCount(TRITONBACKEND_Request* request,
                                                        uint32_t* count) {
  *count = static_cast<uint32_t>(request->string_parameters.size() +
                                 request->int_parameters.size());
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_RequestParameter(TRITONBACKEND_Request* request,
                                                   const uint32_t index, const char** key,
                                                   TRITONSERVER_ParameterType* type,
                                                   const void** vvalue) {
  const size_t strings = request->string_parameters.size();
  if (index < strings) {
    const auto& [name, value] = request->string_parameters.at(index);
    *key = name.c_str();
    *type = TRITONSERVER_PARAMETER_STRING;
    *vvalue = value.c_str();
    return nullptr;
  }
  const auto& [name, value] = request->int_parameters.at(index - strings);
  *key = name.c_str();
  *type = TRITONSERVER_PARAMETER_INT;
  *vvalue = &value;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request,
                                                 uint32_t release_flags) {
  Record("release " + std::to_string(request->id) +
         (release_flags == TRITONSERVER_REQUEST_RELEASE_ALL ? "" : " with other flags"));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response,
                                              TRITONBACKEND_Request* request) {
  if (request->id == world().fail_response_new_for) {
    return Fail("no response for request " + std::to_string(request->id));
  }
  Record("new " + std::to_string(request->id));
  ++world().live_responses;
  *response = new TRITONBACKEND_Response{request->id, {}};
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response) {
  Record("delete " + std::to_string(response->request_id));
  --world().live_responses;
  delete response;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response,
                                                 TRITONBACKEND_Output** output, const char*,
                                                 const TRITONSERVER_DataType,
                                                 const int64_t* shape,
                                                 const uint32_t dims_count) {
  response->output.shape.assign(shape, shape + dims_count);
  *output = &response->output;
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer,
                                               const uint64_t buffer_byte_size,
                                               TRITONSERVER_MemoryType* memory_type,
                                               int64_t* memory_type_id) {
  output->bytes.resize(buffer_byte_size);
  *buffer = output->bytes.data();
  *memory_type = TRITONSERVER_MEMORY_CPU;
  *memory_type_id = 0;
  return nullptr;
}

// Like Triton, takes the response whether or not the send succeeds.
TRITONSERVER_Error* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response,
                                               const uint32_t send_flags,
                                               TRITONSERVER_Error* error) {
  const int id = response->request_id;
  Record("send " + std::to_string(id) +
         (send_flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL ? "" : " not final"));
  world().sent.push_back({id, error ? error->message : "", response->output});
  --world().live_responses;
  delete response;
  return id == world().fail_send_for ? Fail("send failed") : nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportStatistics(
    TRITONBACKEND_ModelInstance*, TRITONBACKEND_Request* request, const bool success,
    const uint64_t exec_start_ns, const uint64_t compute_start_ns,
    const uint64_t compute_end_ns, const uint64_t exec_end_ns) {
  const bool ordered = exec_start_ns <= compute_start_ns && compute_start_ns <= compute_end_ns &&
                       compute_end_ns <= exec_end_ns;
  Record("stats " + std::to_string(request->id) + (success ? " success" : " failure") +
         (ordered ? "" : " with disordered times"));
  return nullptr;
}

TRITONSERVER_Error* TRITONBACKEND_ModelInstanceReportBatchStatistics(
    TRITONBACKEND_ModelInstance*, const uint64_t batch_size, const uint64_t, const uint64_t,
    const uint64_t, const uint64_t) {
  Record("batch " + std::to_string(batch_size));
  return nullptr;
}

}  // extern "C"
