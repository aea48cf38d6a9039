#include "core/device.h"

#include <charconv>

#include "core/error.h"
#include "core/gpu_info.h"
#include "nanoddp/build_config.h"

#if NANODDP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace nanoddp {

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto digits = text.substr(5);
    // from_chars, not stoi: no exception, no locale, and trailing junk ("cuda:1x") is refused.
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return Device::cuda(index);
  }
  NANODDP_FAIL("unknown device '{}': use cpu, cuda or cuda:N", text);
}

int cuda_device_count() {
#if NANODDP_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::string cuda_device_name(int index) { return cuda_device_info(index).name; }

CudaDeviceInfo cuda_device_info(int index) {
#if NANODDP_HAVE_CUDA
  cudaDeviceProp prop{};
  if (index < 0 || index >= cuda_device_count() || cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return {prop.name, static_cast<int64_t>(prop.totalGlobalMem), prop.multiProcessorCount};
#else
  (void)index;
  return {};
#endif
}

}  // namespace nanoddp
