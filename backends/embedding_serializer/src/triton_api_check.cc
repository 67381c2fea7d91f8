// Built only with -DEMBEDDING_SERIALIZER_CHECK_API=ON: fails to compile
// where triton_api_list.h differs from Triton's own headers. Nothing here is
// linked into the backend.
#include <type_traits>

#include "triton/core/tritonbackend.h"
#include "triton_api_list.h"

static_assert(TRITONBACKEND_API_VERSION_MAJOR ==
                  EMBEDDING_SERIALIZER_TRITONBACKEND_API_MAJOR,
              "Triton's headers have another TRITONBACKEND API major version");
static_assert(TRITONBACKEND_API_VERSION_MINOR >=
                  EMBEDDING_SERIALIZER_TRITONBACKEND_API_MINOR,
              "Triton's headers are older than the TRITONBACKEND API listed");

// An enumerator Triton's headers lack does not compile either.
#define EMBEDDING_SERIALIZER_SAME_VALUE(name, value) \
  static_assert(name == value, #name " has another value in Triton's headers");
EMBEDDING_SERIALIZER_DATA_TYPES(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_MEMORY_TYPES(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_PARAMETER_TYPES(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_LOG_LEVELS(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_ERROR_CODES(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_REQUEST_RELEASE_FLAGS(EMBEDDING_SERIALIZER_SAME_VALUE)
EMBEDDING_SERIALIZER_RESPONSE_COMPLETE_FLAGS(EMBEDDING_SERIALIZER_SAME_VALUE)

// Each listed signature becomes a function type with C language linkage,
// named like the function inside `listed`, and must be exactly the type of
// Triton's declaration: parameter and return types, pointer levels and
// constness of pointees alike (top-level const on a parameter is not part of
// a function type in either). The parameter types name Triton's own structs
// and enums here, since this file does not include triton_api.h.
#define EMBEDDING_SERIALIZER_SAME_SIGNATURE(result, name, parameters) \
  namespace listed {                                                  \
  extern "C" typedef result name parameters;                          \
  }                                                                   \
  static_assert(std::is_same_v<decltype(::name), listed::name>,       \
                #name " is declared differently in Triton's headers");
EMBEDDING_SERIALIZER_TRITON_FUNCTIONS(EMBEDDING_SERIALIZER_SAME_SIGNATURE)
EMBEDDING_SERIALIZER_ENTRY_POINTS(EMBEDDING_SERIALIZER_SAME_SIGNATURE)
