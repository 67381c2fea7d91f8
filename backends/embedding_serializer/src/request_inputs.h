// Reads what one request carries: its float and int64 inputs, wherever
// Triton holds them, and its parameters, without Triton's types.
#pragma once

#include <cstdint>
#include <vector>

#include "input_gather.h"
#include "request_options.h"
#include "triton_api.h"
#include "triton_error.h"

namespace embedding_serializer {

struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct Int64Tensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> values;
};

// Reads input `name`, declared in the model configuration as `declared`,
// into host memory as float32.
ErrorPtr ReadFloatInput(TRITONBACKEND_Request* request, const char* name,
                        ElementType declared, FloatTensor* tensor);

// Reads input `name`, declared in the model configuration as TYPE_INT64,
// into host memory.
ErrorPtr ReadInt64Input(TRITONBACKEND_Request* request, const char* name, Int64Tensor* tensor);

// The request's parameters; the values point into the request.
ErrorPtr ReadParameters(TRITONBACKEND_Request* request,
                        std::vector<Parameter>* parameters);

}  // namespace embedding_serializer
