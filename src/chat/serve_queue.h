// The requests of `nanoddp serve` on their way to the model and their replies on the way back.
//
// The model is not thread-safe (one KV cache, thread-local scratch buffers in the CPU ops, the CUDA
// device bound to the thread that loaded it), so one thread runs every generation: the thread that
// loaded the model. HTTP threads submit jobs to a JobQueue; the model thread takes them in arrival
// order and pushes each reply's Server-Sent Events into its ServeJob, from which the HTTP thread
// that owns the connection streams them. At most max_waiting jobs wait behind the running one; a
// further request is refused (the server answers 503) instead of piling up threads and memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model/generate.h"

namespace nanoddp::chat {

// One completion request: what the model thread needs, and the channel its events flow back on.
class ServeJob {
 public:
  std::vector<int32_t> prompt;     // the rendered conversation, ending with <|assistant_start|>
  model::SampleOptions options;
  int64_t dropped_messages = 0;    // oldest messages left out to fit the context

  // Model thread: one event ("data: ...\n\n"), then finish() once after the last.
  void push(std::string event) {
    std::lock_guard lock(mu_);
    pending_ += event;
    changed_.notify_all();
  }
  void finish() {
    std::lock_guard lock(mu_);
    finished_ = true;
    changed_.notify_all();
  }

  // HTTP thread: waits up to `wait` for events and returns them all (fewer writes than one per
  // event); "" when none came in time (the caller then checks that its client is still there);
  // nullopt once the job is finished and everything was taken.
  std::optional<std::string> take(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, wait, [&] { return !pending_.empty() || finished_; });
    if (pending_.empty()) return finished_ ? std::nullopt : std::optional<std::string>(std::string());
    std::string out;
    out.swap(pending_);
    return out;
  }

  // The client is gone (HTTP thread); the model thread stops generating for it at the next token.
  void cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::string pending_;  // events not yet taken, concatenated
  bool finished_ = false;
  bool cancelled_ = false;
};

class JobQueue {
 public:
  explicit JobQueue(size_t max_waiting) : max_waiting_(max_waiting) {}

  // False when max_waiting jobs already wait (or the server is stopping): the caller refuses it.
  bool submit(std::shared_ptr<ServeJob> job) {
    std::lock_guard lock(mu_);
    if (stopping_ || waiting_.size() >= max_waiting_) return false;
    waiting_.push_back(std::move(job));
    changed_.notify_all();
    return true;
  }

  // The model thread's next job, oldest first; blocks while there is none. nullptr once stopped.
  std::shared_ptr<ServeJob> next() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return !waiting_.empty() || stopping_; });
    if (stopping_) return nullptr;
    auto job = std::move(waiting_.front());
    waiting_.pop_front();
    return job;
  }

  // Takes `job` out of the queue if it still waits (its client left): its place is free at once.
  void withdraw(const std::shared_ptr<ServeJob>& job) {
    std::lock_guard lock(mu_);
    std::erase(waiting_, job);
  }

  // Refuses new jobs and ends the waiting ones with `event` (their clients get it, then the end of
  // the stream); next() returns nullptr from now on. Safe to call more than once, from any thread.
  void stop(const std::string& event) {
    std::deque<std::shared_ptr<ServeJob>> left;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      left.swap(waiting_);
      changed_.notify_all();
    }
    for (auto& job : left) {
      job->push(event);
      job->finish();
    }
  }

  bool stopping() {
    std::lock_guard lock(mu_);
    return stopping_;
  }
  size_t waiting() {
    std::lock_guard lock(mu_);
    return waiting_.size();
  }
  size_t max_waiting() const { return max_waiting_; }

 private:
  const size_t max_waiting_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<ServeJob>> waiting_;  // arrival order; the running job is not here
  bool stopping_ = false;
};

}  // namespace nanoddp::chat
