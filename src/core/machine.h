// What the machine this process runs on offers, read from the kernel (uname, /proc/cpuinfo,
// sysconf): for `nanoddp env`, environment.json and the step header.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace nanoddp {

struct HostInfo {
  std::string hostname;
  std::string os;                      // "Linux 6.1.0-18-amd64 x86_64"
  std::string cpu_model;               // /proc/cpuinfo's "model name"; "" when the kernel does not say
  int logical_cpus = 0;                // online
  int64_t memory_bytes = 0;            // physical
  std::vector<std::string> cpu_flags;  // /proc/cpuinfo's "flags" of the first CPU, as listed
  bool has_flag(const std::string& flag) const;
};

HostInfo host_info();

// Fills host.cpu_model and host.cpu_flags from text in /proc/cpuinfo's format ("key\t: value"
// lines, one block per CPU): the first "model name" and the first "flags" line.
void read_cpuinfo(std::istream& cpuinfo, HostInfo& host);

// The flags that decide which matmul kernels run fast here, in the order of kMatmulFlags below,
// as "avx2 avx512f avx512_bf16 ..." (present) and the rest (missing).
inline const std::vector<std::string> kMatmulFlags = {"avx2",        "fma",         "avx512f",
                                                      "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                                      "amx_tile",    "amx_bf16",    "amx_int8"};

// How this CPU multiplies bf16: "AMX" (amx_bf16), "AVX512-BF16" (avx512_bf16 without AMX) or
// "emulated (no bf16 instructions)".
std::string bf16_matmul_hardware(const HostInfo& host);

}  // namespace nanoddp
