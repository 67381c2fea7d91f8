#include "multivector_encoding.h"

namespace embedding_serializer {

size_t ServedVectors(const int64_t* mask, size_t positions) {
  size_t served = 0;
  for (size_t p = 0; p < positions; ++p) {
    served += mask[p] != 0 ? 1 : 0;
  }
  return served;
}

size_t MultiVectorRowBytes(Format format, size_t dims, size_t count) {
  return kMultiVectorCountBytes + count * EncodedRowBytes(format, dims);
}

void EncodeMultiVectorRow(Format format, const float* vectors, const int64_t* mask,
                          size_t positions, size_t dims, uint8_t* out) {
  StoreLittleEndian32(static_cast<uint32_t>(ServedVectors(mask, positions)), out);
  const size_t vector_bytes = EncodedRowBytes(format, dims);
  uint8_t* vector_out = out + kMultiVectorCountBytes;
  for (size_t p = 0; p < positions; ++p) {
    if (mask[p] != 0) {
      EncodeRow(format, vectors + p * dims, dims, vector_out);
      vector_out += vector_bytes;
    }
  }
}

}  // namespace embedding_serializer
