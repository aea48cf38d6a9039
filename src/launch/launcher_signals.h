// How the launcher hears about signals: the handlers only write a byte to a pipe (the self-pipe
// trick), and the launcher's poll() loop watches the pipe's read end next to the workers' output. So
// a worker's exit (SIGCHLD) or a Ctrl-C wakes the loop at once, whichever thread the kernel picked to
// deliver the signal to (the store server runs a thread of its own).
//
// Before any worker is running, SIGINT / SIGTERM / SIGHUP / SIGQUIT end the launcher at once (status
// 128 + the signal) so that a launcher blocked connecting to the store can still be interrupted;
// while workers run, or while the launcher waits at a join (which polls), the loop handles them
// (stop the workers or tell the other nodes, then exit).
#pragma once

#include <string>

namespace nanoddp::dist {

// "SIGTERM", "SIGINT", ...; "signal N" for a number without a name.
std::string signal_name(int sig);

class LauncherSignals {
 public:
  // Installs the handlers (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD) and ignores SIGPIPE. Once per process.
  static void install();

  // The pipe's read end, for poll(). Readable after any of the signals above.
  static int wake_fd();
  // Empties the pipe. Call when wake_fd() polls readable.
  static void drain();

  // The first termination signal received (SIGINT, SIGTERM, SIGHUP or SIGQUIT), 0 when none.
  static int termination_signal();
  // How many termination signals other than SIGHUP were received (a second Ctrl-C escalates to
  // SIGKILL; a second SIGHUP, which a hangup may bring, does not).
  static int termination_count();

  // Whether workers may be running: while true the handlers leave termination to the loop.
  static void set_workers_running(bool running);

  // For forked children before exec: every handled signal back to its default, none blocked.
  // Async-signal-safe.
  static void reset_in_child();
};

}  // namespace nanoddp::dist
