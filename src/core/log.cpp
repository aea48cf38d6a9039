#include "core/log.h"

#include <atomic>

namespace nanoddp::log {

namespace {
// Atomics: set once at start-up, read by any thread that logs.
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() { return g_rank; }
int world_size() { return g_world; }
bool is_primary() { return g_rank == 0; }

void warn_line(const std::string& text) {
  if (g_world > 1)
    fmt::print(stderr, "[rank {}] warning: {}\n", g_rank.load(), text);
  else
    fmt::print(stderr, "warning: {}\n", text);
  std::fflush(stderr);
}

}  // namespace nanoddp::log
