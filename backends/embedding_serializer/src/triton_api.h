// Declarations of the Triton C API this backend uses, made from the lists in
// triton_api_list.h. The symbols resolve from the server process that loads
// the backend, so nothing is linked at build time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "triton_api_list.h"

extern "C" {

struct TRITONSERVER_Error;
struct TRITONSERVER_Message;
struct TRITONBACKEND_Backend;
struct TRITONBACKEND_Input;
struct TRITONBACKEND_Model;
struct TRITONBACKEND_ModelInstance;
struct TRITONBACKEND_Output;
struct TRITONBACKEND_Request;
struct TRITONBACKEND_Response;

#define EMBEDDING_SERIALIZER_ENUMERATOR(name, value) name = value,

typedef enum TRITONSERVER_datatype_enum {
  EMBEDDING_SERIALIZER_DATA_TYPES(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_DataType;

typedef enum TRITONSERVER_memorytype_enum {
  EMBEDDING_SERIALIZER_MEMORY_TYPES(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_MemoryType;

typedef enum TRITONSERVER_parametertype_enum {
  EMBEDDING_SERIALIZER_PARAMETER_TYPES(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_ParameterType;

typedef enum TRITONSERVER_loglevel_enum {
  EMBEDDING_SERIALIZER_LOG_LEVELS(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_LogLevel;

typedef enum TRITONSERVER_errorcode_enum {
  EMBEDDING_SERIALIZER_ERROR_CODES(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_Error_Code;

typedef enum tritonserver_requestreleaseflag_enum {
  EMBEDDING_SERIALIZER_REQUEST_RELEASE_FLAGS(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_RequestReleaseFlag;

typedef enum tritonserver_responsecompleteflag_enum {
  EMBEDDING_SERIALIZER_RESPONSE_COMPLETE_FLAGS(EMBEDDING_SERIALIZER_ENUMERATOR)
} TRITONSERVER_ResponseCompleteFlag;

#undef EMBEDDING_SERIALIZER_ENUMERATOR

#define EMBEDDING_SERIALIZER_DECLARE(result, name, parameters) result name parameters;
EMBEDDING_SERIALIZER_TRITON_FUNCTIONS(EMBEDDING_SERIALIZER_DECLARE)
#undef EMBEDDING_SERIALIZER_DECLARE

// The library is built with hidden visibility; only these are exported.
#define EMBEDDING_SERIALIZER_DECLARE_EXPORTED(result, name, parameters) \
  __attribute__((__visibility__("default"))) result name parameters;
EMBEDDING_SERIALIZER_ENTRY_POINTS(EMBEDDING_SERIALIZER_DECLARE_EXPORTED)
#undef EMBEDDING_SERIALIZER_DECLARE_EXPORTED

}  // extern "C"
