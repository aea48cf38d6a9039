// The worker processes of one node for one attempt: started together, watched together, stopped
// together.
//
// Each worker is forked into a process group of its own (so a signal reaches the whole tree it may
// have spawned) with PR_SET_PDEATHSIG = SIGKILL (so it dies if the launcher is killed with -9), stdin
// from /dev/null, and stdout / stderr on pipes that the launcher reads (launcher_output.h). The
// launcher is a child subreaper, so what a worker leaves behind is re-parented to it and reaped here.
#pragma once

#include <csignal>

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launch/launcher.h"
#include "launch/launcher_output.h"

namespace nanoddp::dist {

// One worker to start.
struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  std::vector<std::string> env;  // its whole environment, "KEY=VALUE"
  std::string log_path;          // its log file when output goes to files, else ""
  OutputRouting routing;         // where its output goes
};

// How a worker is doing.
struct WorkerStatus {
  enum class State { NotStarted, Running, Exited, Signaled };
  State state = State::NotStarted;
  int code = 0;          // exit code (Exited) or signal number (Signaled)
  bool stopped = false;  // it ended after the launcher began stopping the group: not a failure
  bool failed() const { return !stopped && (state == State::Signaled || (state == State::Exited && code != 0)); }
  // "exited with code 3" / "was killed by SIGKILL"
  std::string describe() const;
};

class WorkerGroup {
 public:
  WorkerGroup(WorkerProgram program, std::vector<WorkerSpec> specs);
  // Kills whatever is left of every worker's process group and reaps it.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Forks every worker. Throws nanoddp::Error when a process or pipe cannot be made.
  void start();

  // Waits up to `timeout` for worker output, a worker exit or a signal to the launcher
  // (LauncherSignals), then forwards the output read and records the exits.
  void pump(std::chrono::milliseconds timeout);

  // What stop() did: how long the workers took to exit after `sig`, and how many it killed.
  struct StopOutcome {
    double waited_s = 0;  // from `sig` to the last exit, or to the SIGKILL
    int running = 0;      // workers running when `sig` was sent
    int killed = 0;       // workers still running when the grace ran out (or a second signal came)
  };
  // Stops every running worker: `sig` (SIGTERM, or the SIGINT / SIGHUP the launcher received, as
  // torchrun passes it on) to its process group, SIGKILL to those still running after `grace` (at
  // once if another termination signal reaches the launcher meanwhile; the line saying so names
  // `why`, where the grace came from), then reaps them and passes on the rest of their output.
  StopOutcome stop(std::chrono::milliseconds grace, int sig = SIGTERM, const std::string& why = "");

  size_t size() const { return workers_.size(); }
  const WorkerSpec& spec(size_t i) const { return workers_[i].spec; }
  const WorkerStatus& status(size_t i) const { return workers_[i].status; }
  pid_t pid(size_t i) const { return workers_[i].pid; }
  // Whether worker i's process group may still have members, and so is signalled by stop().
  bool group_alive(size_t i) const { return workers_[i].pid > 0 && !workers_[i].group_gone; }
  bool any_running() const;
  bool all_succeeded() const;
  // The worker whose failure was seen first, or -1.
  int first_failure() const { return first_failure_; }
  // The last lines of worker i's output (after reading what its pipes still hold).
  std::vector<std::string> tail(size_t i);

 private:
  struct Worker {
    WorkerSpec spec;
    pid_t pid = -1;
    int fds[2] = {-1, -1};  // read ends of its stdout and stderr pipes; -1 once at end of file
    std::unique_ptr<WorkerOutput> output;
    WorkerStatus status;
    // Its process group (pgid == pid) has no member left: the number may now belong to another
    // program's group, so it is never signalled again (see forget_empty_groups).
    bool group_gone = false;
  };

  void spawn(Worker& w);
  void reap();
  // Reads what fd `s` of worker `w` holds now (at most `max_bytes`); closes it at end of file.
  void read_stream(Worker& w, int s, size_t max_bytes);
  void signal_all(int sig);
  void forget_empty_groups();
  void kill_adopted_children();
  bool any_pipe_open() const;

  WorkerProgram program_;
  std::vector<Worker> workers_;
  int first_failure_ = -1;
  bool stopping_ = false;
};

}  // namespace nanoddp::dist
