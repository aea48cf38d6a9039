#include "launch/launcher_workers.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "launch/launcher_signals.h"

namespace nanoddp::dist {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Signals by name (SIGKILL, SIGSEGV): what a user searches for, unlike the number.
std::string WorkerStatus::describe() const {
  switch (state) {
    case State::NotStarted: return "was not started";
    case State::Running: return "is running";
    case State::Exited: return fmt::format("exited with code {}", code);
    case State::Signaled: {
      const char* abbrev = sigabbrev_np(code);
      return abbrev ? fmt::format("was killed by SIG{}", abbrev) : fmt::format("was killed by signal {}", code);
    }
  }
  return "?";
}

WorkerGroup::WorkerGroup(WorkerProgram program, std::vector<WorkerSpec> specs) : program_(std::move(program)) {
  workers_.resize(specs.size());
  for (size_t i = 0; i < specs.size(); i++) workers_[i].spec = std::move(specs[i]);
}

WorkerGroup::~WorkerGroup() {
  // Normally stop() has run; this is the path for exceptions. SIGKILL cannot be ignored, but a
  // process stuck in the kernel (a GPU driver after a fault) does not die of it: wait a bounded time,
  // as stop() does, rather than hang the launcher (and, on node 0, the store) for good.
  signal_all(SIGKILL);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (Worker& w : workers_) {
    while (w.status.state == WorkerStatus::State::Running && Clock::now() < deadline) {
      const pid_t r = ::waitpid(w.pid, nullptr, WNOHANG);
      if (r == w.pid || (r < 0 && errno != EINTR)) break;
      std::this_thread::sleep_for(milliseconds(10));
    }
    for (int& fd : w.fds)
      if (fd >= 0) ::close(fd);
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

void WorkerGroup::start() {
  for (Worker& w : workers_) spawn(w);
}

// Forks and execs one worker. Everything the child needs (argv, envp, file descriptors) is made
// before fork(): between fork and exec a child of a multi-threaded process may only make
// async-signal-safe calls.
void WorkerGroup::spawn(Worker& w) {
  w.output = std::make_unique<WorkerOutput>(w.spec.rank, w.spec.routing, w.spec.log_path);
  std::vector<char*> argv, envp;
  for (auto& a : program_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : w.spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2], err[2];
  NANODDP_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "nanoddp run: cannot create pipes: {}",
                strerror(errno));
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t parent = ::getpid();
  const char* path = program_.path.c_str();

  pid_t pid = ::fork();
  if (pid == 0) {
    LauncherSignals::reset_in_child();
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
    ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    // Descriptors the launcher opened without O_CLOEXEC (if any) must not leak into the worker.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(path, argv.data(), envp.data());
    const char msg[] = "nanoddp run: cannot execute the worker program\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(out[1]);
  ::close(err[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    NANODDP_FAIL("nanoddp run: cannot start worker rank {}: fork failed: {}", w.spec.rank, strerror(fork_errno));
  }
  ::setpgid(pid, pid);  // also here, so that a signal sent before the child ran reaches its group
  w.pid = pid;
  w.status.state = WorkerStatus::State::Running;
  w.fds[0] = out[0];
  w.fds[1] = err[0];
  for (int fd : w.fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Non-blocking reads until the pipe is empty (EAGAIN), at end of file, or `max_bytes` were read.
void WorkerGroup::read_stream(Worker& w, int s, size_t max_bytes) {
  char buf[64 * 1024];
  size_t total = 0;
  while (w.fds[s] >= 0 && total < max_bytes) {
    ssize_t k = ::read(w.fds[s], buf, sizeof buf);
    if (k > 0) {
      w.output->feed(Stream(s), buf, size_t(k));
      total += size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN) return;
    w.output->finish(Stream(s));  // end of file (or an error: treat alike)
    ::close(w.fds[s]);
    w.fds[s] = -1;
  }
}

void WorkerGroup::pump(milliseconds timeout) {
  // poll set: [0] the signal pipe, then every open output pipe.
  std::vector<pollfd> fds{{LauncherSignals::wake_fd(), POLLIN, 0}};
  std::vector<std::pair<size_t, int>> owner;  // (worker, stream) of fds[1..]
  for (size_t i = 0; i < workers_.size(); i++)
    for (int s = 0; s < 2; s++)
      if (workers_[i].fds[s] >= 0) {
        fds.push_back({workers_[i].fds[s], POLLIN, 0});
        owner.emplace_back(i, s);
      }
  int n = ::poll(fds.data(), fds.size(), int(std::max<int64_t>(0, timeout.count())));
  if (n > 0) {
    if (fds[0].revents) LauncherSignals::drain();
    // A bounded read per pipe keeps one chatty worker from starving the others.
    for (size_t j = 1; j < fds.size(); j++)
      if (fds[j].revents) read_stream(workers_[owner[j - 1].first], owner[j - 1].second, 256 * 1024);
  }
  reap();
}

// Collects every child that has ended. Pids that are not workers are what a worker left behind
// (re-parented to this subreaper): reaping them is all there is to do.
void WorkerGroup::reap() {
  for (;;) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    for (size_t i = 0; i < workers_.size(); i++) {
      Worker& w = workers_[i];
      if (w.pid != pid || w.status.state != WorkerStatus::State::Running) continue;
      if (WIFEXITED(st)) {
        w.status.state = WorkerStatus::State::Exited;
        w.status.code = WEXITSTATUS(st);
      } else {
        w.status.state = WorkerStatus::State::Signaled;
        w.status.code = WTERMSIG(st);
      }
      w.status.stopped = stopping_;
      if (w.status.failed() && first_failure_ < 0) first_failure_ = int(i);
    }
    forget_empty_groups();
  }
}

// A worker's group outlives its leader while a descendant is in it, so exited workers' groups are
// signalled too, but only while they have members: once the last one is reaped, the number is free
// and may come back as another program's group (a shell job, hours later), which kill(-pid) would
// then hit. Every member descends from the worker, so it ends as this subreaper's child; reap()
// calls this after each child it collects, the moment a group can have emptied.
void WorkerGroup::forget_empty_groups() {
  for (Worker& w : workers_)
    if (w.pid > 0 && !w.group_gone && w.status.state != WorkerStatus::State::Running && ::kill(-w.pid, 0) != 0 &&
        errno == ESRCH)
      w.group_gone = true;
}

void WorkerGroup::signal_all(int sig) {
  for (const Worker& w : workers_)
    if (w.pid > 0 && !w.group_gone) ::kill(-w.pid, sig);
}

bool WorkerGroup::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const Worker& w) { return w.status.state == WorkerStatus::State::Running; });
}

bool WorkerGroup::all_succeeded() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) {
    return w.status.state == WorkerStatus::State::Exited && w.status.code == 0;
  });
}

bool WorkerGroup::any_pipe_open() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.fds[0] >= 0 || w.fds[1] >= 0; });
}

// A worker that just died may have written its last lines after the last poll: read them first,
// since they are usually the ones that explain the failure.
std::vector<std::string> WorkerGroup::tail(size_t i) {
  Worker& w = workers_[i];
  for (int s = 0; s < 2; s++) read_stream(w, s, 4 << 20);
  return w.output->tail();
}

WorkerGroup::StopOutcome WorkerGroup::stop(milliseconds grace, int sig, const std::string& why) {
  auto running = [this] {
    return int(std::count_if(workers_.begin(), workers_.end(),
                             [](const Worker& w) { return w.status.state == WorkerStatus::State::Running; }));
  };
  // Phase 1: SIGTERM (or the launcher's own signal), and time to exit cleanly (save, flush logs,
  // close sockets).
  StopOutcome outcome;
  outcome.running = running();
  stopping_ = true;
  signal_all(sig);
  int signals_before = LauncherSignals::termination_count();
  const auto start = Clock::now(), deadline = start + grace;
  while (any_running() && Clock::now() < deadline && LauncherSignals::termination_count() == signals_before)
    pump(std::min(milliseconds(50), std::chrono::duration_cast<milliseconds>(deadline - Clock::now())));
  outcome.waited_s = std::chrono::duration<double>(Clock::now() - start).count();

  // Phase 2: SIGKILL to every group, which also takes what already-exited workers left behind.
  outcome.killed = running();
  if (outcome.killed > 0)
    launcher_say(fmt::format("{} worker(s) still running {:.1f} s after {}; sending SIGKILL{}", outcome.killed,
                             outcome.waited_s, signal_name(sig),
                             LauncherSignals::termination_count() != signals_before ? " (a second signal came)"
                             : why.empty()                                          ? ""
                                                                                    : " (" + why + ")"));
  signal_all(SIGKILL);
  auto kill_deadline = Clock::now() + std::chrono::seconds(30);
  while (any_running() && Clock::now() < kill_deadline) pump(milliseconds(50));
  if (any_running()) launcher_say("a worker did not die 30 s after SIGKILL (stuck in the kernel?); leaving it");
  // What left the workers' groups (setsid: a daemon, subprocess's start_new_session) is this
  // subreaper's child once its parent died; no group signal reaches it, so it is killed by pid.
  kill_adopted_children();

  // Phase 3: what the pipes still hold. Every writer is dead, so they reach end of file.
  auto drain_deadline = Clock::now() + std::chrono::seconds(2);
  while (any_pipe_open() && Clock::now() < drain_deadline) pump(milliseconds(20));

  // Phase 4: reap what the workers left behind, re-parented to this subreaper and killed above, so
  // that no zombie outlives the launcher. A process that left its group (setsid) is waited for 1 s.
  auto reap_deadline = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < reap_deadline) {
    pid_t r = ::waitpid(-1, nullptr, WNOHANG);
    if (r < 0) break;  // ECHILD: no child left
    if (r == 0) {
      kill_adopted_children();  // adopted since: the children of those killed above
      std::this_thread::sleep_for(milliseconds(5));
    } else {
      forget_empty_groups();
    }
  }
  forget_empty_groups();
  return outcome;
}

// Every child of this process that is not yet a zombie gets SIGKILL. Called once the workers are
// dead, when the only children left are what they left behind. A child keeps its pid until it is
// reaped, so no other program's process can be hit. The parent of each process is the fourth
// field of /proc/PID/stat, after the name in parentheses (which may itself hold ')' or spaces).
void WorkerGroup::kill_adopted_children() {
  const pid_t self = ::getpid();
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(it->path() / "stat");
    std::string stat;
    if (!std::getline(f, stat)) continue;
    const size_t close = stat.rfind(')');
    char state = 0;
    long ppid = 0;
    if (close == std::string::npos || std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) continue;
    if (ppid == self && state != 'Z') ::kill(static_cast<pid_t>(std::stol(name)), SIGKILL);
  }
}

}  // namespace nanoddp::dist
