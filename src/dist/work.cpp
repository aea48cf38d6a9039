#include "dist/work.h"

namespace nanoddp::dist {

void AsyncWork::wait() {
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

WorkQueue::WorkQueue() : worker_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  has_job_.notify_one();
  worker_.join();
}

std::shared_ptr<AsyncWork> WorkQueue::enqueue(std::function<void()> job) {
  auto work = std::make_shared<AsyncWork>();
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      work->finish(closed_);
      return work;
    }
    jobs_.push_back({std::move(job), work});
  }
  has_job_.notify_one();
  return work;
}

void WorkQueue::close_with_error(std::exception_ptr error) {
  std::deque<Job> dropped;
  std::shared_ptr<AsyncWork> running;
  {
    std::lock_guard lock(mu_);
    closed_ = error;
    dropped.swap(jobs_);
    running = running_;
  }
  if (running) running->finish(error);
  for (auto& job : dropped) job.work->finish(error);
}

void WorkQueue::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      has_job_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and everything queued has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = job.work;
    }
    std::exception_ptr error;
    try {
      job.fn();
    } catch (...) {
      error = std::current_exception();
    }
    job.work->finish(error);
    std::lock_guard lock(mu_);
    running_.reset();
  }
}

}  // namespace nanoddp::dist
