#include "triton_error.h"

#include <exception>

namespace embedding_serializer {

ErrorPtr MakeError(TRITONSERVER_Error_Code code, const std::string& message) {
  return ErrorPtr(TRITONSERVER_ErrorNew(code, message.c_str()));
}

ErrorPtr CurrentExceptionAsError() noexcept {
  try {
    throw;
  } catch (const std::exception& exception) {
    return ErrorPtr(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, exception.what()));
  } catch (...) {
    return ErrorPtr(
        TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "unknown exception"));
  }
}

}  // namespace embedding_serializer
