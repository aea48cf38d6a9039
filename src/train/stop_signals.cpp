#include "train/stop_signals.h"

#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/collective_watch.h"
#include "core/error.h"
#include "ops/backend.h"

namespace nanoddp::train {

namespace {

// Note [signals and oneDNN's JIT GEMMs]: oneDNN 2.6's JIT sgemm kernels point rsp into a heap buffer
// while they run (oneDNN issue 4845, fixed upstream in 3.11; Debian 12 ships 2.6). A signal handled
// on the interrupted stack has its frame written there, into the heap: 1 in 4-50 SIGTERMs during
// a CPU run with a busy machine aborted at a later free() with "corrupted size vs. prev_size"
// (core dump: free inside dnnl_sgemm), and the run's work was lost. So the handler runs on an
// alternate signal stack (SA_ONSTACK), set up on every thread that runs GEMMs: the caller's and
// the OpenMP team's. Other threads (Gloo's, the store's) run no JIT code.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) std::_Exit(128 + sig);
  g_stop_signal = sig;
  dist::note_stop_signal(sig);  // a rank blocked in a collective learns of it too (Note [known departures])
}

// This thread's alternate signal stack, made once and kept for the thread's life (disabled before
// its memory goes). 64 KiB: a signal frame holds the whole AVX-512 (and AMX) register state.
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

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction g_old[std::size(kStopSignals)];

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  ops::on_every_cpu_thread(use_alternate_signal_stack);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK | SA_RESTART;  // SA_RESTART: as std::signal does on Linux
  for (size_t i = 0; i < std::size(kStopSignals); i++) ::sigaction(kStopSignals[i], &sa, &g_old[i]);
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < std::size(kStopSignals); i++) ::sigaction(kStopSignals[i], &g_old[i], nullptr);
}

int StopSignals::received() { return static_cast<int>(g_stop_signal); }

}  // namespace nanoddp::train
