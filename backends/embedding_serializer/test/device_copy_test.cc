#include "device_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#ifdef EMBEDDING_SERIALIZER_GPU
#include <cuda_runtime_api.h>
#endif

namespace embedding_serializer {
namespace {

#ifdef EMBEDDING_SERIALIZER_GPU

TEST(CopyDeviceToHost, CopiesAGpuBufferToHost) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device: the GPU copy needs one";
  }
  const std::vector<uint8_t> bytes = {1, 2, 3, 250, 0, 7};
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, bytes.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<uint8_t> host;
  EXPECT_EQ(CopyDeviceToHost(device, bytes.size(), 0, &host), "");
  EXPECT_EQ(host, bytes);
  cudaFree(device);
}

#else

TEST(CopyDeviceToHost, NamesTheBuildOptionWithoutCuda) {
  EXPECT_FALSE(GpuInputSupported());
  const uint8_t byte = 0;
  std::vector<uint8_t> host;
  const std::string error = CopyDeviceToHost(&byte, 1, 0, &host);
  EXPECT_NE(error.find("GPU memory"), std::string::npos);
  EXPECT_NE(error.find("EMBEDDING_SERIALIZER_ENABLE_GPU=ON"), std::string::npos);
  EXPECT_TRUE(host.empty());
}

#endif

}  // namespace
}  // namespace embedding_serializer
