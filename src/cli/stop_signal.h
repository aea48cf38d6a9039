// Stopping sampling, evaluation and data preparation on a signal. By default SIGTERM, SIGINT and
// SIGHUP end a process at once with no word; `nanoddp sample`, `eval` and `chat` instead finish the
// token being computed (`data prepare` and `tokenizer train` the batch of documents or the merge,
// writing nothing), say on stderr what they stopped and after how much, and exit with 128 + the
// signal, as a process killed by it would (so scripts and schedulers still see that it did not
// finish). A second signal ends the process at once.
//
// The handler runs on an alternate signal stack on every thread that runs GEMMs, for the reason
// train/stop_signals.cpp's Note [signals and oneDNN's JIT GEMMs] gives: oneDNN's JIT kernels point the
// stack pointer into heap memory while they run.
#pragma once

#include <string>

#include "train/stop_signals.h"

namespace nanoddp::cli {

// Installs the handlers for the object's lifetime; the previous ones come back afterwards. One at a
// time per process.
class StopOnSignal {
 public:
  StopOnSignal() = default;

  // The first signal received since construction, 0 if none. Cheap: ask it after every token.
  static int received();
  // After a signal: prints "nanoddp COMMAND: stopped by SIGTERM DONE" on stderr and throws
  // CLI::RuntimeError(128 + signal), which main() turns into that exit status. `done` says how far
  // it got ("after 12 tokens").
  [[noreturn]] static void stop(const std::string& command, const std::string& done);

 private:
  train::StopSignals signals_;
};

}  // namespace nanoddp::cli
