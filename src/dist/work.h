// Work handles and the issue-order worker the CPU backends (Gloo, MPI) run collectives on.
//
// A collective call validates its arguments on the caller's thread, then appends a job to the
// WorkQueue and returns an AsyncWork at once; one worker thread runs the jobs strictly in issue
// order (every rank issues the same sequence, so the ranks meet in each collective), and marks each
// AsyncWork done, with the job's exception if it threw. The caller overlaps its own computation
// with communication until it calls wait().
//
// A watchdog that finds a job stuck inside a library call (dist/mpi_group.*) closes the queue with
// an error: the stuck job's work and every queued one fail with it at once, and so does every job
// enqueued later, so no wait() blocks on a worker that will never come back.
//
// Waiting sleeps on a condition variable: an enqueue + wait round trip of an empty job costs ~7 us
// here. Spinning on both sides first brought that to ~3 us in isolation, but made a 1 KiB MPI
// allreduce 100-200 us instead of 9 us when ranks share cores: MPI busy-polls inside its calls,
// and a spinning waiter takes the core it needs.
#pragma once

#include <atomic>
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
  // Marks the work done; `error` (may be null) is rethrown by every wait(). Only the first call
  // counts (a watchdog may fail a work whose job finishes later).
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;  // written before done_ is set
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

  // Fails the running job's work and every queued one with `error`, and every job enqueued from
  // now on. The worker itself stays wherever it is; destroying the queue waits for it to return.
  void close_with_error(std::exception_ptr error);

 private:
  void run();

  struct Job {
    std::function<void()> fn;
    std::shared_ptr<AsyncWork> work;
  };
  std::mutex mu_;
  std::condition_variable has_job_;
  std::deque<Job> jobs_;
  std::shared_ptr<AsyncWork> running_;  // the work of the job the worker is running
  std::exception_ptr closed_;           // set by close_with_error
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace nanoddp::dist
