// Work handles and the issue-order worker the CPU backends (Gloo, MPI) run collectives on.
//
// A collective call validates its arguments on the caller's thread, then appends a job to the
// WorkQueue and returns an AsyncWork at once; one worker thread runs the jobs strictly in issue
// order (every rank issues the same sequence, so the ranks meet in each collective), and marks each
// AsyncWork done, with the job's exception if it threw. The caller overlaps its own computation
// with communication until it calls wait().
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "dist/process_group.h"

namespace nanoddp::dist {

class AsyncWork final : public Work {
 public:
  void wait() override;
  bool completed() override;
  // Marks the work done; `error` (may be null) is rethrown by every wait().
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Work that is complete when it is made (zero-size collectives, the single-rank group).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool completed() override { return true; }
};

class WorkQueue {
 public:
  WorkQueue();
  // Runs the jobs still queued, then stops the worker.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  std::shared_ptr<AsyncWork> enqueue(std::function<void()> job);

 private:
  void run();

  struct Job {
    std::function<void()> fn;
    std::shared_ptr<AsyncWork> work;
  };
  std::mutex mu_;
  std::condition_variable has_job_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace nanoddp::dist
