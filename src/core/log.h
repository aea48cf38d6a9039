// Console output with DDP discipline: print0 writes on rank 0 only (progress, metrics), warn and
// error write on every rank with the rank named, so a message from rank 3 says it is from rank 3.
// Used by train (progress and metrics lines), comm/init (sets the rank) and cli/main.cpp (names the
// rank in error lines).
#pragma once

#include <fmt/format.h>

#include <cstdio>

namespace nanoddp::log {

// Set by comm/init once the process group exists (and again by run_training). Until then the
// process counts as rank 0 of 1, so single-process tools print normally.
void set_rank(int rank, int world_size);
int rank();
int world_size();
bool is_primary();

// rank 0 only, to stdout, flushed.
template <typename... Args>
void print0(fmt::format_string<Args...> format, Args&&... args) {
  if (!is_primary()) return;
  fmt::print(stdout, format, std::forward<Args>(args)...);
  std::fputc('\n', stdout);
  // Flushed at once: under `nanoddp run` stdout is a pipe to the launcher, where it would otherwise be
  // block-buffered and arrive late.
  std::fflush(stdout);
}

// every rank, to stderr: "[rank R] warning: ..."
void warn_line(const std::string& text);
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  warn_line(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace nanoddp::log
