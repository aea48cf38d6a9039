// Ranks as threads of one process for the DDP tests: each with its own Gloo group over a shared
// in-memory store (as in gloo's own tests).
#pragma once

#include <omp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "comm/gloo_group.h"
#include "rendezvous/hash_store.h"
#include "rendezvous/prefix_store.h"

namespace nanoddp::testing {

// Runs fn(rank, group) for `world` ranks, each a thread with one OpenMP thread, and waits for all
// of them. fn must not throw (a thread's exception ends the test binary).
inline void run_ranks(int world, const std::function<void(int, dist::ProcessGroup&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto store = std::make_shared<dist::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      omp_set_num_threads(1);
      dist::GlooGroupOptions go;
      go.timeout = timeout;
      dist::GlooGroup group(std::make_shared<dist::PrefixStore>("ranks", store), r, world, go);
      fn(r, group);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace nanoddp::testing
