// Stopping a run cleanly on a signal. Note [stopping on a signal]: SIGTERM (what torchrun, the
// launcher and job schedulers send), SIGINT (Ctrl-C) and SIGHUP (what a closed terminal or a lost
// ssh session sends; its default action killed the run unsaved) set a flag; at the next step
// boundary the ranks agree on it (one small allreduce per step), save a checkpoint and stop, so the
// work up to that step is kept. A second signal means "now": the process exits at once with 128 +
// the signal, as it would have without this.
// Used by the trainer (train/trainer.cpp) for the length of its loop.
#pragma once

namespace nanoddp::train {

// Installs the handler for SIGTERM, SIGINT and SIGHUP for the lifetime of the object (training
// only: a library caller's own handlers come back afterwards). One at a time per process.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received since construction, or 0.
  static int received();
};

}  // namespace nanoddp::train
