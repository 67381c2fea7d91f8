#include "response_output.h"

namespace embedding_serializer {

ErrorPtr AddRowsOutput(TRITONBACKEND_Response* response, const char* name, size_t rows,
                       size_t row_bytes, uint8_t** bytes) {
  const int64_t shape[2] = {static_cast<int64_t>(rows), static_cast<int64_t>(row_bytes)};
  TRITONBACKEND_Output* output = nullptr;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_ResponseOutput(response, &output, name,
                                                          TRITONSERVER_TYPE_UINT8, shape, 2));
  void* buffer = nullptr;
  // In: the memory we ask for; out: where Triton put the buffer.
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  SERIALIZER_RETURN_IF_ERROR(TRITONBACKEND_OutputBuffer(output, &buffer, rows * row_bytes,
                                                        &memory_type, &memory_type_id));
  if (memory_type == TRITONSERVER_MEMORY_GPU) {
    return MakeError(TRITONSERVER_ERROR_INTERNAL, "output buffer was allocated in GPU memory");
  }
  *bytes = static_cast<uint8_t*>(buffer);
  return nullptr;
}

}  // namespace embedding_serializer
