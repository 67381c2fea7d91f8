// Owning TRITONSERVER_Error handles and the ways this backend makes them.
#pragma once

#include <memory>
#include <string>

#include "triton_api.h"

namespace embedding_serializer {

struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* error) const noexcept {
    TRITONSERVER_ErrorDelete(error);
  }
};
using ErrorPtr = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

ErrorPtr MakeError(TRITONSERVER_Error_Code code, const std::string& message);

// The exception being handled as an INTERNAL error; call only in a catch
// block. Exceptions must not cross the C API, so entry points end in one.
ErrorPtr CurrentExceptionAsError() noexcept;

}  // namespace embedding_serializer

// In a function returning ErrorPtr: returns the error of a Triton call.
#define SERIALIZER_RETURN_IF_ERROR(call)                          \
  do {                                                            \
    if (TRITONSERVER_Error* serializer_error_ = (call)) {         \
      return ::embedding_serializer::ErrorPtr(serializer_error_); \
    }                                                             \
  } while (false)
