// What one request asks of the multi-vector serializer (the vectors' dtype),
// parsed from its request parameters. The names, defaults and messages are
// declared in row_formats.json's "multivector" section
// (test/row_formats_test.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "request_parameter.h"
#include "row_encoding.h"

namespace embedding_serializer {

inline constexpr std::string_view kMultiVectorOptionNames[] = {"dtype"};
// The options of dense and sparse rows that multi-vector rows do not take:
// refused by name rather than ignored, so that a client learns its
// `dimensions` had no effect.
inline constexpr std::string_view kMultiVectorRefusedOptions[] = {"dimensions", "normalize",
                                                                  "max_active_dims"};

struct MultiVectorOptions {
  Format format = Format::kFloat32;  // any of kFormats, as for dense rows
};

struct ParsedMultiVectorOptions {
  MultiVectorOptions options;
  // Empty on success; otherwise "invalid_parameter '<key>': <detail>".
  std::string error;
};

// Reads `dtype` (as dense rows read it, with the same messages) and refuses
// kMultiVectorRefusedOptions; other keys (the text options, any other stage's) are
// left to other pipeline stages, which see the same parameters.
ParsedMultiVectorOptions ParseMultiVectorOptions(const std::vector<Parameter>& parameters);

// Checks the format against the vectors' width: a bit-packed one needs
// whole bytes. Returns an error message as ParsedMultiVectorOptions::error
// has it (naming `dtype`, the option at fault), or "".
std::string ValidateMultiVectorOptions(const MultiVectorOptions& options, size_t vector_dims);

}  // namespace embedding_serializer
