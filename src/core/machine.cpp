#include "core/machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace nanoddp {

bool HostInfo::has_flag(const std::string& flag) const {
  return std::find(cpu_flags.begin(), cpu_flags.end(), flag) != cpu_flags.end();
}

HostInfo host_info() {
  HostInfo h;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  struct utsname u {};
  if (::uname(&u) == 0) h.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  h.logical_cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) h.memory_bytes = static_cast<int64_t>(pages) * page;
  std::ifstream cpuinfo("/proc/cpuinfo");
  read_cpuinfo(cpuinfo, h);
  return h;
}

void read_cpuinfo(std::istream& cpuinfo, HostInfo& h) {
  // The first CPU's entry is enough: Linux lists the same model and flags for every core of a
  // socket, and the machines this runs on have one kind of CPU.
  bool have_flags = false;
  for (std::string line; std::getline(cpuinfo, line) && (h.cpu_model.empty() || !have_flags);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (h.cpu_model.empty() && line.starts_with("model name")) h.cpu_model = value;
    if (!have_flags && line.starts_with("flags")) {
      std::istringstream words(value);
      for (std::string f; words >> f;) h.cpu_flags.push_back(f);
      have_flags = true;
    }
  }
}

std::string bf16_matmul_hardware(const HostInfo& host) {
  if (host.has_flag("amx_bf16")) return "AMX";
  if (host.has_flag("avx512_bf16")) return "AVX512-BF16";
  return "emulated (no bf16 instructions)";
}

}  // namespace nanoddp
