// The store as `nanoddp run` hosts it (Note [store limits] in rendezvous/tcp_store_server.cpp,
// docs/launcher.md): where it listens for one node and for several, the one warning about a
// missing token, and a real 2-rank training job whose store is under a hostile crowd, which must
// end bit for bit like the same job without it.
//
// Where the store listens is read from inside the job: the worker prints the kernel's socket
// tables (/proc/net/tcp and tcp6) while the launcher, and so its store, is alive.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>

#include "corpus.h"
#include "hostile_load.h"
#include "subprocess.h"
#include "test_util.h"

namespace nanoddp {
namespace {

using namespace std::chrono_literals;
using testing::Proc;
using testing::ScratchDir;

// A worker that prints the listening sockets of this network namespace.
const std::vector<std::string> kPrintSockets = {"/bin/sh", "-c", "cat /proc/net/tcp /proc/net/tcp6"};

std::vector<std::string> run_argv(std::vector<std::string> flags, const std::vector<std::string>& worker) {
  flags.insert(flags.begin(), {testing::nanoddp_binary(), "run"});
  flags.insert(flags.end(), worker.begin(), worker.end());
  return flags;
}

// The local addresses, as the kernel prints them (hex, e.g. 0100007F for 127.0.0.1, 32 zeros for
// ::), of sockets listening (state 0A) on `port` in the socket tables within `text`.
std::set<std::string> listening_addresses(const std::string& text, int port) {
  std::set<std::string> out;
  std::regex row(R"(\d+: ([0-9A-F]{8}|[0-9A-F]{32}):([0-9A-F]{4}) [0-9A-F]+:[0-9A-F]{4} 0A )");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row) && std::stoi(m[2].str(), nullptr, 16) == port) out.insert(m[1].str());
  }
  return out;
}

const std::string kIpv4Loopback = "0100007F";
const std::string kIpv6Any(32, '0');
const std::string kIpv4Any = "00000000";

int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) n++;
  return n;
}

const char* kTokenWarning = "listens on every interface without a token";

TEST(StoreInLauncher, OneNodeListensOnLoopbackOnly) {
  int port = testing::free_port();
  // The default --master_addr, without --standalone: before, the store listened on every interface.
  Proc p(run_argv({"--master_port", std::to_string(port)}, kPrintSockets));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_EQ(listening_addresses(p.out(), port), std::set<std::string>{kIpv4Loopback}) << p.out();
  EXPECT_EQ(count_of(p.err(), kTokenWarning), 0) << p.err();

  Proc standalone(run_argv({"--standalone"}, kPrintSockets));
  ASSERT_EQ(standalone.wait_exit(), 0) << standalone.all();
  std::smatch m;
  std::string err = standalone.err();
  ASSERT_TRUE(std::regex_search(err, m, std::regex("rendezvous store at 127\\.0\\.0\\.1:(\\d+)"))) << err;
  EXPECT_EQ(listening_addresses(standalone.out(), std::stoi(m[1].str())), std::set<std::string>{kIpv4Loopback})
      << standalone.out();
}

TEST(StoreInLauncher, OneNodeListensOnAnAddressTheUserNames) {
  // 127.0.0.2: an address of every Linux machine that is not the default one.
  int port = testing::free_port();
  Proc p(run_argv({"--master_addr", "127.0.0.2", "--master_port", std::to_string(port)}, kPrintSockets));
  ASSERT_EQ(p.wait_exit(), 0) << p.all();
  EXPECT_EQ(listening_addresses(p.out(), port), std::set<std::string>{"0200007F"}) << p.out();
}

// Several nodes reach the store by --master_addr; --master_bind 0.0.0.0 here stands for a
// --master_addr of another host (which a test on one host cannot have): every interface.
TEST(StoreInLauncher, SeveralNodesListenEverywhereAndWarnOnceWithoutAToken) {
  for (bool with_token : {false, true}) {
    SCOPED_TRACE(with_token ? "with NANODDP_STORE_TOKEN" : "without a token");
    int port = testing::free_port();
    auto node = [&](int rank) {
      return run_argv({"--nnodes", "2", "--node_rank", std::to_string(rank), "--master_port", std::to_string(port),
                       "--rdzv_timeout", "30", "--master_bind", "0.0.0.0"},
                      kPrintSockets);
    };
    std::vector<std::string> env;
    if (with_token) env.push_back("NANODDP_STORE_TOKEN=s3cret");
    Proc n0(node(0), env), n1(node(1), env);
    ASSERT_EQ(n0.wait_exit(), 0) << n0.all();
    ASSERT_EQ(n1.wait_exit(), 0) << n1.all();
    // Every interface: the IPv6 wildcard (which takes IPv4 too), or the IPv4 one without IPv6.
    std::set<std::string> where = listening_addresses(n0.out(), port);
    EXPECT_TRUE(where == std::set<std::string>{kIpv6Any} || where == std::set<std::string>{kIpv4Any}) << n0.out();
    // One line, from the node that hosts the store, naming the variable to set.
    EXPECT_EQ(count_of(n0.err(), kTokenWarning), with_token ? 0 : 1) << n0.err();
    EXPECT_EQ(count_of(n1.err(), kTokenWarning), 0) << n1.err();
    if (!with_token) {
      std::string err = n0.err();
      std::string line = err.substr(err.find(kTokenWarning));
      line = line.substr(0, line.find('\n'));
      EXPECT_NE(line.find("NANODDP_STORE_TOKEN"), std::string::npos) << line;
      EXPECT_NE(err.find("nanoddp run: warning: the rendezvous store on port " + std::to_string(port)),
                std::string::npos)
          << err;
    }
  }
}

// Several nodes on one host, by the default loopback --master_addr: only this host can reach the
// store by it, so it listens on loopback, and no token warning. Was: every interface.
TEST(StoreInLauncher, SeveralNodesOnALoopbackMasterAddrListenOnLoopbackOnly) {
  int port = testing::free_port();
  auto node = [&](int rank) {
    return run_argv({"--nnodes", "2", "--node_rank", std::to_string(rank), "--master_port", std::to_string(port),
                     "--rdzv_timeout", "30"},
                    kPrintSockets);
  };
  Proc n0(node(0)), n1(node(1));
  ASSERT_EQ(n0.wait_exit(), 0) << n0.all();
  ASSERT_EQ(n1.wait_exit(), 0) << n1.all();
  EXPECT_EQ(listening_addresses(n0.out(), port), std::set<std::string>{kIpv4Loopback}) << n0.out();
  EXPECT_EQ(count_of(n0.err(), kTokenWarning), 0) << n0.err();
}

// The files of a checkpoint that hold state: the weights and each rank's optimizer.
std::map<std::string, std::string> checkpoint_state(const std::string& out, int step) {
  std::string dir = fmt::format("{}/checkpoints/step_{:06d}", out, step);
  std::map<std::string, std::string> files;
  for (const char* name : {"model.safetensors", "optim_rank0.safetensors", "optim_rank1.safetensors"})
    files[name] = testing::read_file(dir + "/" + name);
  return files;
}

TEST(StoreInLauncher, TrainingUnderAHostileCrowdEndsLikeAQuietRun) {
  ScratchDir dir("store_hostile_training");
  testing::make_byte_dataset(dir.str("dataset"), 200, 5);
  constexpr int kSteps = 48;
  auto job = [&](const std::string& out) {
    return std::vector<std::string>{
        testing::nanoddp_binary(), "run", "--standalone", "--nproc_per_node", "2", "train", "--data",
        dir.str("dataset/data"), "--out", out, "--depth", "2", "--aspect_ratio", "32", "--head_dim", "32",
        "--max_seq_len", "32", "--device_batch_size", "4", "--total_batch_size", "256", "--num_iterations",
        std::to_string(kSteps), "--eval_every", "16", "--eval_tokens", "512", "--save_every", "16", "--threads", "1",
        "--peak_flops", "1e9"};
  };
  auto start = std::chrono::steady_clock::now();
  Proc quiet(job(dir.str("quiet")));
  ASSERT_EQ(quiet.wait_exit(120s), 0) << quiet.all();

  Proc loud(job(dir.str("loud")));
  // The store's port is known once the launcher announces the job, before any worker starts.
  std::smatch m;
  ASSERT_TRUE(loud.wait_for([&](const std::string& s) {
    return std::regex_search(s, m, std::regex("rendezvous store at 127\\.0\\.0\\.1:(\\d+)"));
  })) << loud.all();
  int port = std::stoi(m[1].str());
  int64_t closed = 0, opened = 0;
  {
    // The crowd stays until the job has ended: the workers connect and train through it. At most 500
    // new connections a second, so that on two cores the crowd slows the job rather than stopping it.
    testing::HostileLoad crowd(port, testing::HostileLoad::Mix{100, 100, 100, 500});
    ASSERT_EQ(loud.wait_exit(120s), 0) << loud.all();
    closed = crowd.closed_by_server();
    opened = crowd.opened();
  }
  RecordProperty("hostile_connections_opened", std::to_string(opened));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
  EXPECT_GT(opened, 100) << "the crowd did not get going before the job ended";
  EXPECT_GT(closed, 0);
  // Bit for bit: the crowd cost time, not a single bit of the result.
  auto a = checkpoint_state(dir.str("quiet"), kSteps), b = checkpoint_state(dir.str("loud"), kSteps);
  for (auto& [name, bytes] : a) {
    EXPECT_FALSE(bytes.empty()) << name << " is missing";
    EXPECT_TRUE(bytes == b[name]) << name << " differs between the quiet and the loud run";
  }
}

}  // namespace
}  // namespace nanoddp
