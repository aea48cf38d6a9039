// A child process with its stdout and stderr captured by a reader thread, for tests that run the
// nanoddp binary (the launcher, distributed training) or a test worker, and wait on what it prints.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace nanoddp::testing {

using namespace std::chrono_literals;

class Proc {
 public:
  // `env`: "KEY=VALUE" to set, "KEY" to remove, on top of this process's environment. By default the
  // variables that change the launcher's behaviour are removed so that tests see its defaults.
  explicit Proc(std::vector<std::string> argv, std::vector<std::string> env = {}) {
    std::vector<std::string> edits = {"OMP_NUM_THREADS", "NANODDP_STORE_TOKEN"};
    edits.insert(edits.end(), env.begin(), env.end());
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e; e++) {
      std::string s = *e;
      vars[s.substr(0, s.find('='))] = s;
    }
    for (auto& e : edits) {
      size_t eq = e.find('=');
      if (eq == std::string::npos)
        vars.erase(e);
      else
        vars[e.substr(0, eq)] = e;
    }
    std::vector<std::string> envs;
    for (auto& [k, v] : vars) envs.push_back(v);
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : envs) cenv.push_back(e.data());
    cenv.push_back(nullptr);

    int out[2], err[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    reader_ = std::thread([this, o = out[0], e = err[0]] { read_until_eof(o, e); });
  }

  ~Proc() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    reader_.join();
  }

  pid_t pid() const { return pid_; }

  // Waits until `pred(stdout + stderr)` holds; false after `timeout`.
  bool wait_for(const std::function<bool(const std::string&)>& pred, std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return pred(out_ + err_); });
  }
  bool wait_for_text(const std::string& needle, std::chrono::milliseconds timeout = 30s) {
    return wait_for([&](const std::string& s) { return s.find(needle) != std::string::npos; }, timeout);
  }

  // The exit status, shell-style (code, or 128 + signal); nullopt if still running after `timeout`.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout = 30s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
    // The output is complete once the pipes reach end of file (the reader thread sees it).
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, 10s, [&] { return eof_; });
    return status_;
  }

  std::string out() {
    std::lock_guard lock(mu_);
    return out_;
  }
  std::string err() {
    std::lock_guard lock(mu_);
    return err_;
  }
  std::string all() {
    std::lock_guard lock(mu_);
    return out_ + err_;
  }

 private:
  void read_until_eof(int o, int e) {
    pollfd fds[2] = {{o, POLLIN, 0}, {e, POLLIN, 0}};
    int open = 2;
    char buf[4096];
    while (open > 0) {
      ::poll(fds, 2, -1);
      for (int i = 0; i < 2; i++) {
        if (fds[i].fd < 0 || !fds[i].revents) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          open--;
          continue;
        }
        std::lock_guard lock(mu_);
        (i == 0 ? out_ : err_).append(buf, size_t(n));
        changed_.notify_all();
      }
    }
    std::lock_guard lock(mu_);
    eof_ = true;
    changed_.notify_all();
  }

  pid_t pid_ = -1;
  std::optional<int> status_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::string out_, err_;
  bool eof_ = false;
};

// What a program run to its end did: its exit status (-1 when it outlived the deadline) and output.
struct Outcome {
  int status = -1;
  std::string out, err;
};

// Runs argv with `env` added (as Proc takes it); fails the test when it is still running after
// `timeout`, then stops it.
inline Outcome run_to_end(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          std::chrono::seconds timeout) {
  Proc p(argv, env);
  const std::optional<int> status = p.wait_exit(timeout);
  EXPECT_TRUE(status.has_value()) << "still running after " << timeout.count() << " s";
  return {status.value_or(-1), p.out(), p.err()};
}

}  // namespace nanoddp::testing
