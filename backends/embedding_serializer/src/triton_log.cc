#include "triton_log.h"

#include <string>

#include "triton_error.h"

namespace embedding_serializer {

void LogMessage(TRITONSERVER_LogLevel level, const char* file, int line,
                const char* message) noexcept {
  // Nowhere left to report a failure to log.
  ErrorPtr(TRITONSERVER_LogMessage(level, file, line, message));
}

void LogIfError(TRITONSERVER_Error* raw, const char* context, const char* file,
                int line) noexcept {
  const ErrorPtr error(raw);
  if (error == nullptr) {
    return;
  }
  try {
    const std::string message =
        std::string(context) + ": " + TRITONSERVER_ErrorMessage(error.get());
    LogMessage(TRITONSERVER_LOG_ERROR, file, line, message.c_str());
  } catch (...) {
    LogMessage(TRITONSERVER_LOG_ERROR, file, line, context);
  }
}

}  // namespace embedding_serializer
