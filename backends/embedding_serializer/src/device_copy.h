// Copies an input buffer that Triton hands over in GPU memory to host memory,
// once, so the row encoders read it like any host buffer. The CUDA copy is
// compiled only with -DEMBEDDING_SERIALIZER_ENABLE_GPU=ON (the Docker build);
// without it a GPU buffer is an error that says how to build with GPU input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace embedding_serializer {

// Whether this build can read GPU-resident input.
bool GpuInputSupported();

// Replaces `host` with the `size` bytes at `device` on GPU `device_id`.
// Returns an error message, empty on success.
std::string CopyDeviceToHost(const void* device, size_t size, int64_t device_id,
                             std::vector<uint8_t>* host);

}  // namespace embedding_serializer
