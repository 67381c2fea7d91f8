// Logging into Triton's log with the file and line of the code that logs.
#pragma once

#include "triton_api.h"

namespace embedding_serializer {

// Neither throws: they are called where an exception must not escape.
void LogMessage(TRITONSERVER_LogLevel level, const char* file, int line,
                const char* message) noexcept;
// Logs "<context>: <error message>" and deletes `error`, if there is one.
void LogIfError(TRITONSERVER_Error* error, const char* context, const char* file,
                int line) noexcept;

}  // namespace embedding_serializer

#define SERIALIZER_LOG(level, message) \
  ::embedding_serializer::LogMessage((level), __FILE__, __LINE__, (message))
#define SERIALIZER_LOG_IF_ERROR(call, context) \
  ::embedding_serializer::LogIfError((call), (context), __FILE__, __LINE__)
