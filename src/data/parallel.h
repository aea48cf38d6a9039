// A dynamically scheduled parallel loop on plain std::threads, for the data layer's batch work
// (encoding documents, counting pre-tokens). Items are handed out one at a time through an atomic
// counter, so uneven items (documents of very different lengths) balance across threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace nanoddp::data {

// Calls fn(item, worker) for every item in [0, n) on `threads` workers (worker in [0, threads)).
// The calling thread is worker 0. The first exception thrown by fn is rethrown after all workers
// stop; items not yet started are skipped once one has thrown.
template <typename Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&](int worker) {
    for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < n;) {
      try {
        fn(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  const int workers = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; w++) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace nanoddp::data
