// core/machine: what host_info() reports agrees with the kernel's own answers, and the cpuinfo
// reader takes the first CPU's model and flags from /proc/cpuinfo-style text.
#include "core/machine.h"

#include <gtest/gtest.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <sstream>

namespace nanoddp {
namespace {

TEST(Machine, HostInfoAgreesWithTheKernel) {
  const HostInfo h = host_info();
  EXPECT_GT(h.logical_cpus, 0);
  EXPECT_EQ(h.logical_cpus, ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GT(h.memory_bytes, 0);
  EXPECT_EQ(h.memory_bytes % ::sysconf(_SC_PAGESIZE), 0);
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(h.hostname, name);
  struct utsname u {};
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(h.os, std::string(u.sysname) + " " + u.release + " " + u.machine);
  for (const std::string& f : h.cpu_flags) {
    EXPECT_FALSE(f.empty());
    EXPECT_EQ(f.find_first_of(" \t"), std::string::npos) << f;
    EXPECT_TRUE(h.has_flag(f));
  }
  EXPECT_FALSE(h.has_flag("no_such_flag"));
}

// On x86 Linux every CPU lists its model and flags, and any x86-64 CPU has SSE2.
TEST(Machine, X86HostsReportTheirModelAndFlags) {
  const HostInfo h = host_info();
  if (h.os.find("x86_64") == std::string::npos) GTEST_SKIP() << "not an x86-64 host: " << h.os;
  EXPECT_FALSE(h.cpu_model.empty());
  EXPECT_TRUE(h.has_flag("sse2"));
}

// Two CPU blocks as Linux writes them ("key<tabs>: value"): only the first block's model and flags
// count, "model" and "vmx flags" are other keys, and an empty value is "".
TEST(Machine, CpuinfoReaderTakesTheFirstCpusModelAndFlags) {
  std::istringstream text("processor\t: 0\n"
                          "vendor_id\t: GenuineIntel\n"
                          "model\t\t: 143\n"
                          "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                          "flags\t\t: fpu sse2 avx2  avx512f amx_bf16\n"
                          "vmx flags\t: vnmi ept\n"
                          "\n"
                          "processor\t: 1\n"
                          "model name\t: Another CPU\n"
                          "flags\t\t: fpu\n");
  HostInfo h;
  read_cpuinfo(text, h);
  EXPECT_EQ(h.cpu_model, "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(h.cpu_flags, (std::vector<std::string>{"fpu", "sse2", "avx2", "avx512f", "amx_bf16"}));
  EXPECT_FALSE(h.has_flag("ept"));
  EXPECT_EQ(bf16_matmul_hardware(h), "AMX");

  // An ARM kernel names neither: the model stays "" and no flags are listed.
  std::istringstream arm("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd bf16\nCPU part\t: 0xd4f\n");
  HostInfo a;
  read_cpuinfo(arm, a);
  EXPECT_EQ(a.cpu_model, "");
  EXPECT_TRUE(a.cpu_flags.empty());

  std::istringstream bare("model name\t:\nflags\t\t:\n");
  HostInfo b;
  read_cpuinfo(bare, b);
  EXPECT_EQ(b.cpu_model, "");
  EXPECT_TRUE(b.cpu_flags.empty());
}

TEST(Machine, Bf16HardwareFollowsTheFlags) {
  HostInfo h;
  EXPECT_EQ(bf16_matmul_hardware(h), "emulated (no bf16 instructions)");
  h.cpu_flags = {"avx512f", "avx512_bf16"};
  EXPECT_EQ(bf16_matmul_hardware(h), "AVX512-BF16");
  h.cpu_flags.push_back("amx_bf16");
  EXPECT_EQ(bf16_matmul_hardware(h), "AMX");
}

}  // namespace
}  // namespace nanoddp
