#include "dist/work.h"

namespace nanoddp::dist {

void AsyncWork::wait() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool AsyncWork::completed() {
  std::lock_guard lock(mu_);
  return done_;
}

void AsyncWork::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    error_ = std::move(error);
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
    jobs_.push_back({std::move(job), work});
  }
  has_job_.notify_one();
  return work;
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
    }
    std::exception_ptr error;
    try {
      job.fn();
    } catch (...) {
      error = std::current_exception();
    }
    job.work->finish(error);
  }
}

}  // namespace nanoddp::dist
