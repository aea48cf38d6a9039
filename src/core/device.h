// Where a tensor lives. The CPU is always available; CUDA devices exist when the build has CUDA
// and the machine has a GPU.
#pragma once

#include <string>
#include <string_view>

namespace nanoddp {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// Parses "cpu", "cuda" or "cuda:N"; throws nanoddp::Error on anything else.
Device parse_device(std::string_view text);

// Number of CUDA devices visible to this process (0 without CUDA or without a GPU).
int cuda_device_count();

}  // namespace nanoddp
