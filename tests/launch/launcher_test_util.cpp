#include "launcher_test_util.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <regex>
#include <sstream>
#include <thread>

#include "test_util.h"

namespace nanoddp::testing {

std::vector<std::string> launch(std::vector<std::string> flags, std::vector<std::string> worker_flags) {
  std::vector<std::string> argv = {nanoddp_binary(), "run"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(LAUNCH_WORKER_PATH);
  argv.insert(argv.end(), worker_flags.begin(), worker_flags.end());
  return argv;
}

std::map<int, std::vector<std::string>> lines_by_rank(const std::string& text, const std::string& key) {
  std::map<int, std::vector<std::string>> out;
  std::regex re("^\\[rank (\\d+)\\]: " + key + " (.*)$");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, re)) out[std::stoi(m[1])].push_back(m[2]);
  }
  return out;
}

std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& text) {
  std::map<int, std::map<std::string, std::string>> out;
  for (auto& [rank, lines] : lines_by_rank(text, "env"))
    for (auto& line : lines) {
      std::istringstream in(line);
      std::map<std::string, std::string> vars;
      for (std::string kv; in >> kv;) vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
      out[rank] = vars;
    }
  return out;
}

std::map<int, pid_t> wait_for_pids(Proc& p, int n, const std::string& key) {
  EXPECT_TRUE(p.wait_for([&](const std::string& s) { return int(lines_by_rank(s, key).size()) >= n; }))
      << "ranks did not print '" << key << "':\n" << p.all();
  std::map<int, pid_t> pids;
  for (auto& [rank, values] : lines_by_rank(p.all(), key)) pids[rank] = std::stoi(values.front());
  return pids;
}

namespace {

// Whether a process has ended: it no longer exists, or it is a zombie waiting for whoever inherited
// it (init, here) to reap it.
bool dead(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;  // gone meanwhile
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

bool gone_within(pid_t pid, std::chrono::milliseconds timeout) {
  using namespace std::chrono_literals;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!dead(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

void expect_all_gone(const std::map<int, pid_t>& pids, const char* what) {
  for (auto& [rank, pid] : pids) EXPECT_TRUE(gone_within(pid)) << what << " of rank " << rank << " (pid " << pid << ") is still alive";
}

}  // namespace nanoddp::testing
