#include "comm/work.h"

namespace nanoddp::dist {

// The queue's state, shared with the works that may run their job on the caller's thread.
struct AsyncWork::QueueCore {
  struct Job {
    std::function<void()> fn;
    std::shared_ptr<AsyncWork> work;
  };
  std::mutex mu;
  std::condition_variable changed;      // a job was queued, finished, or the queue is stopping
  std::deque<Job> jobs;
  bool busy = false;                    // a job is running (on the worker or a caller)
  std::shared_ptr<AsyncWork> running;   // its work
  std::exception_ptr closed;            // set by close_with_error
  bool stopping = false;

  // Runs the front job on this thread; `lock` is held on entry and exit, released meanwhile.
  void run_front(std::unique_lock<std::mutex>& lock) {
    Job job = std::move(jobs.front());
    jobs.pop_front();
    busy = true;
    running = job.work;
    lock.unlock();
    std::exception_ptr error;
    try {
      job.fn();
    } catch (...) {
      error = std::current_exception();
    }
    job.work->finish(error);
    lock.lock();
    busy = false;
    running.reset();
    changed.notify_all();
  }

  // Note [caller runs]: if `work`'s job is still queued and nothing runs, run the queue up to it.
  void run_until(const AsyncWork* work) {
    std::unique_lock lock(mu);
    while (!busy && !work->done_.load(std::memory_order_acquire)) {
      bool queued = false;
      for (auto& j : jobs) queued = queued || j.work.get() == work;
      if (!queued) return;
      run_front(lock);
    }
  }
};

void AsyncWork::wait() {
  if (auto queue = queue_.lock()) queue->run_until(this);
  {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
  }
  if (error_) std::rethrow_exception(error_);
}

bool AsyncWork::completed() { return done_.load(std::memory_order_acquire); }

void AsyncWork::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
}

WorkQueue::WorkQueue(bool callers_may_run)
    : callers_may_run_(callers_may_run), core_(std::make_shared<AsyncWork::QueueCore>()), worker_([this] {
        run_worker();
      }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(core_->mu);
    core_->stopping = true;
  }
  core_->changed.notify_all();
  worker_.join();
}

std::shared_ptr<AsyncWork> WorkQueue::enqueue(std::function<void()> job) {
  auto work = std::make_shared<AsyncWork>();
  if (callers_may_run_) work->queue_ = core_;
  {
    std::lock_guard lock(core_->mu);
    if (core_->closed) {
      work->finish(core_->closed);
      return work;
    }
    core_->jobs.push_back({std::move(job), work});
  }
  core_->changed.notify_all();
  return work;
}

void WorkQueue::close_with_error(std::exception_ptr error) {
  std::deque<AsyncWork::QueueCore::Job> dropped;
  std::shared_ptr<AsyncWork> running;
  {
    std::lock_guard lock(core_->mu);
    core_->closed = error;
    dropped.swap(core_->jobs);
    running = core_->running;
  }
  if (running) running->finish(error);
  for (auto& job : dropped) job.work->finish(error);
}

void WorkQueue::run_worker() {
  AsyncWork::QueueCore& q = *core_;
  std::unique_lock lock(q.mu);
  for (;;) {
    q.changed.wait(lock, [&] { return (q.stopping || !q.jobs.empty()) && !q.busy; });
    if (q.jobs.empty()) return;  // stopping, and everything queued has run
    q.run_front(lock);
  }
}

}  // namespace nanoddp::dist
