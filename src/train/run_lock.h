// One writer per run folder. Two runs writing one --out (two `--resume latest` started at once, a
// second job given the same folder) would replace each other's checkpoints, and one's --keep_last
// would delete the other's. So a run holds an advisory lock, flock(2) on OUT/run.lock, from before
// it looks at the folder until it ends: the kernel releases it when the process ends, however it
// ends (kill -9 included), so a killed run never blocks the next one. The file names its holder
// ("pid 1234 on host node7") for the message the second writer gets. Only rank 0 writes into the
// folder, so only rank 0 takes the lock (train/run_checkpoints.h tells the other ranks).
#pragma once

#include <string>

namespace nanoddp::train {

class RunLock {
 public:
  // Creates OUT if needed and takes the lock on OUT/run.lock, or throws nanoddp::Error naming the
  // holder's pid and host (or why the file cannot be made).
  explicit RunLock(const std::string& out);
  ~RunLock();  // closes the file, which releases the lock
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace nanoddp::train
