// Helpers of the launcher tests: starting `nanoddp run` with the test worker (launch_worker.cpp),
// reading the worker lines it prints, and checking which processes are left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "subprocess.h"

namespace nanoddp::testing {

// argv of `nanoddp run <flags> <launch_worker> <worker flags>`
std::vector<std::string> launch(std::vector<std::string> flags, std::vector<std::string> worker_flags);

// The values after "[rank R]: <key> " on every line that has them, by rank: e.g. key "pid".
std::map<int, std::vector<std::string>> lines_by_rank(const std::string& text, const std::string& key);

// The env line of every rank, parsed into name -> value (the last attempt's line wins).
std::map<int, std::map<std::string, std::string>> env_by_rank(const std::string& text);

// Waits until `n` ranks have printed "<key> <number>"; returns the numbers by rank.
std::map<int, pid_t> wait_for_pids(Proc& p, int n, const std::string& key = "pid");

// Whether `pid` ends within `timeout` (a zombie left for init to reap counts as ended).
bool gone_within(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(5));
void expect_all_gone(const std::map<int, pid_t>& pids, const char* what);

}  // namespace nanoddp::testing
