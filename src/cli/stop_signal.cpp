#include "cli/stop_signal.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace nanoddp::cli {

namespace {

constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_signal(int sig) {
  if (g_signal != 0) std::_Exit(128 + sig);
  g_signal = sig;
}

// This thread's alternate signal stack, made once and kept for the thread's life. 64 KiB: a signal
// frame holds the whole AVX-512 (and AMX) register state.
void use_alternate_signal_stack() {
  struct AltStack {
    std::vector<char> memory = std::vector<char>(64 * 1024);
    AltStack() {
      stack_t ss{};
      ss.ss_sp = memory.data();
      ss.ss_size = memory.size();
      NANODDP_CHECK(::sigaltstack(&ss, nullptr) == 0, "sigaltstack failed: {}", std::strerror(errno));
    }
    ~AltStack() {
      stack_t ss{};
      ss.ss_flags = SS_DISABLE;
      ::sigaltstack(&ss, nullptr);
    }
  };
  thread_local AltStack stack;
  (void)stack;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace

StopOnSignal::StopOnSignal() {
  g_signal = 0;
  ops::on_every_cpu_thread(use_alternate_signal_stack);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  for (int i = 0; i < 3; i++) ::sigaction(kSignals[i], &sa, &old_[i]);
}

StopOnSignal::~StopOnSignal() {
  for (int i = 0; i < 3; i++) ::sigaction(kSignals[i], &old_[i], nullptr);
}

int StopOnSignal::received() { return g_signal; }

void StopOnSignal::stop(const std::string& command, const std::string& done) {
  const int sig = g_signal;
  std::fflush(stdout);
  fmt::print(stderr, "nanoddp {}: stopped by {} {}\n", command, signal_name(sig), done);
  std::fflush(stderr);
  throw CLI::RuntimeError(128 + sig);
}

}  // namespace nanoddp::cli
