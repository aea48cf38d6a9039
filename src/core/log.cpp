#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace nanoddp::log {

namespace {
// Atomics: set once at start-up, read by any thread that logs.
std::atomic<int> g_rank{0};
std::atomic<int> g_world{1};

// The live line (status0): shown only when stdout is a terminal. Guarded, as any thread may log.
std::mutex g_out_mutex;
std::string g_status;
bool stdout_is_terminal() {
  static const bool tty = ::isatty(STDOUT_FILENO) == 1;
  return tty;
}
// "\r" then erase to the end of the line (ANSI EL): the cursor is back at the live line's start.
constexpr const char* kClearLine = "\r\033[K";
}  // namespace

void print0_line(const std::string& text) {
  if (!is_primary()) return;
  std::lock_guard<std::mutex> lock(g_out_mutex);
  if (!g_status.empty()) std::fputs(kClearLine, stdout);
  std::fputs(text.c_str(), stdout);
  std::fputc('\n', stdout);
  if (!g_status.empty()) std::fputs(g_status.c_str(), stdout);
  // Flushed at once: under `nanoddp run` stdout is a pipe to the launcher, where it would otherwise be
  // block-buffered and arrive late.
  std::fflush(stdout);
}

void status0(const std::string& text) {
  if (!is_primary()) return;
  if (!stdout_is_terminal()) return print0_line(text);
  std::lock_guard<std::mutex> lock(g_out_mutex);
  std::fputs(kClearLine, stdout);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  g_status = text;
}

void end_status0() {
  if (!is_primary()) return;
  std::lock_guard<std::mutex> lock(g_out_mutex);
  if (g_status.empty()) return;
  std::fputc('\n', stdout);
  std::fflush(stdout);
  g_status.clear();
}

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() { return g_rank; }
int world_size() { return g_world; }
bool is_primary() { return g_rank == 0; }

// Under `nanoddp run` (which sets NANODDP_AGENT_STORE=1 for its workers) the launcher names the rank
// on each console line already; naming it again would print "[rank 0]: [rank 0] warning: ...".
bool launcher_names_rank() {
  static const bool named = [] {
    const char* v = std::getenv("NANODDP_AGENT_STORE");
    return v != nullptr && std::string(v) == "1";
  }();
  return named;
}

void warn_line(const std::string& text) {
  if (g_world > 1 && !launcher_names_rank())
    fmt::print(stderr, "[rank {}] warning: {}\n", g_rank.load(), text);
  else
    fmt::print(stderr, "warning: {}\n", text);
  std::fflush(stderr);
}

}  // namespace nanoddp::log
