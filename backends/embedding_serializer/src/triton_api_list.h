// The part of Triton's C API this backend uses, as in release 24.10 (Triton
// 2.51, TRITONBACKEND API 1.19), written as lists: triton_api.h turns them
// into declarations, and triton_api_check.cc (EMBEDDING_SERIALIZER_CHECK_API)
// compares every entry with Triton's own headers. The lists exist because no
// package on our build machines ships those headers.
#pragma once

#define EMBEDDING_SERIALIZER_TRITONBACKEND_API_MAJOR 1
#define EMBEDDING_SERIALIZER_TRITONBACKEND_API_MINOR 19

// Enumerators as X(name, value); the values cross the ABI.
#define EMBEDDING_SERIALIZER_DATA_TYPES(X) \
  X(TRITONSERVER_TYPE_INVALID, 0)          \
  X(TRITONSERVER_TYPE_BOOL, 1)             \
  X(TRITONSERVER_TYPE_UINT8, 2)            \
  X(TRITONSERVER_TYPE_UINT16, 3)           \
  X(TRITONSERVER_TYPE_UINT32, 4)           \
  X(TRITONSERVER_TYPE_UINT64, 5)           \
  X(TRITONSERVER_TYPE_INT8, 6)             \
  X(TRITONSERVER_TYPE_INT16, 7)            \
  X(TRITONSERVER_TYPE_INT32, 8)            \
  X(TRITONSERVER_TYPE_INT64, 9)            \
  X(TRITONSERVER_TYPE_FP16, 10)            \
  X(TRITONSERVER_TYPE_FP32, 11)            \
  X(TRITONSERVER_TYPE_FP64, 12)            \
  X(TRITONSERVER_TYPE_BYTES, 13)           \
  X(TRITONSERVER_TYPE_BF16, 14)

#define EMBEDDING_SERIALIZER_MEMORY_TYPES(X) \
  X(TRITONSERVER_MEMORY_CPU, 0)              \
  X(TRITONSERVER_MEMORY_CPU_PINNED, 1)       \
  X(TRITONSERVER_MEMORY_GPU, 2)

#define EMBEDDING_SERIALIZER_PARAMETER_TYPES(X) \
  X(TRITONSERVER_PARAMETER_STRING, 0)           \
  X(TRITONSERVER_PARAMETER_INT, 1)              \
  X(TRITONSERVER_PARAMETER_BOOL, 2)             \
  X(TRITONSERVER_PARAMETER_DOUBLE, 3)           \
  X(TRITONSERVER_PARAMETER_BYTES, 4)

#define EMBEDDING_SERIALIZER_LOG_LEVELS(X) \
  X(TRITONSERVER_LOG_INFO, 0)              \
  X(TRITONSERVER_LOG_WARN, 1)              \
  X(TRITONSERVER_LOG_ERROR, 2)             \
  X(TRITONSERVER_LOG_VERBOSE, 3)

#define EMBEDDING_SERIALIZER_ERROR_CODES(X) \
  X(TRITONSERVER_ERROR_UNKNOWN, 0)          \
  X(TRITONSERVER_ERROR_INTERNAL, 1)         \
  X(TRITONSERVER_ERROR_NOT_FOUND, 2)        \
  X(TRITONSERVER_ERROR_INVALID_ARG, 3)      \
  X(TRITONSERVER_ERROR_UNAVAILABLE, 4)      \
  X(TRITONSERVER_ERROR_UNSUPPORTED, 5)      \
  X(TRITONSERVER_ERROR_ALREADY_EXISTS, 6)   \
  X(TRITONSERVER_ERROR_CANCELLED, 7)

#define EMBEDDING_SERIALIZER_REQUEST_RELEASE_FLAGS(X) \
  X(TRITONSERVER_REQUEST_RELEASE_ALL, 1)

#define EMBEDDING_SERIALIZER_RESPONSE_COMPLETE_FLAGS(X) \
  X(TRITONSERVER_RESPONSE_COMPLETE_FINAL, 1)

// Functions the backend calls, as X(return type, name, (parameters)).
#define EMBEDDING_SERIALIZER_TRITON_FUNCTIONS(X)                                       \
  X(TRITONSERVER_Error*, TRITONSERVER_ErrorNew,                                        \
    (TRITONSERVER_Error_Code code, const char* msg))                                   \
  X(void, TRITONSERVER_ErrorDelete, (TRITONSERVER_Error* error))                       \
  X(const char*, TRITONSERVER_ErrorMessage, (TRITONSERVER_Error* error))               \
  X(TRITONSERVER_Error*, TRITONSERVER_LogMessage,                                      \
    (TRITONSERVER_LogLevel level, const char* filename, const int line,                \
     const char* msg))                                                                 \
  X(TRITONSERVER_Error*, TRITONSERVER_MessageDelete, (TRITONSERVER_Message* message))  \
  X(TRITONSERVER_Error*, TRITONSERVER_MessageSerializeToJson,                          \
    (TRITONSERVER_Message* message, const char** base, size_t* byte_size))             \
  X(TRITONSERVER_Error*, TRITONBACKEND_ApiVersion, (uint32_t* major, uint32_t* minor)) \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelConfig,                                    \
    (TRITONBACKEND_Model* model, const uint32_t config_version,                        \
     TRITONSERVER_Message** model_config))                                             \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelState,                                     \
    (TRITONBACKEND_Model* model, void** state))                                        \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelSetState,                                  \
    (TRITONBACKEND_Model* model, void* state))                                         \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelInstanceModel,                             \
    (TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model))              \
  X(TRITONSERVER_Error*, TRITONBACKEND_RequestInput,                                   \
    (TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input))   \
  X(TRITONSERVER_Error*, TRITONBACKEND_InputProperties,                                \
    (TRITONBACKEND_Input* input, const char** name, TRITONSERVER_DataType* datatype,   \
     const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size,                 \
     uint32_t* buffer_count))                                                          \
  X(TRITONSERVER_Error*, TRITONBACKEND_InputBuffer,                                    \
    (TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,            \
     uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type,                 \
     int64_t* memory_type_id))                                                         \
  X(TRITONSERVER_Error*, TRITONBACKEND_RequestParameterCount,                          \
    (TRITONBACKEND_Request* request, uint32_t* count))                                 \
  X(TRITONSERVER_Error*, TRITONBACKEND_RequestParameter,                               \
    (TRITONBACKEND_Request* request, const uint32_t index, const char** key,           \
     TRITONSERVER_ParameterType* type, const void** vvalue))                           \
  X(TRITONSERVER_Error*, TRITONBACKEND_RequestRelease,                                 \
    (TRITONBACKEND_Request* request, uint32_t release_flags))                          \
  X(TRITONSERVER_Error*, TRITONBACKEND_ResponseNew,                                    \
    (TRITONBACKEND_Response** response, TRITONBACKEND_Request* request))               \
  X(TRITONSERVER_Error*, TRITONBACKEND_ResponseDelete,                                 \
    (TRITONBACKEND_Response* response))                                                \
  X(TRITONSERVER_Error*, TRITONBACKEND_ResponseOutput,                                 \
    (TRITONBACKEND_Response* response, TRITONBACKEND_Output** output,                  \
     const char* name, const TRITONSERVER_DataType datatype, const int64_t* shape,     \
     const uint32_t dims_count))                                                       \
  X(TRITONSERVER_Error*, TRITONBACKEND_OutputBuffer,                                   \
    (TRITONBACKEND_Output* output, void** buffer, const uint64_t buffer_byte_size,     \
     TRITONSERVER_MemoryType* memory_type, int64_t* memory_type_id))                   \
  X(TRITONSERVER_Error*, TRITONBACKEND_ResponseSend,                                   \
    (TRITONBACKEND_Response* response, const uint32_t send_flags,                      \
     TRITONSERVER_Error* error))                                                       \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelInstanceReportStatistics,                  \
    (TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request* request,            \
     const bool success, const uint64_t exec_start_ns,                                 \
     const uint64_t compute_start_ns, const uint64_t compute_end_ns,                   \
     const uint64_t exec_end_ns))                                                      \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelInstanceReportBatchStatistics,             \
    (TRITONBACKEND_ModelInstance* instance, const uint64_t batch_size,                 \
     const uint64_t exec_start_ns, const uint64_t compute_start_ns,                    \
     const uint64_t compute_end_ns, const uint64_t exec_end_ns))

// Entry points the backend implements; Triton looks them up by name.
#define EMBEDDING_SERIALIZER_ENTRY_POINTS(X)                                          \
  X(TRITONSERVER_Error*, TRITONBACKEND_Initialize, (TRITONBACKEND_Backend* backend))  \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelInitialize, (TRITONBACKEND_Model* model)) \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelFinalize, (TRITONBACKEND_Model* model))   \
  X(TRITONSERVER_Error*, TRITONBACKEND_ModelInstanceExecute,                          \
    (TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,         \
     const uint32_t request_count))
