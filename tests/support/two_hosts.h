// Two network namespaces joined by a veth pair, acting as two hosts (10.123.0.1 and 10.123.0.2),
// for multi-node tests. Needs root and iproute2; tests skip with the reason otherwise.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace nanoddp::testing {

// Two network namespaces joined by a veth pair act as two hosts, 10.123.0.1 and 10.123.0.2.
class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    auto which = run_command("command -v ip");
    if (which.status != 0) GTEST_SKIP() << "the ip tool (iproute2) is not installed";
    ip_ = which.output.substr(0, which.output.find('\n'));
    std::string id = std::to_string(::getpid());
    ns_[0] = "nddp_a" + id;
    ns_[1] = "nddp_b" + id;
    auto sh = [&](const std::string& cmd) { return run_command(ip_ + " " + cmd); };
    auto r = sh("netns add " + ns_[0]);
    if (r.status != 0) GTEST_SKIP() << "cannot create a network namespace here: " << r.output;
    created_ = 1;
    ASSERT_EQ(sh("netns add " + ns_[1]).status, 0);
    created_ = 2;
    ASSERT_EQ(sh("link add veth_a netns " + ns_[0] + " type veth peer name veth_b netns " + ns_[1]).status, 0);
    for (int i = 0; i < 2; i++) {
      std::string in = "-n " + ns_[i] + " ";
      std::string dev = i == 0 ? "veth_a" : "veth_b";
      ASSERT_EQ(sh(in + "addr add " + addr(i) + "/24 dev " + dev).status, 0);
      ASSERT_EQ(sh(in + "link set " + dev + " up").status, 0);
      ASSERT_EQ(sh(in + "link set lo up").status, 0);
    }
  }
  void TearDown() override {
    for (int i = 0; i < created_; i++) run_command(ip_ + " netns del " + ns_[i]);
  }
  static std::string addr(int i) { return i == 0 ? "10.123.0.1" : "10.123.0.2"; }
  // argv of `ip netns exec <ns of host i> <argv...>`
  std::vector<std::string> on_host(int i, std::vector<std::string> argv) {
    argv.insert(argv.begin(), {ip_, "netns", "exec", ns_[i]});
    return argv;
  }

  std::string ip_;
  std::string ns_[2];
  int created_ = 0;
};

}  // namespace nanoddp::testing
