// Work handles and the issue-order worker the CPU backends (Gloo, MPI) run collectives on.
//
// A collective call validates its arguments on the caller's thread, then appends a job to the
// WorkQueue and returns an AsyncWork at once; one worker thread runs the jobs strictly in issue
// order (every rank issues the same sequence, so the ranks meet in each collective), and marks each
// AsyncWork done, with the job's exception if it threw. The caller overlaps its own computation
// with communication until it calls wait().
//
// Note [caller runs]: handing a job to the worker and the result back costs two thread wake-ups.
// On an idle machine that is ~7 us per collective, but when other processes keep the cores busy
// each wake-up can wait a scheduler slice: measured here with ranks as threads under load, a 1 KiB
// Gloo allreduce took 1.5-2 ms through the worker against 0.4 ms called directly. So when a queue
// allows it, wait() on a job the worker has not started yet runs it on the calling thread (with
// every job queued before it, in order; never two jobs at once), which is what an immediate
// wait() after a small collective does. Jobs waited for later still run on the worker, overlapped.
// (A job stuck for good inside a library call on a caller's thread cannot hand that thread an
// error; the MPI group's watchdog reports it and ends the job instead, see comm/mpi_group.h.)
//
// A watchdog that finds a job stuck inside a library call closes the queue with an error: the
// stuck job's work and every queued one fail with it at once, and so does every job enqueued
// later, so no wait() blocks on a worker that will never come back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/process_group.h"

namespace nanoddp::dist {

class WorkQueue;

class AsyncWork final : public Work {
 public:
  void wait() override;
  bool completed() override;
  // Marks the work done; `error` (may be null) is rethrown by every wait(). Only the first call
  // counts (a watchdog may fail a work whose job finishes later).
  void finish(std::exception_ptr error);

 private:
  friend class WorkQueue;
  struct QueueCore;
  std::weak_ptr<QueueCore> queue_;  // set when the caller may run the job (Note [caller runs])
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
  // callers_may_run: see Note [caller runs].
  explicit WorkQueue(bool callers_may_run = true);
  // Runs the jobs still queued, then stops the worker.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  std::shared_ptr<AsyncWork> enqueue(std::function<void()> job);

  // Fails the running job's work and every queued one with `error`, and every job enqueued from
  // now on. The worker itself stays wherever it is; destroying the queue waits for it to return.
  void close_with_error(std::exception_ptr error);

  // Whether the calling thread is this queue's worker (false in a job run by a waiting caller).
  bool on_worker_thread() const { return std::this_thread::get_id() == worker_.get_id(); }

 private:
  void run_worker();

  bool callers_may_run_;
  std::shared_ptr<AsyncWork::QueueCore> core_;
  std::thread worker_;
};

}  // namespace nanoddp::dist
