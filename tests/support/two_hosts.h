// Two network namespaces joined by a veth pair, acting as two hosts (10.123.0.1 and 10.123.0.2),
// for multi-node tests. Needs root and iproute2; tests skip with the reason otherwise.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace nanoddp::testing {

// The two hosts as an object, for a test that cannot take TwoHosts as its fixture (its suite holds
// other tests). The destructor removes whatever create() made, so a test that fails halfway, in
// the setup or after it, leaves no namespace behind.
class TwoHostNetwork {
 public:
  TwoHostNetwork() = default;
  TwoHostNetwork(const TwoHostNetwork&) = delete;
  TwoHostNetwork& operator=(const TwoHostNetwork&) = delete;
  ~TwoHostNetwork() {
    for (int i = 0; i < created_; i++) run_command(ip_ + " netns del " + ns_[i]);
  }

  // Skips the test where namespaces cannot be made here and fails it on a later error; true when
  // both hosts are up.
  bool create() {
    set_up();
    return !::testing::Test::IsSkipped() && !::testing::Test::HasFatalFailure();
  }

  static std::string addr(int i) { return i == 0 ? "10.123.0.1" : "10.123.0.2"; }
  // argv of `ip netns exec <ns of host i> <argv...>`
  std::vector<std::string> on_host(int i, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {ip_, "netns", "exec", ns_[i]});
    return argv;
  }

 private:
  // A void function, so that the gtest macros can return from it.
  void set_up() {
    NANODDP_SKIP_UNLESS(::geteuid() == 0, "needs root to create network namespaces");
    auto which = run_command("command -v ip");
    NANODDP_SKIP_UNLESS(which.status == 0, "the ip tool (iproute2) is not installed");
    ip_ = which.output.substr(0, which.output.find('\n'));
    std::string id = std::to_string(::getpid());
    ns_[0] = "nddp_a" + id;
    ns_[1] = "nddp_b" + id;
    auto sh = [&](const std::string& cmd) { return run_command(ip_ + " " + cmd); };
    auto r = sh("netns add " + ns_[0]);
    NANODDP_SKIP_UNLESS(r.status == 0, "cannot create a network namespace here: " + r.output);
    created_ = 1;
    ASSERT_EQ(sh("netns add " + ns_[1]).status, 0);
    created_ = 2;
    // The veth ends are made inside the namespaces, so their names cannot clash between tests.
    ASSERT_EQ(sh("link add veth_a netns " + ns_[0] + " type veth peer name veth_b netns " + ns_[1]).status, 0);
    for (int i = 0; i < 2; i++) {
      std::string in = "-n " + ns_[i] + " ";
      std::string dev = i == 0 ? "veth_a" : "veth_b";
      ASSERT_EQ(sh(in + "addr add " + addr(i) + "/24 dev " + dev).status, 0);
      ASSERT_EQ(sh(in + "link set " + dev + " up").status, 0);
      ASSERT_EQ(sh(in + "link set lo up").status, 0);
    }
  }

  std::string ip_;
  std::string ns_[2];
  int created_ = 0;  // namespaces to delete
};

// The fixture: each test runs on two fresh hosts (or is skipped), removed after it however it ended.
class TwoHosts : public ::testing::Test, public TwoHostNetwork {
 protected:
  void SetUp() override { create(); }
};

}  // namespace nanoddp::testing
