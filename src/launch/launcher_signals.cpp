#include "launch/launcher_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace nanoddp::dist {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

namespace {

// Written by the handlers, read by the loop. Lock-free atomics are async-signal-safe.
int g_pipe[2] = {-1, -1};  // [0] read end (poll), [1] write end (handlers)
std::atomic<int> g_first_signal{0};
std::atomic<int> g_signal_count{0};
std::atomic<bool> g_workers_running{false};

// torchrun's termination signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT), and SIGCHLD for the workers.
constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};

// Only async-signal-safe calls here: atomics, write() and _exit().
void on_signal(int sig) {
  int saved_errno = errno;  // the interrupted code may be about to read errno
  if (sig != SIGCHLD) {
    if (!g_workers_running.load()) {
      // Nothing to clean up: leave now, even from inside a blocking rendezvous call.
      const char msg[] = "nanoddp run: interrupted before any worker started\n";
      ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      ::_exit(128 + sig);
    }
    int none = 0;
    g_first_signal.compare_exchange_strong(none, sig);
    // A hangup never escalates: a closed terminal or ssh session may deliver two (the shell passes
    // its SIGHUP on to its jobs, and the kernel sends the terminal's foreground group one when the
    // shell exits), and a second one must not kill the workers in the middle of their save.
    if (sig != SIGHUP) g_signal_count.fetch_add(1);
  }
  char byte = static_cast<char>(sig);
  ssize_t ignored = ::write(g_pipe[1], &byte, 1);  // a full pipe already wakes the loop
  (void)ignored;
  errno = saved_errno;
}

}  // namespace

void LauncherSignals::install() {
  NANODDP_ASSERT(g_pipe[0] < 0, "LauncherSignals::install called twice");
  NANODDP_CHECK(::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "nanoddp run: cannot create a pipe: {}",
                std::strerror(errno));
  // SA_RESTART: interrupted reads and writes resume instead of failing with EINTR (poll() still
  // returns EINTR; the store's socket code and the launcher's loop retry it).
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kHandled) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the launcher mid-cleanup
}

int LauncherSignals::wake_fd() { return g_pipe[0]; }

// The bytes carry no information beyond "look again": the state is in the atomics.
void LauncherSignals::drain() {
  char buf[256];
  while (::read(g_pipe[0], buf, sizeof buf) > 0) {
  }
}

int LauncherSignals::termination_signal() { return g_first_signal.load(); }
int LauncherSignals::termination_count() { return g_signal_count.load(); }
void LauncherSignals::set_workers_running(bool running) { g_workers_running.store(running); }

void LauncherSignals::reset_in_child() {
  for (int sig : kHandled) ::signal(sig, SIG_DFL);
  ::signal(SIGPIPE, SIG_DFL);  // SIG_IGN would survive exec
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace nanoddp::dist
