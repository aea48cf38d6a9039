#include "cli/stop_signal.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstdio>

#include "train/stop_signals.h"

namespace nanoddp::cli {

namespace {

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

}  // namespace

// The handlers, their alternate signal stacks and the second-signal rule are training's
// (train/stop_signals.h): one implementation for every command that stops on a signal.
int StopOnSignal::received() { return train::StopSignals::received(); }

void StopOnSignal::stop(const std::string& command, const std::string& done) {
  const int sig = received();
  std::fflush(stdout);
  fmt::print(stderr, "nanoddp {}: stopped by {} {}\n", command, signal_name(sig), done);
  std::fflush(stderr);
  throw CLI::RuntimeError(128 + sig);
}

}  // namespace nanoddp::cli
