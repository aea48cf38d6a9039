// Where a tensor lives. The CPU is always available; CUDA devices exist when the build has CUDA
// and the machine has a GPU.
// Tensors carry one; allocator_for() and the ops backends dispatch on it. Users name it with
// --device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace nanoddp {

enum class DeviceType : uint8_t { CPU, CUDA };

// index is the CUDA ordinal; always 0 for the CPU.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:N", the form parse_device() reads back.
  std::string str() const;
};

// Parses "cpu", "cuda" or "cuda:N"; throws nanoddp::Error on anything else.
// Bare "cuda" is device 0 here; comm/init's local_device() maps it to the rank's own GPU instead.
Device parse_device(std::string_view text);

// Number of CUDA devices visible to this process (0 without CUDA or without a GPU).
int cuda_device_count();

// The CUDA device's product name ("NVIDIA H100 80GB HBM3"); "" without CUDA or that device.
std::string cuda_device_name(int index);

}  // namespace nanoddp
