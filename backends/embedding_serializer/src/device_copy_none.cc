#include "device_copy.h"

namespace embedding_serializer {

bool GpuInputSupported() { return false; }

std::string CopyDeviceToHost(const void*, size_t, int64_t, std::vector<uint8_t>*) {
  return "the input is in GPU memory and this build of the serializer reads host "
         "memory only; build it with -DEMBEDDING_SERIALIZER_ENABLE_GPU=ON (needs the "
         "CUDA toolkit) or give the producing model host outputs";
}

}  // namespace embedding_serializer
