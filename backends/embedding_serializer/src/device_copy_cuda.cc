#include <cuda_runtime_api.h>

#include "device_copy.h"

namespace embedding_serializer {
namespace {

// Makes `device` current for this scope and restores the caller's device, so
// the copy never changes which GPU the Triton thread works on.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    status_ = cudaGetDevice(&previous_);
    if (status_ == cudaSuccess && previous_ != device) {
      status_ = cudaSetDevice(device);
    }
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (status_ == cudaSuccess) {
      cudaSetDevice(previous_);
    }
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = 0;
  cudaError_t status_;
};

std::string CudaError(const char* what, cudaError_t status) {
  return std::string(what) + " failed: " + cudaGetErrorString(status);
}

}  // namespace

bool GpuInputSupported() { return true; }

std::string CopyDeviceToHost(const void* device, size_t size, int64_t device_id,
                             std::vector<uint8_t>* host) {
  ScopedDevice scope(static_cast<int>(device_id));
  if (scope.status() != cudaSuccess) {
    return CudaError("selecting the input's GPU", scope.status());
  }
  host->resize(size);
  // Synchronous: the bytes are needed on the host right away, and the
  // producer's stream has finished by the time Triton hands the tensor on.
  const cudaError_t status =
      cudaMemcpy(host->data(), device, size, cudaMemcpyDeviceToHost);
  if (status != cudaSuccess) {
    return CudaError("copying the input from GPU to host", status);
  }
  return {};
}

}  // namespace embedding_serializer
