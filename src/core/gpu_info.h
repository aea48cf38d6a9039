// What tells one GPU product from its variants (the MFU peak table, ops/profile.h): the name, the
// memory in bytes and the number of multiprocessors. Apart from core/device.h, which nearly every
// file includes, because only the peak table needs it.
#pragma once

#include <cstdint>
#include <string>

namespace nanoddp {

struct CudaDeviceInfo {
  std::string name;
  int64_t memory_bytes = 0;
  int sm_count = 0;
};

// The facts of CUDA device `index`; empty and 0 without CUDA or that device.
CudaDeviceInfo cuda_device_info(int index);

}  // namespace nanoddp
